//! The control around RDMA transfers to one server, for one value or many: puts are N
//! Allocates (pipelined on the multiplexed connection), one transfer of every value
//! ([`super::mover`]), then N Commits (or Aborts for values that did not move); gets are N Lookups,
//! one transfer, a checksum check per value and N Releases. Every value gets its own result.

use std::task::Poll;

use memkv_proto::messages::LookupResponse;
use memkv_rdma::{LentPieces, SharedPieces};

use super::buffer::verify;
use super::mover::{Remote, merge};
use super::path::{ArenaWindow, RdmaPath};
use crate::client::Client;
use crate::{Error, Result};
use futures::future::join_all;

/// Where gets put the values they read.
pub(crate) enum Dest<'a> {
    /// One vector per key, resized to its value.
    Vecs(&'a mut [Vec<u8>]),
    /// Pieces of a buffer registered on rail `rail`: key `i`'s value goes at the start of
    /// piece `i` and may be at most as long as it.
    Registered { lent: LentPieces<'a>, rail: usize },
}

impl Client {
    /// Stores `values[i]` under `keys[i]` on server `index` over RDMA. `direct`: the values are
    /// these pieces of a buffer registered on this rail (no staging copy on it).
    pub(crate) async fn put_values_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        op: &'static str,
        keys: &[&[u8]],
        values: &[&[u8]],
        direct: Option<(&SharedPieces<'_>, usize)>,
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
            let mut remotes: Vec<Remote> = allocs
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
            let windows: Vec<ArenaWindow> = sessions.iter().map(|s| s.arena).collect();
            // A refused range moves nothing; its reservation is aborted as a failed move's.
            let refused: Vec<Option<Error>> = remotes
                .iter_mut()
                .map(|r| {
                    let e = r.check(&server, &windows).err();
                    if e.is_some() {
                        *r = Remote::default();
                    }
                    e
                })
                .collect();
            // The writes are posted first and the values hashed while their bytes move: a NIC
            // then overlaps the two, where hashing first or last would add the hash's time to
            // every put's (about 160 us a MiB from memory).
            let write = rdma.write_values(index, &server, &sessions, &remotes, values, direct);
            tokio::pin!(write);
            let posted = futures::poll!(&mut write);
            let sums: Vec<u64> = values
                .iter()
                .map(|v| memkv_proto::checksum::of(v))
                .collect();
            let mut moved = match posted {
                Poll::Ready(moved) => moved,
                Poll::Pending => write.await,
            };
            for (m, e) in moved.iter_mut().zip(refused) {
                if e.is_some() {
                    *m = e;
                }
            }
            let settled = join_all(allocs.into_iter().zip(&moved).zip(sums).map(
                |((alloc, failed), sum)| async move {
                    let alloc = alloc?;
                    if failed.is_some() {
                        self.abort(index, alloc.reservation).await;
                        return Ok(());
                    }
                    self.commit(index, alloc.reservation, sum).await
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
            let windows: Vec<ArenaWindow> = sessions.iter().map(|s| s.arena).collect();
            for (i, pin) in pins.iter().enumerate() {
                let (cap, what) = match &dest {
                    Dest::Vecs(_) => (limit, "value"),
                    Dest::Registered { lent, .. } => (
                        lent.piece(i).len() as u64,
                        "value for the registered buffer",
                    ),
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
                    Ok(Some(p)) => {
                        let remote = Remote {
                            len: p.len as usize,
                            addr: p.addr,
                            rkey: p.rkey,
                        };
                        match remote.check(&server, &windows) {
                            Ok(()) => (Ok(Some(p.len as usize)), remote),
                            Err(e) => (Err(e), Remote::default()),
                        }
                    }
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
                Dest::Registered { mut lent, rail } => {
                    let moved = rdma
                        .read_registered(index, &server, &sessions, &remotes, &mut lent, rail)
                        .await;
                    self.release_pins(index, &pins);
                    let checked = check_all(&server, &pins, &found, &moved, |i| {
                        &lent.piece(i)[..remotes[i].len]
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
