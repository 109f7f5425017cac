//! The control around RDMA transfers to one server, for one value or many: puts are N
//! Allocates (pipelined on the multiplexed connection), one transfer of every value
//! (`rdma_move`), then N Commits (or Aborts for values that did not move); gets are N Lookups,
//! one transfer, a checksum check per value and N Releases. Every value gets its own result.

use memkv_proto::messages::{
    AbortRequest, AllocateRequest, AllocateResponse, CommitRequest, LookupResponse,
};
use memkv_proto::{Opcode, Status};

use crate::client::Client;
use crate::rdma::{RdmaPath, rdma_err};
use crate::rdma_move::{Remote, merge};
use crate::rdma_ops::{RdmaBuffer, verify};
use crate::{Error, Result};
use futures::future::join_all;

/// Where gets put the values they read.
pub(crate) enum Dest<'a> {
    /// One vector per key, resized to its value.
    Vecs(&'a mut [Vec<u8>]),
    /// Ranges of a registered buffer: key `i`'s value goes at `bases[i]` and may be at most
    /// `caps[i]` bytes. Ranges are disjoint and inside the buffer.
    Registered {
        buf: &'a mut RdmaBuffer,
        bases: &'a [usize],
        caps: &'a [usize],
    },
}

impl Client {
    /// Stores `values[i]` under `keys[i]` on server `index` over RDMA. `direct`: the values are
    /// the registered buffer's bytes at these offsets (no staging copy on its rail).
    pub(crate) async fn put_values_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        op: &'static str,
        keys: &[&[u8]],
        values: &[&[u8]],
        direct: Option<(&RdmaBuffer, &[usize])>,
    ) -> Vec<Result<()>> {
        let server = self.server_name(index).to_owned();
        let work = async {
            let sessions = rdma.sessions(index, &self.inner.pools[index]).await?;
            let allocs = join_all(
                keys.iter()
                    .zip(values)
                    .map(|(key, value)| self.allocate(index, key, value.len())),
            )
            .await;
            let remotes: Vec<Remote> = allocs
                .iter()
                .zip(values)
                .map(|(alloc, value)| match alloc {
                    Ok(a) => Remote {
                        len: value.len(),
                        addr: a.addr,
                        rkey: a.rkey,
                    },
                    Err(_) => Remote::default(),
                })
                .collect();
            let moved = rdma
                .write_values(index, &server, &sessions, &remotes, values, direct)
                .await;
            let settled = join_all(allocs.into_iter().zip(&moved).zip(values).map(
                |((alloc, failed), value)| async move {
                    let alloc = alloc?;
                    if failed.is_some() {
                        self.abort(index, alloc.reservation).await;
                        return Ok(());
                    }
                    self.commit(index, alloc.reservation, memkv_proto::checksum::of(value))
                        .await
                },
            ))
            .await;
            Ok(merge(moved, settled))
        };
        self.within(&server, op, work)
            .await
            .unwrap_or_else(|e| keys.iter().map(|_| Err(e.clone())).collect())
    }

    /// Reads the values of `keys` on server `index` over RDMA into `dest`; per key its length,
    /// or `None` when it does not exist. A value that fails its checksum is an error (and its
    /// vector is left empty).
    pub(crate) async fn get_values_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        op: &'static str,
        keys: &[&[u8]],
        dest: Dest<'_>,
    ) -> Vec<Result<Option<usize>>> {
        let server = self.server_name(index).to_owned();
        let work = async {
            let sessions = rdma.sessions(index, &self.inner.pools[index]).await?;
            let pins = join_all(keys.iter().map(|key| self.lookup_pin(index, key))).await;
            let limit = self.inner.limits.max_value_len;
            let mut found: Vec<Result<Option<usize>>> = Vec::with_capacity(keys.len());
            let mut remotes = Vec::with_capacity(keys.len());
            for (i, pin) in pins.iter().enumerate() {
                let (cap, what) = match &dest {
                    Dest::Vecs(_) => (limit, "value"),
                    Dest::Registered { caps, .. } => {
                        (caps[i] as u64, "value for the registered buffer")
                    }
                };
                let (result, remote) = match pin {
                    Err(e) => (Err(e.clone()), Remote::default()),
                    Ok(None) => (Ok(None), Remote::default()),
                    Ok(Some(p)) if p.len > cap => (
                        Err(Error::TooLarge {
                            what,
                            len: p.len,
                            limit: cap,
                        }),
                        Remote::default(),
                    ),
                    Ok(Some(p)) => (
                        Ok(Some(p.len as usize)),
                        Remote {
                            len: p.len as usize,
                            addr: p.addr,
                            rkey: p.rkey,
                        },
                    ),
                };
                found.push(result);
                remotes.push(remote);
            }
            let moved = match dest {
                Dest::Vecs(vecs) => {
                    for (v, r) in vecs.iter_mut().zip(&remotes) {
                        v.clear();
                        v.resize(r.len, 0);
                    }
                    let dests = vecs.iter_mut().map(Vec::as_mut_slice).collect();
                    let moved = rdma
                        .read_values(index, &server, &sessions, &remotes, dests)
                        .await;
                    self.release_pins(index, &pins);
                    let checked = check_all(&server, &pins, &found, &moved, |i| vecs[i].as_slice());
                    let out = merge(moved, merge(checked, found));
                    for (v, r) in vecs.iter_mut().zip(&out) {
                        if !matches!(r, Ok(Some(_))) {
                            v.clear();
                        }
                    }
                    return Ok(out);
                }
                Dest::Registered { buf, bases, .. } => {
                    let moved = rdma
                        .read_registered(index, &server, &sessions, &remotes, buf, bases)
                        .await;
                    self.release_pins(index, &pins);
                    let checked = check_all(&server, &pins, &found, &moved, |i| {
                        &buf.as_slice()[bases[i]..bases[i] + remotes[i].len]
                    });
                    merge(checked, found)
                }
            };
            Ok(moved)
        };
        self.within(&server, op, work)
            .await
            .unwrap_or_else(|e| keys.iter().map(|_| Err(e.clone())).collect())
    }

    async fn allocate(&self, index: usize, key: &[u8], len: usize) -> Result<AllocateResponse> {
        let server = self.server_name(index);
        let request = AllocateRequest {
            len: len as u64,
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
            return Err(Error::from_status(server, r.status, &r.payload));
        }
        let alloc = AllocateResponse::decode(&r.payload).map_err(|e| rdma_err(server, e))?;
        if alloc.rkey == 0 && len > 0 {
            return Err(rdma_err(
                server,
                "the server gave no remote address (RDMA inactive there)",
            ));
        }
        Ok(alloc)
    }

    async fn commit(&self, index: usize, reservation: u64, sum: u64) -> Result<()> {
        let commit = CommitRequest {
            reservation,
            checksum: sum,
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
            _ => Err(Error::from_status(
                self.server_name(index),
                r.status,
                &r.payload,
            )),
        }
    }

    /// Gives a reservation back; a lost Abort only lets the lease run out.
    async fn abort(&self, index: usize, reservation: u64) {
        let abort = AbortRequest { reservation }.encode();
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
    }

    /// Sends the Releases without waiting for them: the values are read by now, and waiting
    /// would add a round trip to every get. A Release that never arrives (the process exits)
    /// only leaves the pin to its lease.
    fn release_pins(&self, index: usize, pins: &[Result<Option<LookupResponse>>]) {
        let pins: Vec<u64> = pins
            .iter()
            .filter_map(|p| p.as_ref().ok().and_then(Option::as_ref))
            .map(|p| p.pin)
            .collect();
        if pins.is_empty() {
            return;
        }
        let client = self.clone();
        tokio::spawn(async move {
            join_all(pins.iter().map(|&pin| client.release_pin(index, pin))).await;
        });
    }
}

/// Checksum errors of the values that were read (found, within their limit, moved).
fn check_all<'b>(
    server: &str,
    pins: &[Result<Option<LookupResponse>>],
    found: &[Result<Option<usize>>],
    moved: &[Option<Error>],
    bytes: impl Fn(usize) -> &'b [u8],
) -> Vec<Option<Error>> {
    (0..pins.len())
        .map(|i| match (&pins[i], &found[i], &moved[i]) {
            (Ok(Some(p)), Ok(Some(_)), None) => verify(server, bytes(i), p.checksum).err(),
            _ => None,
        })
        .collect()
}
