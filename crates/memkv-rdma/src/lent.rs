//! Disjoint pieces of one [`RegisteredBuffer`], lent in groups so that RDMA READs into
//! different pieces of one buffer (a batch's values from several servers) run at the same
//! time, where a READ borrowing the whole buffer would make them wait for one another.

use std::ops::Range;

use crate::error::RdmaError;
use crate::memory::{LocalMemory, RegisteredBuffer};
use crate::transfer::{Chunk, Transfer, plan_chunks};

/// One group of pieces: each borrowed exclusively from the same registered buffer, so a READ
/// into them writes nothing anyone else can see, and the buffer (with its registration) outlives
/// the group.
pub struct LentPieces<'a> {
    region_addr: u64,
    region_len: usize,
    lkey: u32,
    pieces: Vec<&'a mut [u8]>,
}

impl RegisteredBuffer {
    /// Lends `groups[g][i]` (ranges of the buffer) as piece `i` of group `g`. Refused when a
    /// range leaves the buffer or two ranges share a byte.
    pub fn lend(&mut self, groups: &[Vec<Range<usize>>]) -> Result<Vec<LentPieces<'_>>, RdmaError> {
        let region_addr = self.addr();
        let region_len = self.len();
        let lkey = self.lkey();
        let ranges: Vec<&Range<usize>> = groups.iter().flatten().collect();
        let mut pieces = split_disjoint(self.as_mut_slice(), &ranges)?.into_iter();
        Ok(groups
            .iter()
            .map(|group| LentPieces {
                region_addr,
                region_len,
                lkey,
                pieces: pieces.by_ref().take(group.len()).collect(),
            })
            .collect())
    }
}

impl<'a> LentPieces<'a> {
    /// How many pieces the group holds.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    pub fn piece(&self, i: usize) -> &[u8] {
        self.pieces[i]
    }

    /// The pieces, to fill by other means (a staged READ, a copy from TCP).
    pub fn pieces_mut(&mut self) -> &mut [&'a mut [u8]] {
        &mut self.pieces
    }

    /// Work requests for `transfers[i]` into piece `i` (its `local_offset` counted from the
    /// piece's start); a transfer leaving its piece is refused.
    pub(crate) fn plan(
        &self,
        transfers: &[Transfer],
        max_msg: u32,
    ) -> Result<Vec<Chunk>, RdmaError> {
        if transfers.len() != self.pieces.len() {
            return Err(RdmaError::InvalidArgument {
                name: "transfers",
                value: format!("{} transfers", transfers.len()),
                limit: "one transfer per lent piece",
            });
        }
        let in_region = transfers
            .iter()
            .zip(&self.pieces)
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
                    _ => (piece.as_ptr() as u64 - self.region_addr) as usize,
                };
                Ok(Transfer {
                    local_offset: start + t.local_offset,
                    ..*t
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        plan_chunks(
            self.region_addr,
            self.region_len,
            self.lkey,
            &in_region,
            max_msg,
        )
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

    #[test]
    fn overlapping_or_outside_ranges_are_refused() {
        assert!(split(100, &[0..10, 9..20]).is_err());
        assert!(split(100, &[0..10, 0..10]).is_err());
        assert!(split(100, std::slice::from_ref(&(90..101))).is_err());
        assert!(split(100, &[0..10, 10..20]).is_ok());
    }
}
