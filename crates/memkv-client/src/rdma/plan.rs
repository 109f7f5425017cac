//! Planning RDMA transfers, pure: which rail moves which bytes of which value (`spread`), and
//! how one rail's pieces pack into staging buffers, one chain of work requests per buffer
//! (`pack`), and cutting destinations into the disjoint slices those plans fill.

/// Values at least this long are cut into one stripe per rail, moved at the same time.
pub(crate) const STRIPE_MIN: usize = 1 << 20;
/// Stripes start on this boundary (a page: whole pages per rail).
const STRIPE_ALIGN: usize = 4096;

/// `len` bytes of value `item` starting at `offset`, moved by one rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub item: usize,
    pub offset: usize,
    pub len: usize,
}

/// Assigns the bytes of values `lens` to `rails` rails (their indices into the caller's session
/// list). A value of `STRIPE_MIN` bytes or more is cut into one page-aligned stripe per rail;
/// smaller values go whole to the rail with the fewest bytes so far, ties going to the rail
/// after `first` (which the caller rotates per operation, so single small transfers take the
/// rails in turn). Per rail, segments come in item order; an item's stripes ascend by offset.
/// Empty values move nothing.
pub(crate) fn spread(lens: &[usize], rails: usize, first: usize) -> Vec<Vec<Segment>> {
    let rails = rails.max(1);
    let mut plan: Vec<Vec<Segment>> = vec![Vec::new(); rails];
    let mut load = vec![0usize; rails];
    for (item, &len) in lens.iter().enumerate() {
        if len == 0 {
            continue;
        }
        if rails > 1 && len >= STRIPE_MIN {
            let stripe = len.div_ceil(rails).next_multiple_of(STRIPE_ALIGN);
            let mut offset = 0;
            let mut k = 0;
            while offset < len {
                let rail = (first + k) % rails;
                let piece = stripe.min(len - offset);
                plan[rail].push(Segment {
                    item,
                    offset,
                    len: piece,
                });
                load[rail] += piece;
                offset += piece;
                k += 1;
            }
            continue;
        }
        let rail = (0..rails)
            .map(|k| (first + k) % rails)
            .min_by_key(|&r| load[r])
            .unwrap_or(0);
        plan[rail].push(Segment {
            item,
            offset: 0,
            len,
        });
        load[rail] += len;
    }
    plan
}

/// One piece of a staging buffer: `len` bytes of entry `entry` from `offset` within it, at
/// `at` in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub entry: usize,
    pub offset: usize,
    pub len: usize,
    pub at: usize,
}

/// Packs entries of `lens` bytes, in order, into buffers of `size` bytes: small entries share
/// a buffer, large ones continue into the next. Pieces come in entry order, so walking the
/// buffers in order visits every entry's bytes front to back.
pub(crate) fn pack(lens: impl IntoIterator<Item = usize>, size: usize) -> Vec<Vec<Piece>> {
    let size = size.max(1);
    let mut bins: Vec<Vec<Piece>> = Vec::new();
    let mut used = size;
    for (entry, len) in lens.into_iter().enumerate() {
        let mut offset = 0;
        while offset < len {
            if used == size {
                bins.push(Vec::new());
                used = 0;
            }
            let piece = (size - used).min(len - offset);
            bins.last_mut().expect("a bin was just opened").push(Piece {
                entry,
                offset,
                len: piece,
                at: used,
            });
            used += piece;
            offset += piece;
        }
    }
    bins
}

