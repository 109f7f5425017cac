//! Approximate LRU by CLOCK: each entry has a "referenced" bit set on access; the hand clears
//! set bits and takes the first entry found clear. Entries the caller marks unevictable (held
//! by a reader, or pinned for an RDMA read) are skipped.

use crate::index::{Entry, Shard};

/// Advances the shard's hand over the table's buckets and returns the bucket to evict, if any
/// entry is evictable.
pub(crate) fn clock_pick<B>(
    shard: &mut Shard<B>,
    evictable: &impl Fn(&Entry<B>) -> bool,
) -> Option<usize> {
    let n = shard.table.num_buckets();
    // Two full turns: the first may only clear referenced bits.
    for _ in 0..2 * n {
        let i = shard.hand % n;
        shard.hand = (i + 1) % n;
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
    None
}
