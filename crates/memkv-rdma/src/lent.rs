//! Pieces of one [`RegisteredBuffer`] lent to an operation, so that operations on different
//! pieces of one buffer run at the same time, where each borrowing the whole buffer would make
//! READs wait for every other operation on it: [`LentPieces`] (exclusive, for READs) and
//! [`SharedPieces`] (shared, for WRITEs). The buffer is only their registration; the bytes are
//! the pieces, so nothing holds a slice of the whole buffer while the NIC writes a piece.

use std::ops::Range;

use crate::error::RdmaError;
use crate::memory::{LocalMemory, RegisteredBuffer};
use crate::transfer::{Chunk, Transfer, plan_chunks};

/// Where a buffer is registered: what work requests name.
#[derive(Clone, Copy)]
struct Registration {
    addr: u64,
    len: usize,
    lkey: u32,
}

/// One group of pieces, each borrowed exclusively and inside the same registered buffer, which
/// outlives the group: a READ into them writes nothing anyone else can see.
pub struct LentPieces<'a> {
    at: Registration,
    pieces: Vec<&'a mut [u8]>,
}

/// Pieces inside one registered buffer, borrowed shared: what a WRITE sends.
pub struct SharedPieces<'a> {
    at: Registration,
    pieces: Vec<&'a [u8]>,
}

impl RegisteredBuffer {
    /// Lends `groups[g][i]` (ranges of the buffer) as piece `i` of group `g`. Refused when a
    /// range leaves the buffer or two ranges share a byte.
    pub fn lend(&mut self, groups: &[Vec<Range<usize>>]) -> Result<Vec<LentPieces<'_>>, RdmaError> {
        let at = self.registration();
        let ranges: Vec<&Range<usize>> = groups.iter().flatten().collect();
        let mut pieces = split_disjoint(self.as_mut_slice(), &ranges)?.into_iter();
        Ok(groups
            .iter()
            .map(|group| LentPieces {
                at,
                pieces: pieces.by_ref().take(group.len()).collect(),
            })
            .collect())
    }

    /// Lends `pieces`, memory the caller holds exclusively (its own borrows of parts of this
    /// buffer's memory), for READs while this buffer stays registered. Refused when a piece
    /// is not inside the buffer.
    pub fn lend_pieces<'a>(
        &'a self,
        pieces: Vec<&'a mut [u8]>,
    ) -> Result<LentPieces<'a>, RdmaError> {
        let at = self.registration();
        pieces.iter().try_for_each(|p| at.holds(p))?;
        Ok(LentPieces { at, pieces })
    }

    /// `pieces` (parts of this buffer's memory) for WRITEs while this buffer stays registered.
    /// Refused when a piece is not inside the buffer.
    pub fn share_pieces<'a>(
        &'a self,
        pieces: Vec<&'a [u8]>,
    ) -> Result<SharedPieces<'a>, RdmaError> {
        let at = self.registration();
        pieces.iter().try_for_each(|p| at.holds(p))?;
        Ok(SharedPieces { at, pieces })
    }

    /// Whether `bytes` lie inside this buffer's memory (what [`RegisteredBuffer::lend_pieces`]
    /// and [`RegisteredBuffer::share_pieces`] ask of each piece).
    pub fn holds(&self, bytes: &[u8]) -> bool {
        self.registration().holds(bytes).is_ok()
    }

    fn registration(&self) -> Registration {
        Registration {
            addr: self.addr(),
            len: self.len(),
            lkey: self.lkey(),
        }
    }
}

impl Registration {
    fn holds(&self, piece: &[u8]) -> Result<(), RdmaError> {
        let start = piece.as_ptr() as u64;
        let inside = piece.is_empty()
            || (start >= self.addr && start - self.addr + piece.len() as u64 <= self.len as u64);
        if inside {
            return Ok(());
        }
        Err(RdmaError::InvalidArgument {
            name: "piece",
            value: format!("{} bytes at {start:#x}", piece.len()),
            limit: "inside the registered buffer",
        })
    }