/// Cuts each destination into its segments' slices and groups them by rail as `plan` says.
pub(crate) fn split_for_rails<'a>(
    plan: &[Vec<Segment>],
    mut dests: Vec<&'a mut [u8]>,
) -> Vec<Vec<(Segment, &'a mut [u8])>> {
    let mut order: Vec<(usize, Segment)> = plan
        .iter()
        .enumerate()
        .flat_map(|(r, segs)| segs.iter().map(move |&s| (r, s)))
        .collect();
    order.sort_by_key(|(_, s)| (s.item, s.offset));
    let mut per_rail: Vec<Vec<(Segment, &'a mut [u8])>> = plan.iter().map(|_| Vec::new()).collect();
    for (rail, seg) in order {
        let (head, tail) = std::mem::take(&mut dests[seg.item]).split_at_mut(seg.len);
        dests[seg.item] = tail;
        per_rail[rail].push((seg, head));
    }
    for segs in &mut per_rail {
        segs.sort_by_key(|(s, _)| (s.item, s.offset));
    }
    per_rail
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_16_mib_value_is_striped_evenly_over_two_rails() {
        let plan = spread(&[16 * MIB], 2, 1);
        assert_eq!(
            plan[1],
            vec![Segment {
                item: 0,
                offset: 0,
                len: 8 * MIB
            }]
        );
        assert_eq!(
            plan[0],
            vec![Segment {
                item: 0,
                offset: 8 * MIB,
                len: 8 * MIB
            }]
        );
    }

    #[test]
    fn small_values_balance_and_one_rail_takes_everything_whole() {
        let plan = spread(&[100, 100, 300, 50], 2, 0);
        let bytes: Vec<usize> = plan.iter().map(|r| r.iter().map(|s| s.len).sum()).collect();
        assert_eq!(bytes, vec![400, 150]);
        let single = spread(&[3 * MIB, 0, 7], 1, 5);
        assert_eq!(single.len(), 1);
        assert_eq!(single[0].len(), 2, "whole values, the empty one skipped");
    }

    #[test]
    fn single_small_transfers_take_the_rails_in_turn() {
        let rails: Vec<usize> = (0..4)
            .map(|first| {
                spread(&[10], 3, first)
                    .iter()
                    .position(|r| !r.is_empty())
                    .unwrap()
            })
            .collect();
        assert_eq!(rails, vec![0, 1, 2, 0]);
    }

    #[test]
    fn packing_shares_buffers_and_splits_large_entries() {
        let bins = pack([10, 20, 100, 0, 5], 64);
        assert_eq!(bins.len(), 3);
        assert_eq!(bins[0].len(), 3, "10 + 20 + the first 34 of 100");
        assert_eq!(
            bins[1],
            vec![Piece {
                entry: 2,
                offset: 34,
                len: 64,
                at: 0
            }]
        );
        assert_eq!(
            bins[2],
            vec![
                Piece {
                    entry: 2,
                    offset: 98,
                    len: 2,
                    at: 0
                },
                Piece {
                    entry: 4,
                    offset: 0,
                    len: 5,
                    at: 2
                }
            ]
        );
        assert!(pack([0, 0], 8).is_empty());
    }

    #[test]
    fn destinations_are_cut_into_their_stripes_per_rail() {
        let mut a = vec![0u8; 6];
        let mut b = vec![0u8; 2];
        let plan = vec![
            vec![
                Segment {
                    item: 0,
                    offset: 0,
                    len: 4,
                },
                Segment {
                    item: 1,
                    offset: 0,
                    len: 2,
                },
            ],
            vec![Segment {
                item: 0,
                offset: 4,
                len: 2,
            }],
        ];
        let per_rail = split_for_rails(&plan, vec![&mut a, &mut b]);
        assert_eq!(per_rail[0].len(), 2);
        for (rail, segs) in per_rail.into_iter().enumerate() {
            for (seg, out) in segs {
                assert_eq!(out.len(), seg.len);
                out.fill(rail as u8 + 1);
            }
        }
        assert_eq!(a, [1, 1, 1, 1, 2, 2]);
        assert_eq!(b, [1, 1]);
    }

    proptest! {
        /// Every byte of every value goes to exactly one rail, stripes land on distinct rails.
        #[test]
        fn spread_covers_every_byte_once(
            lens in proptest::collection::vec(0usize..3 * MIB, 0..12),
            rails in 1usize..5,
            first in 0usize..8,
        ) {
            let plan = spread(&lens, rails, first);
            prop_assert_eq!(plan.len(), rails);
            let mut segs: Vec<(usize, Segment)> = plan.iter().enumerate()
                .flat_map(|(r, s)| s.iter().map(move |&g| (r, g))).collect();
            segs.sort_by_key(|(_, s)| (s.item, s.offset));
            for (item, &len) in lens.iter().enumerate() {
                let mine: Vec<_> = segs.iter().filter(|(_, s)| s.item == item).collect();
                let mut at = 0;
                for (_, s) in &mine {
                    prop_assert_eq!(s.offset, at);
                    prop_assert!(s.len > 0);
                    at += s.len;
                }
                prop_assert_eq!(at, len);
                let mut used: Vec<usize> = mine.iter().map(|(r, _)| *r).collect();
                used.dedup();
                prop_assert_eq!(used.len(), mine.len(), "one stripe per rail");
            }
        }

        /// Buffers tile the entries exactly, front to back, none overfilled.
        #[test]
        fn pack_tiles_entries(
            lens in proptest::collection::vec(0usize..5000, 0..20),
            size in 1usize..3000,
        ) {
            let bins = pack(lens.iter().copied(), size);
            let mut next = vec![0usize; lens.len()];
            let mut last_entry = 0;
            for bin in &bins {
                let mut at = 0;
                prop_assert!(!bin.is_empty());
                for p in bin {
                    prop_assert_eq!(p.at, at);
                    prop_assert_eq!(p.offset, next[p.entry]);
                    prop_assert!(p.entry >= last_entry);
                    last_entry = p.entry;
                    next[p.entry] += p.len;
                    at += p.len;
                }
                prop_assert!(at <= size);
            }
            prop_assert_eq!(next, lens);
        }
    }
}
