//! Puts and gets of many values with one attached server. A put is, per value and for all
//! values at once, an Allocate, a copy into the reservation (hashed as it is copied) and a
//! Commit carrying that hash and the arena's id; a get is N Lookups, a copy of each pinned
//! value out (hashed as it is copied, then checked), N Releases.
//!
//! A failure of the mapping itself (an address outside the arena, a Commit refused because
//! the mapping is of another arena, a value read out that does not match its checksum: a
//! restarted server is the usual cause) is [`Error::SharedMemory`]; the
//! caller detaches and, under `auto`, serves those items another way.

use std::sync::Arc;

use memkv_proto::Status;
use memkv_proto::messages::LookupResponse;

use super::attach::Attached;
use crate::client::Client;
use crate::{Error, Result};
use futures::future::join_all;

/// Where gets put the values they read.
pub(crate) enum LocalDest<'a> {
    /// One vector per key, resized to its value.
    Vecs(Vec<&'a mut Vec<u8>>),
    /// One caller buffer per key; a value lands at its front.
    Slices(Vec<&'a mut [u8]>),
}

fn mapping_error(server: &str, reason: impl std::fmt::Display) -> Error {
    Error::SharedMemory {
        server: server.to_owned(),
        reason: reason.to_string(),
    }
}

impl Client {
    /// Stores `values[i]` under `keys[i]` on server `index` through its mapped arena.
    pub(crate) async fn put_values_local<'a>(
        &self,
        at: &Arc<Attached>,
        index: usize,
        op: &'static str,
        keys: &[&'a [u8]],
        values: &[&'a [u8]],
    ) -> Vec<Result<()>> {
        let server = self.server_name(index).to_owned();
        // Each value runs Allocate -> copy -> Commit on its own, all of them concurrently: a
        // value's Commit leaves as soon as its copy ends, so the server publishes it while the
        // client copies the next one, instead of every Commit waiting for the batch's last copy.
        let one = |key: &'a [u8], value: &'a [u8]| {
            let server = &server;
            async move {
                let alloc = self.reserve(index, key, value.len()).await?;
                let sum = at
                    .offset(alloc.addr, value.len())
                    .ok_or_else(|| {
                        mapping_error(
                            server,
                            format!(
                                "reservation of {} bytes at {:#x} is outside the mapped arena",
                                value.len(),
                                alloc.addr
                            ),
                        )
                    })
                    .and_then(|offset| {
                        at.arena
                            .write(offset, value)
                            .map_err(|e| mapping_error(server, e))
                    });
                match sum {
                    Ok(sum) => self
                        .commit_copied(index, alloc.reservation, sum, at.arena_id)
                        .await
                        .map_err(|e| match e {
                            // Our bytes did not land where the server looks: a mapping of
                            // another arena (a restarted server's), or a server that predates
                            // the shared-memory Commit. Either way: attach again.
                            Error::Server {
                                status: Status::BadRequest,
                                ref server,
                                ref message,
                            } => mapping_error(server, format!("commit: {message}")),
                            e => e,
                        }),
                    Err(e) => {
                        self.abort(index, alloc.reservation).await;
                        Err(e)
                    }
                }
            }
        };
        let work = async { Ok(join_all(keys.iter().zip(values).map(|(k, v)| one(k, v))).await) };
        self.within(&server, "put", work)
            .await
            .unwrap_or_else(|e: Error| keys.iter().map(|_| Err(e.clone())).collect())
            .into_iter()
            .map(|r| r.map_err(|e| named(e, op)))
            .collect()
    }

    /// Reads the values of `keys` on server `index` out of its mapped arena into `dest`; per
    /// key its length, or `None` when absent.
    pub(crate) async fn get_values_local(
        &self,
        at: &Arc<Attached>,
        index: usize,
        op: &'static str,
        keys: &[&[u8]],
        dest: LocalDest<'_>,
    ) -> Vec<Result<Option<usize>>> {
        let server = self.server_name(index).to_owned();
        let work = async {
            let pins = join_all(keys.iter().map(|key| self.lookup_pin(index, key))).await;
            let limit = self.inner.limits.max_value_len;
            let mut slices: Vec<Option<&mut [u8]>> = match dest {
                LocalDest::Vecs(vecs) => vecs
                    .into_iter()
                    .zip(&pins)
                    .map(|(v, pin)| {
                        v.clear();
                        match pin {
                            Ok(Some(p)) if p.len <= limit => {
                                v.resize(p.len as usize, 0);
                                Some(v.as_mut_slice())
                            }
                            _ => None,
                        }
                    })
                    .collect(),
                LocalDest::Slices(slices) => slices.into_iter().map(Some).collect(),
            };
            let out: Vec<Result<Option<usize>>> = pins
                .iter()
                .zip(slices.iter_mut())
                .map(|(pin, slice)| match pin {
                    Err(e) => Err(e.clone()),
                    Ok(None) => Ok(None),
                    Ok(Some(p)) => copy_out(&server, at, p, slice.as_deref_mut(), limit).map(Some),
                })
                .collect();
            self.release_pins(index, &pins);
            Ok(out)
        };
        self.within(&server, "get", work)
            .await
            .unwrap_or_else(|e: Error| keys.iter().map(|_| Err(e.clone())).collect())
            .into_iter()
            .map(|r| r.map_err(|e| named(e, op)))
            .collect()
    }
}

/// Copies one pinned value into `dst` and checks it against its stored checksum.
fn copy_out(
    server: &str,
    at: &Attached,
    pin: &LookupResponse,
    dst: Option<&mut [u8]>,
    limit: u64,
) -> Result<usize> {
    let Some(dst) = dst else {
        return Err(Error::TooLarge {
            what: "value",
            len: pin.len,
            limit,
        });
    };
    let capacity = dst.len() as u64;
    let Some(dst) = dst
        .get_mut(..pin.len as usize)
        .filter(|_| pin.len <= capacity)
    else {
        return Err(Error::BufferTooSmall {
            len: pin.len,
            capacity,
        });
    };
    let offset = at.offset(pin.addr, dst.len()).ok_or_else(|| {
        mapping_error(
            server,
            format!(
                "value of {} bytes at {:#x} is outside the mapped arena",
                pin.len, pin.addr
            ),
        )
    })?;
    let sum = at
        .arena
        .read(offset, dst)
        .map_err(|e| mapping_error(server, e))?;
    if sum != pin.checksum {
        return Err(mapping_error(
            server,
            format!(
                "value read from the mapped arena fails its checksum (stored {:#018x}, read {sum:#018x})",
                pin.checksum
            ),
        ));
    }
    Ok(dst.len())
}

/// Timeouts name the caller's operation rather than the inner step's.
pub(super) fn named(e: Error, op: &'static str) -> Error {
    match e {
        Error::Timeout { server, after, .. } => Error::Timeout { server, op, after },
        e => e,
    }
}