    /// Work requests for `transfers[i]` from or into `pieces[i]` (its `local_offset` counted
    /// from the piece's start); a transfer leaving its piece is refused.
    fn plan<'p>(
        &self,
        pieces: impl ExactSizeIterator<Item = &'p [u8]>,
        transfers: &[Transfer],
        max_msg: u32,
    ) -> Result<Vec<Chunk>, RdmaError> {
        if transfers.len() != pieces.len() {
            return Err(RdmaError::InvalidArgument {
                name: "transfers",
                value: format!("{} transfers for {} pieces", transfers.len(), pieces.len()),
                limit: "one transfer per piece",
            });
        }
        let in_region = transfers
            .iter()
            .zip(pieces)
            .map(|(t, piece)| {
                let end = t.local_offset.checked_add(t.len);
                if end.is_none_or(|end| end > piece.len()) {
                    return Err(RdmaError::OutOfBounds {
                        offset: t.local_offset,
                        len: t.len,
                        region_len: piece.len(),
                    });
                }
                // An empty piece may lie anywhere; it moves nothing.
                let start = match t.len {
                    0 => 0,
                    _ => (piece.as_ptr() as u64 - self.addr) as usize,
                };
                Ok(Transfer {
                    local_offset: start + t.local_offset,
                    ..*t
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        plan_chunks(self.addr, self.len, self.lkey, &in_region, max_msg)
    }
}

impl SharedPieces<'_> {
    pub(crate) fn plan(
        &self,
        transfers: &[Transfer],
        max_msg: u32,
    ) -> Result<Vec<Chunk>, RdmaError> {
        self.at
            .plan(self.pieces.iter().copied(), transfers, max_msg)
    }
}

impl<'a> LentPieces<'a> {
    pub fn piece(&self, i: usize) -> &[u8] {
        self.pieces[i]
    }

    /// Pieces `groups[g]` (indices into this group) as group `g`, borrowed from this one, which
    /// has them back once those are dropped. Each piece goes to at most one group; one named
    /// twice is empty the second time.
    pub fn regroup(&mut self, groups: &[Vec<usize>]) -> Vec<LentPieces<'_>> {
        let mut pieces: Vec<Option<&mut [u8]>> =
            self.pieces.iter_mut().map(|p| Some(&mut **p)).collect();
        groups
            .iter()
            .map(|group| LentPieces {
                at: self.at,
                pieces: group
                    .iter()
                    .map(|&i| pieces[i].take().unwrap_or_default())
                    .collect(),
            })
            .collect()
    }

    /// The pieces, to fill by other means (a staged READ, a copy from TCP).
    pub fn pieces_mut(&mut self) -> &mut [&'a mut [u8]] {
        &mut self.pieces
    }

    pub(crate) fn plan(
        &self,
        transfers: &[Transfer],
        max_msg: u32,
    ) -> Result<Vec<Chunk>, RdmaError> {
        self.at
            .plan(self.pieces.iter().map(|p| &**p), transfers, max_msg)
    }
}

/// `buf[ranges[i]]` as separate mutable slices, in the order given.
fn split_disjoint<'a>(
    buf: &'a mut [u8],
    ranges: &[&Range<usize>],
) -> Result<Vec<&'a mut [u8]>, RdmaError> {
    let len = buf.len();
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut out: Vec<&'a mut [u8]> = ranges.iter().map(|_| Default::default()).collect();
    let mut rest = buf;
    let mut at = 0usize;
    for i in order {
        let r = ranges[i];
        if r.is_empty() {
            continue;
        }
        let refused = |limit| RdmaError::InvalidArgument {
            name: "lent range",
            value: format!("{}..{} of a {len}-byte buffer", r.start, r.end),
            limit,
        };
        if r.end > len {
            return Err(refused("inside the buffer"));
        }
        let skip = r
            .start
            .checked_sub(at)
            .ok_or(refused("no byte lent twice"))?;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
        let (mine, tail) = tail.split_at_mut(r.len());
        out[i] = mine;
        rest = tail;
        at = r.end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(len: usize, ranges: &[Range<usize>]) -> Result<Vec<usize>, RdmaError> {
        let mut buf = vec![0u8; len];
        let base = buf.as_ptr() as usize;
        let refs: Vec<&Range<usize>> = ranges.iter().collect();
        Ok(split_disjoint(&mut buf, &refs)?
            .iter()
            .map(|s| {
                if s.is_empty() {
                    usize::MAX
                } else {
                    s.as_ptr() as usize - base
                }
            })
            .collect())
    }

    #[test]
    fn pieces_come_back_in_the_order_asked_whatever_their_places() {
        assert_eq!(
            split(100, &[50..60, 0..10, 20..50]).unwrap(),
            vec![50, 0, 20]
        );
    }

    #[test]
    fn empty_ranges_lend_nothing_and_never_clash() {
        assert_eq!(
            split(10, &[5..5, 0..10, 5..5]).unwrap(),
            vec![usize::MAX, 0, usize::MAX]
        );
    }

    fn registration_of(bytes: &[u8], lkey: u32) -> Registration {
        Registration {
            addr: bytes.as_ptr() as u64,
            len: bytes.len(),
            lkey,
        }
    }

    #[test]
    fn a_piece_must_lie_inside_the_registration() {
        let buf = [0u8; 64];
        let at = registration_of(&buf[..32], 1);
        assert!(at.holds(&buf[..32]).is_ok());
        assert!(at.holds(&buf[10..20]).is_ok());
        assert!(
            at.holds(&buf[40..40]).is_ok(),
            "an empty piece moves nothing"
        );
        assert!(at.holds(&buf[31..33]).is_err());
        let other = [0u8; 8];
        assert!(at.holds(&other).is_err(), "another array");
    }

    #[test]
    fn transfers_are_planned_inside_their_own_pieces() {
        let buf = [0u8; 64];
        let at = registration_of(&buf[..64], 7);
        let t = |local_offset, len| Transfer {
            local_offset,
            len,
            remote_addr: 0x1000,
            rkey: 9,
        };
        let pieces = [&buf[40..48], &buf[8..16]];
        let chunks = at
            .plan(pieces.iter().copied(), &[t(2, 6), t(0, 8)], 4096)
            .unwrap();
        let local: Vec<(u64, u32)> = chunks
            .iter()
            .map(|c| (c.local_addr - at.addr, c.len))
            .collect();
        assert_eq!(local, vec![(42, 6), (8, 8)]);
        assert!(
            at.plan(pieces.iter().copied(), &[t(2, 7), t(0, 8)], 4096)
                .is_err()
        );
        assert!(at.plan(pieces.iter().copied(), &[t(0, 8)], 4096).is_err());
    }

    #[test]
    fn overlapping_or_outside_ranges_are_refused() {
        assert!(split(100, &[0..10, 9..20]).is_err());
        assert!(split(100, &[0..10, 0..10]).is_err());
        assert!(split(100, std::slice::from_ref(&(90..101))).is_err());
        assert!(split(100, &[0..10, 10..20]).is_ok());
    }
}
