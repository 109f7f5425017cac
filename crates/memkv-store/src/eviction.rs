//! Approximate LRU by CLOCK: each entry has a "referenced" bit set on access; the hand clears
//! set bits and takes the first entry found clear. Entries the caller marks unevictable (held
//! by a reader, or pinned for an RDMA read) are skipped.

use crate::index::{Entry, Shard};

/// Advances the shard's hand over the rest of the table's buckets and returns the first bucket
/// whose entry is evictable and not referenced, clearing the referenced bits it passes. At the
/// table's end the hand goes back to its start and `None` says the shard's part of the clock
/// face is done: the hand moves on to the next shard.
pub(crate) fn clock_pick<B>(
    shard: &mut Shard<B>,
    evictable: &impl Fn(&Entry<B>) -> bool,
) -> Option<usize> {
    let n = shard.table.num_buckets();
    while shard.hand < n {
        let i = shard.hand;
        shard.hand += 1;
        let Some(entry) = shard.table.get_bucket(i) else {
            continue;
        };
        if !evictable(entry) {
            continue;
        }
        if shard.referenced.take(i) {
            continue;
        }
        return Some(i);
    }
    shard.hand = 0;
    None
}
