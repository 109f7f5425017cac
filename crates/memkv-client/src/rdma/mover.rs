//! Moving the value bytes of one operation (one value or a batch's) to or from one server.
//!
//! From a registered buffer whose rail is up: one `write_batch` / `read_batch` for every value
//! (one doorbell while the congestion window admits the whole chain), no copies. Otherwise the
//! bytes are spread over the server's live rails (`rdma_plan::spread`, striping large values)
//! and, per rail, packed into staging buffers: one chain of work requests per buffer. A rail
//! that fails is dropped for the server and its share is moved once more on another rail that
//! succeeded; what still fails is reported per value.

use std::sync::Arc;

use memkv_rdma::{LentPieces, RdmaError, SharedPieces, Transfer};

use super::path::{ArenaWindow, RdmaPath, Session, rdma_err};
use super::plan::{Segment, pack, split_for_rails, spread};
use crate::{Error, Result};
use futures::future::join_all;

/// Where a value lives in the server's arena; `len` 0 moves nothing. Checked with
/// [`Remote::check`] before it is moved, so `addr + offset` (offset < `len`) cannot overflow.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Remote {
    pub len: usize,
    pub addr: u64,
    pub rkey: u32,
}

impl Remote {
    /// Refuses a range an Allocate or Lookup answer gave that lies outside what the server
    /// announced on any of `windows` (the rails it is moved on): a misbehaving or confused
    /// server must not steer this client's READs and WRITEs to memory it did not offer, nor
    /// make an address computation wrap.
    pub fn check(&self, server: &str, windows: &[ArenaWindow]) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let end = u64::try_from(self.len)
            .ok()
            .and_then(|len| self.addr.checked_add(len));
        let outside = windows
            .iter()
            .find(|w| end.is_none() || self.rkey != w.rkey || self.addr < w.addr);
        match outside {
            None => Ok(()),
            Some(w) => Err(Error::Protocol {
                server: server.to_owned(),
                source: memkv_proto::ProtoError::BadRequest(format!(
                    "the server gave the remote range of {} bytes at {:#x} (rkey {:#x}), \
                     outside the memory it announced in Connect (from {:#x}, rkey {:#x})",
                    self.len, self.addr, self.rkey, w.addr, w.rkey
                )),
            }),
        }
    }
}

/// Per value: `None` when its bytes moved, else why not.
pub(crate) type Moved = Vec<Option<Error>>;

