//! Puts and gets over RDMA: Allocate, RDMA WRITE, Commit; Lookup, RDMA READ, Release.

use memkv_proto::messages::{
    AbortRequest, AllocateRequest, AllocateResponse, CommitRequest, LookupRequest, LookupResponse,
    ReleaseRequest,
};
use memkv_proto::{Opcode, Status, checksum};

use crate::client::Client;
use crate::rdma::RdmaPath;
use crate::{Error, Result};

fn rdma_err(server: &str, reason: impl std::fmt::Display) -> Error {
    Error::Rdma {
        server: server.to_owned(),
        reason: reason.to_string(),
    }
}

impl Client {
    pub(crate) fn rdma(&self) -> Option<&RdmaPath> {
        self.inner.rdma.as_ref().filter(|r| r.active())
    }

    /// A put with the value moved by RDMA WRITE into the server's arena.
    pub(crate) async fn put_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let server = self.server_name(index).to_owned();
        let work = async {
            let session = rdma.session(index, &self.inner.pools[index]).await?;
            let request = AllocateRequest {
                len: value.len() as u64,
                lease_ms: 0,
            }
            .encode();
            let r = self
                .exchange(
                    index,
                    "allocate",
                    Opcode::Allocate,
                    key,
                    &[&request],
                    None,
                    Vec::new(),
                )
                .await?;
            if r.status != Status::Ok {
                return Err(Error::from_status(&server, r.status, &r.payload));
            }
            let alloc = AllocateResponse::decode(&r.payload).map_err(|e| rdma_err(&server, e))?;
            if alloc.rkey == 0 && !value.is_empty() {
                return Err(rdma_err(
                    &server,
                    "the server gave no remote address (RDMA inactive there)",
                ));
            }
            if !value.is_empty()
                && let Err(e) = session
                    .qp
                    .write_from_slice(rdma.staging(&session), value, alloc.addr, alloc.rkey)
                    .await
            {
                let abort = AbortRequest {
                    reservation: alloc.reservation,
                }
                .encode();
                let _ = self
                    .exchange(
                        index,
                        "abort",
                        Opcode::Abort,
                        &[],
                        &[&abort],
                        None,
                        Vec::new(),
                    )
                    .await;
                return Err(rdma_err(&server, e));
            }
            let commit = CommitRequest {
                reservation: alloc.reservation,
                checksum: checksum::of(value),
            }
            .encode();
            let r = self
                .exchange(
                    index,
                    "commit",
                    Opcode::Commit,
                    &[],
                    &[&commit],
                    None,
                    Vec::new(),
                )
                .await?;
            match r.status {
                Status::Ok => Ok(()),
                _ => Err(Error::from_status(&server, r.status, &r.payload)),
            }
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                server: server.clone(),
                op: "put",
                after: self.timeout,
            })?
    }

    /// A get with the value moved by RDMA READ from the server's arena, checked against its
    /// checksum. `Ok(false)`: no such key.
    pub(crate) async fn get_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let server = self.server_name(index).to_owned();
        let work = async {
            let session = rdma.session(index, &self.inner.pools[index]).await?;
            let request = LookupRequest { lease_ms: 0 }.encode();
            let r = self
                .exchange(
                    index,
                    "lookup",
                    Opcode::Lookup,
                    key,
                    &[&request],
                    None,
                    Vec::new(),
                )
                .await?;
            match r.status {
                Status::Ok => {}
                Status::NotFound => return Ok(false),
                _ => return Err(Error::from_status(&server, r.status, &r.payload)),
            }
            let pin = LookupResponse::decode(&r.payload).map_err(|e| rdma_err(&server, e))?;
            let limit = self.inner.limits.max_value_len;
            if pin.len > limit {
                return Err(Error::TooLarge {
                    what: "value",
                    len: pin.len,
                    limit,
                });
            }
            buf.clear();
            buf.resize(pin.len as usize, 0);
            let read = if pin.len == 0 {
                Ok(())
            } else if pin.rkey == 0 {
                Err(rdma_err(
                    &server,
                    "the server gave no remote address (RDMA inactive there)",
                ))
            } else {
                session
                    .qp
                    .read_into_slice(rdma.staging(&session), buf, pin.addr, pin.rkey)
                    .await
                    .map_err(|e| rdma_err(&server, e))
            };
            let release = ReleaseRequest { pin: pin.pin }.encode();
            let _ = self
                .exchange(
                    index,
                    "release",
                    Opcode::Release,
                    &[],
                    &[&release],
                    None,
                    Vec::new(),
                )
                .await;
            read?;
            let actual = checksum::of(buf);
            if actual != pin.checksum {
                buf.clear();
                return Err(rdma_err(
                    &server,
                    format!(
                        "value read by RDMA fails its checksum ({actual:#018x}, stored {:#018x})",
                        pin.checksum
                    ),
                ));
            }
            Ok(true)
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                server: server.clone(),
                op: "get",
                after: self.timeout,
            })?
    }

    /// `"rdma"` while RDMA carries values, else `"tcp"`.
    pub fn transport(&self) -> &'static str {
        if self.rdma().is_some() { "rdma" } else { "tcp" }
    }

    /// Why values move over TCP: `transport tcp`, no usable RDMA rail at start-up, or the
    /// first RDMA failure of an `auto` client. `None` while RDMA carries values.
    pub fn rdma_fallback_reason(&self) -> Option<String> {
        match &self.inner.rdma {
            Some(path) => path.fallback_reason(),
            None => self.inner.rdma_unavailable.clone(),
        }
    }

    /// The RDMA devices in use (empty on TCP).
    pub fn rdma_rails(&self) -> Vec<String> {
        self.rdma().map(RdmaPath::rail_names).unwrap_or_default()
    }
}
