//! Approximate LRU by CLOCK: each entry has a "referenced" bit set on access; the hand clears
//! set bits and takes the first entry found clear. Entries the caller marks unevictable (pinned
//! for an RDMA read) are skipped.

use crate::index::{Entry, Shard};

/// Advances the shard's hand and returns the slot to evict, if any is evictable.
pub(crate) fn clock_pick<B>(
    shard: &mut Shard<B>,
    evictable: &impl Fn(&Entry<B>) -> bool,
) -> Option<usize> {
    let n = shard.slots.len();
    // Two full turns: the first may only clear referenced bits.
    for _ in 0..2 * n {
        let i = shard.hand % n;
        shard.hand = (i + 1) % n;
        if !evictable(&shard.slots[i]) {
            continue;
        }
        if shard.referenced.take(i) {
            continue;
        }
        return Some(i);
    }
    None
}
