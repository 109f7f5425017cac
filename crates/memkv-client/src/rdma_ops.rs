//! Single puts and gets over RDMA (Allocate, RDMA WRITE, Commit; Lookup, RDMA READ,
//! Release: `rdma_flow` with one value), registered buffers, and transport reports.

use memkv_proto::messages::{LookupRequest, LookupResponse, ReleaseRequest};
use memkv_proto::{Opcode, Status};

use crate::client::Client;
use crate::rdma::{RdmaPath, rdma_err};
use crate::rdma_flow::Dest;
use crate::rdma_rails::RailStats;
use crate::{Error, Result};

/// Caller memory registered once with the client's RDMA rail: puts from it and gets into it
/// move bytes between it and the server's arena with no copy.
///
/// Registration is per RDMA device: each buffer belongs to one rail (buffers take the rails in
/// turn). Transfers with servers that rail reaches are zero-copy; otherwise they are staged
/// through another rail.
pub struct RdmaBuffer {
    pub(crate) rail: usize,
    pub(crate) buf: memkv_rdma::RegisteredBuffer,
}

impl RdmaBuffer {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The bytes, to fill before a put.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.buf.as_slice().len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long registering it took (pages populated on one thread per CPU for buffers of
    /// 64 MiB and more, then one `ibv_reg_mr`).
    pub fn registration_time(&self) -> std::time::Duration {
        self.buf.setup_time()
    }
}

pub(crate) fn verify(server: &str, bytes: &[u8], expected: u64) -> Result<()> {
    let actual = memkv_proto::checksum::of(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(rdma_err(
            server,
            format!(
                "value read by RDMA fails its checksum ({actual:#018x}, stored {expected:#018x})"
            ),
        ))
    }
}

impl Client {
    /// `work` under the per-operation deadline.
    pub(crate) async fn within<T>(
        &self,
        server: &str,
        op: &'static str,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                server: server.to_owned(),
                op,
                after: self.timeout,
            })?
    }

    /// Registers `len` bytes of memory for zero-copy [`Client::put_from`] and
    /// [`Client::get_into_buffer`]. Needs an active RDMA transport.
    pub fn register_buffer(&self, len: usize) -> Result<RdmaBuffer> {
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let (rail, buf) = rdma.register(len).map_err(|e| Error::RdmaUnavailable {
            reason: e.to_string(),
        })?;
        Ok(RdmaBuffer { rail, buf })
    }

    /// Registers memory the caller owns (an engine's host KV pool, say) as it is, for the same
    /// zero-copy [`Client::put_batch_from`] and [`Client::get_batch_into_buffer`] as
    /// [`Client::register_buffer`]'s buffers. Needs an active RDMA transport.
    pub fn register_memory(&self, memory: Box<dyn memkv_rdma::CallerMemory>) -> Result<RdmaBuffer> {
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let (rail, buf) = rdma
            .register_caller(memory)
            .map_err(|e| Error::RdmaUnavailable {
                reason: e.to_string(),
            })?;
        Ok(RdmaBuffer { rail, buf })
    }

    /// Stores `buf[..len]` under `key`, RDMA WRITE straight from the registered buffer (or through
    /// a staging buffer when the key's server uses another rail).
    pub async fn put_from(&self, key: &[u8], buf: &RdmaBuffer, len: usize) -> Result<()> {
        let value = buf.as_slice().get(..len).ok_or(Error::TooLarge {
            what: "put_from length",
            len: len as u64,
            limit: buf.len() as u64,
        })?;
        self.check_key(key)?;
        self.check_value(value)?;
        let index = self.owner_index(key);
        let Some(rdma) = self.rdma() else {
            return self.put(key, value).await;
        };
        match self.put_rdma_from(rdma, index, key, value, Some(buf)).await {
            Err(e @ Error::Rdma { .. }) if rdma.failed(&e) => self.put(key, value).await,
            done => done,
        }
    }

    /// Reads the value under `key` into `buf` with RDMA READ straight into it; returns its
    /// length, or `None` when the key does not exist. A value longer than `buf` is `TooLarge`.
    pub async fn get_into_buffer(&self, key: &[u8], buf: &mut RdmaBuffer) -> Result<Option<usize>> {
        self.check_key(key)?;
        let index = self.owner_index(key);
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let cap = buf.len();
        let dest = Dest::Registered {
            buf,
            bases: &[0],
            caps: &[cap],
        };
        one(self.get_values_rdma(rdma, index, "get", &[key], dest).await)
    }

    pub(crate) async fn lookup_pin(
        &self,
        index: usize,
        key: &[u8],
    ) -> Result<Option<LookupResponse>> {
        let server = self.server_name(index);
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
            Status::Ok => LookupResponse::decode(&r.payload)
                .map(Some)
                .map_err(|e| rdma_err(server, e)),
            Status::NotFound => Ok(None),
            _ => Err(Error::from_status(server, r.status, &r.payload)),
        }
    }

    pub(crate) async fn release_pin(&self, index: usize, pin: u64) {
        let release = ReleaseRequest { pin }.encode();
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
    }

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
        self.put_rdma_from(rdma, index, key, value, None).await
    }

    /// `value` is `registered`'s first bytes when given: written with no staging copy.
    async fn put_rdma_from(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        value: &[u8],
        registered: Option<&RdmaBuffer>,
    ) -> Result<()> {
        let direct = registered.map(|b| (b, &[0usize][..]));
        one(self
            .put_values_rdma(rdma, index, "put", &[key], &[value], direct)
            .await)
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
        let dest = Dest::Vecs(std::slice::from_mut(buf));
        let found = one(self.get_values_rdma(rdma, index, "get", &[key], dest).await);
        found.map(|len| len.is_some())
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

    /// What each rail has done: doorbells rung, bytes moved, servers it is dropped for. Empty
    /// when the client never had RDMA.
    pub fn rdma_rail_stats(&self) -> Vec<RailStats> {
        match &self.inner.rdma {
            Some(path) => path.rail_stats(&self.servers()),
            None => Vec::new(),
        }
    }
}

/// The only result of a one-value flow.
fn one<T>(results: Vec<Result<T>>) -> Result<T> {
    results
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(Error::Config("an RDMA operation produced no result".into())))
}