impl RdmaPath {
    /// WRITEs `values[i]` (`remotes[i].len` bytes of it) to `remotes[i]`. `direct`: the values
    /// are these pieces of a buffer registered on this rail.
    pub async fn write_values(
        &self,
        index: usize,
        server: &str,
        sessions: &[Arc<Session>],
        remotes: &[Remote],
        values: &[&[u8]],
        direct: Option<(&SharedPieces<'_>, usize)>,
    ) -> Moved {
        let mut sessions = sessions.to_vec();
        if let Some((shared, rail)) = direct
            && let Some(home) = sessions.iter().position(|s| s.rail == rail)
        {
            let transfers = piece_transfers(remotes);
            let result = sessions[home]
                .channel
                .write_shared(shared, &transfers)
                .await;
            if let Some(moved) =
                self.after_direct(index, server, &mut sessions, home, remotes, result, "write")
            {
                return moved;
            }
        }
        let lens: Vec<usize> = remotes.iter().map(|r| r.len).collect();
        let plan = spread(&lens, sessions.len(), self.rotate());
        let outcomes = join_all(
            plan.iter()
                .zip(&sessions)
                .map(|(segs, s)| self.write_on(s, segs, remotes, values)),
        )
        .await;
        let ok: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
        let mut moved: Moved = remotes.iter().map(|_| None).collect();
        for (k, outcome) in outcomes.into_iter().enumerate() {
            let Err(e) = outcome else { continue };
            self.rail_failed(index, server, sessions[k].rail, &e);
            let retried = match alternative(&ok, k) {
                Some(j) => self.write_on(&sessions[j], &plan[k], remotes, values).await,
                None => Err(e),
            };
            if let Err(e) = retried {
                fail(&mut moved, &plan[k], server, &e);
            }
        }
        moved
    }

    /// READs `remotes[i]` into `dests[i]` (each exactly `remotes[i].len` bytes) through
    /// staging buffers.
    pub async fn read_values(
        &self,
        index: usize,
        server: &str,
        sessions: &[Arc<Session>],
        remotes: &[Remote],
        dests: Vec<&mut [u8]>,
    ) -> Moved {
        let lens: Vec<usize> = remotes.iter().map(|r| r.len).collect();
        let plan = spread(&lens, sessions.len(), self.rotate());
        let mut per_rail = split_for_rails(&plan, dests);
        let outcomes = join_all(
            per_rail
                .iter_mut()
                .zip(sessions)
                .map(|(segs, s)| self.read_on(s, segs, remotes)),
        )
        .await;
        let ok: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
        let mut moved: Moved = remotes.iter().map(|_| None).collect();
        for (k, outcome) in outcomes.into_iter().enumerate() {
            let Err(e) = outcome else { continue };
            self.rail_failed(index, server, sessions[k].rail, &e);
            let retried = match alternative(&ok, k) {
                Some(j) => self.read_on(&sessions[j], &mut per_rail[k], remotes).await,
                None => Err(e),
            };
            if let Err(e) = retried {
                fail(&mut moved, &plan[k], server, &e);
            }
        }
        moved
    }

    /// READs `remotes[i]` into the start of `lent`'s piece `i`: straight into it when its
    /// buffer is registered on this session's rail `rail`, else staged.
    pub async fn read_registered(
        &self,
        index: usize,
        server: &str,
        sessions: &[Arc<Session>],
        remotes: &[Remote],
        lent: &mut LentPieces<'_>,
        rail: usize,
    ) -> Moved {
        let mut sessions = sessions.to_vec();
        if let Some(home) = sessions.iter().position(|s| s.rail == rail) {
            let transfers = piece_transfers(remotes);
            let result = sessions[home].channel.read_lent(lent, &transfers).await;
            if let Some(moved) =
                self.after_direct(index, server, &mut sessions, home, remotes, result, "read")
            {
                return moved;
            }
        }
        let dests = lent
            .pieces_mut()
            .iter_mut()
            .zip(remotes)
            .map(|(piece, r)| &mut piece[..r.len])
            .collect();
        self.read_values(index, server, &sessions, remotes, dests)
            .await
    }

    /// Settles a direct transfer on `sessions[home]`: `Some` is the outcome for every value;
    /// `None` means it failed and the other sessions (left in `sessions`) should try staged.
    #[allow(clippy::too_many_arguments)]
    fn after_direct(
        &self,
        index: usize,
        server: &str,
        sessions: &mut Vec<Arc<Session>>,
        home: usize,
        remotes: &[Remote],
        result: std::result::Result<(), RdmaError>,
        op: &'static str,
    ) -> Option<Moved> {
        let rail = sessions[home].rail;
        match result {
            Ok(()) => {
                self.rail_at(rail)
                    .moved(remotes.iter().map(|r| r.len).sum(), op);
                Some(remotes.iter().map(|_| None).collect())
            }
            Err(e) => {
                self.rail_failed(index, server, rail, &e);
                sessions.remove(home);
                if sessions.is_empty() {
                    Some(
                        remotes
                            .iter()
                            .map(|r| (r.len > 0).then(|| rdma_err(server, &e)))
                            .collect(),
                    )
                } else {
                    None
                }
            }
        }
    }

    /// Moves `segs` of `values` on `session`, one staging buffer (one chain) at a time per
    /// buffer, the buffers in parallel.
    async fn write_on(
        &self,
        session: &Session,
        segs: &[Segment],
        remotes: &[Remote],
        values: &[&[u8]],
    ) -> std::result::Result<(), RdmaError> {
        let pool = self.staging(session);
        let bins = pack(segs.iter().map(|s| s.len), pool.buf_size());
        let results = join_all(bins.iter().map(|bin| async move {
            let mut staging = pool.acquire().await;
            let mut transfers = Vec::with_capacity(bin.len());
            for p in bin {
                let seg = segs[p.entry];
                let from = seg.offset + p.offset;
                staging.as_mut_slice()[p.at..p.at + p.len]
                    .copy_from_slice(&values[seg.item][from..from + p.len]);
                let remote = &remotes[seg.item];
                transfers.push(Transfer {
                    local_offset: p.at,
                    len: p.len,
                    remote_addr: remote.addr + from as u64,
                    rkey: remote.rkey,
                });
            }
            session.channel.write_batch(&staging, &transfers).await
        }))
        .await;
        results
            .into_iter()
            .collect::<std::result::Result<(), _>>()?;
        self.rail(session)
            .moved(segs.iter().map(|s| s.len).sum(), "write");
        Ok(())
    }

    /// READs `segs` into their destinations on `session` through staging buffers.
    async fn read_on(
        &self,
        session: &Session,
        segs: &mut [(Segment, &mut [u8])],
        remotes: &[Remote],
    ) -> std::result::Result<(), RdmaError> {
        let pool = self.staging(session);
        let meta: Vec<Segment> = segs.iter().map(|(s, _)| *s).collect();
        let bins = pack(meta.iter().map(|s| s.len), pool.buf_size());
        let mut rests: Vec<&mut [u8]> = segs.iter_mut().map(|(_, d)| &mut **d).collect();
        let mut jobs: Vec<Vec<(Transfer, &mut [u8])>> = Vec::with_capacity(bins.len());
        for bin in &bins {
            let mut job = Vec::with_capacity(bin.len());
            for p in bin {
                let (head, tail) = std::mem::take(&mut rests[p.entry]).split_at_mut(p.len);
                rests[p.entry] = tail;
                let seg = meta[p.entry];
                let remote = &remotes[seg.item];
                let transfer = Transfer {
                    local_offset: p.at,
                    len: p.len,
                    remote_addr: remote.addr + (seg.offset + p.offset) as u64,
                    rkey: remote.rkey,
                };
                job.push((transfer, head));
            }
            jobs.push(job);
        }
        let results = join_all(jobs.into_iter().map(|job| async move {
            let mut staging = pool.acquire().await;
            let transfers: Vec<Transfer> = job.iter().map(|(t, _)| *t).collect();
            session.channel.read_batch(&mut staging, &transfers).await?;
            for (t, out) in job {
                out.copy_from_slice(&staging.as_slice()[t.local_offset..t.local_offset + t.len]);
            }
            Ok::<(), RdmaError>(())
        }))
        .await;
        results
            .into_iter()
            .collect::<std::result::Result<(), _>>()?;
        self.rail(session)
            .moved(meta.iter().map(|s| s.len).sum(), "read");
        Ok(())
    }
}

/// One transfer per value, from or into the start of its own piece.
fn piece_transfers(remotes: &[Remote]) -> Vec<Transfer> {
    remotes
        .iter()
        .map(|r| Transfer {
            local_offset: 0,
            len: r.len,
            remote_addr: r.addr,
            rkey: r.rkey,
        })
        .collect()
}

/// Another rail whose own share succeeded, to take failed rail `k`'s share once.
fn alternative(ok: &[bool], k: usize) -> Option<usize> {
    (1..ok.len()).map(|d| (k + d) % ok.len()).find(|&j| ok[j])
}

fn fail(moved: &mut Moved, segs: &[Segment], server: &str, e: &RdmaError) {
    for seg in segs {
        moved[seg.item] = Some(rdma_err(server, e));
    }
}

/// Values that did not move become errors; the rest keep `ok`'s value.
pub(crate) fn merge<T>(moved: Moved, ok: Vec<Result<T>>) -> Vec<Result<T>> {
    moved
        .into_iter()
        .zip(ok)
        .map(|(m, r)| match m {
            Some(e) => Err(e),
            None => r,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_rail_goes_to_the_next_one_that_worked() {
        assert_eq!(alternative(&[true, false, true], 1), Some(2));
        assert_eq!(alternative(&[true, false, false], 2), Some(0));
        assert_eq!(alternative(&[false], 0), None);
        assert_eq!(alternative(&[false, false], 0), None);
    }
}

#[cfg(test)]
mod remote_check_tests {
    use super::*;

    const WINDOW: ArenaWindow = ArenaWindow {
        addr: 0x10_0000,
        rkey: 7,
    };

    fn remote(addr: u64, len: usize, rkey: u32) -> Remote {
        Remote { len, addr, rkey }
    }

    #[test]
    fn remote_ranges_outside_the_connect_window_are_protocol_errors() {
        let ok = |r: Remote| r.check("s1", &[WINDOW]).is_ok();
        assert!(ok(remote(0x10_0000, 4096, 7)));
        assert!(ok(remote(0x20_0000, 1, 7)));
        assert!(ok(remote(0, 0, 0)), "nothing to move");
        assert!(!ok(remote(0xf_ffff, 2, 7)), "below the arena");
        assert!(!ok(remote(0x10_0000, 8, 8)), "another rkey");
        assert!(!ok(remote(u64::MAX - 3, 8, 7)), "wraps");
        let other = ArenaWindow {
            addr: 0x20_0000,
            rkey: 7,
        };
        assert!(
            remote(0x10_0000, 8, 7)
                .check("s1", &[WINDOW, other])
                .is_err(),
            "every rail it may move on must hold it"
        );
        let e = remote(0x8, 16, 7).check("s1", &[WINDOW]).unwrap_err();
        let Error::Protocol { ref server, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(server, "s1");
        let text = e.to_string();
        assert!(text.contains("16 bytes at 0x8"), "{text}");
    }
}
