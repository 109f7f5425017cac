//! Sharded key -> block index shared by both modes.
//!
//! Each shard is a hash table of [`Entry`]s (hashbrown's `HashTable`), found by their own keys:
//! the key is stored once, in its entry, and a lookup loads the table's bucket and then the
//! entry, where the key it compares and the block it returns sit together. Entries are
//! reference-counted: replacing or removing one never frees bytes a reader still holds; they go
//! when the last clone drops. CLOCK's hand ([`crate::eviction`]) sweeps the table's buckets,
//! and its referenced bits are a bitmap beside them, a bit per bucket.

pub(crate) use crate::arena::Entry;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use crate::eviction::clock_pick;

const SHARDS: usize = 64;

pub(crate) struct Shard<B> {
    pub table: HashTable<Entry<B>>,
    /// Bit `i`: the entry in bucket `i` was used since the CLOCK hand last passed it.
    pub referenced: ReferencedBits,
    pub hand: usize,
    /// The slots of the entries in `table` (entries removed but still held by readers are not
    /// counted).
    entry_bytes: usize,
}

/// One bit per bucket, set by readers under the shard's read lock.
#[derive(Default)]
pub(crate) struct ReferencedBits(Vec<AtomicU64>);

impl ReferencedBits {
    fn word_bit(i: usize) -> (usize, u64) {
        (i / 64, 1 << (i % 64))
    }

    pub fn mark(&self, i: usize) {
        let (w, bit) = Self::word_bit(i);
        self.0[w].fetch_or(bit, Ordering::Relaxed);
    }

    /// Clears bit `i`, returning whether it was set.
    pub fn take(&self, i: usize) -> bool {
        let (w, bit) = Self::word_bit(i);
        self.0[w].fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// `buckets` bits, all set: after the table moved its entries to other buckets, every
    /// entry starts over as recently used (a second chance rather than a wrong first).
    fn reset(&mut self, buckets: usize) {
        self.0.clear();
        self.0
            .resize_with(buckets.div_ceil(64), || AtomicU64::new(u64::MAX));
    }
}

/// A key and its hash, computed once per operation: the low bits choose the shard, the same
/// hash rotated is the shard table's (a batch of 1,000 Exists hashes each key once, not twice).
#[derive(Clone, Copy)]
struct Hashed<'a> {
    key: &'a [u8],
    hash: u64,
}

impl<'a> Hashed<'a> {
    fn new(key: &'a [u8]) -> Self {
        Self {
            key,
            hash: xxhash_rust::xxh3::xxh3_64(key),
        }
    }

    fn shard(&self) -> usize {
        (self.hash % SHARDS as u64) as usize
    }

    fn in_shard(&self) -> u64 {
        self.hash.rotate_right(32)
    }
}

/// The hash of a stored entry within its shard (the table's rehash needs it).
fn entry_hash<B>(entry: &Entry<B>) -> u64 {
    Hashed::new(entry.key()).in_shard()
}

impl<B> Shard<B> {
    fn bucket_of(&self, key: Hashed<'_>) -> Option<usize> {
        self.table
            .find_bucket_index(key.in_shard(), |e| e.key() == key.key)
    }

    fn contains(&self, key: Hashed<'_>) -> bool {
        self.bucket_of(key).is_some()
    }

    /// Stores `entry`, whose key hashes to `key_hash` in this shard, returning the one it
    /// replaced.
    fn insert(&mut self, key_hash: u64, entry: Entry<B>) -> Option<Entry<B>> {
        self.entry_bytes += entry.slot_bytes();
        let replaced = self.insert_entry(key_hash, entry);
        if let Some(old) = &replaced {
            self.entry_bytes -= old.slot_bytes();
        }
        replaced
    }

    fn insert_entry(&mut self, key_hash: u64, entry: Entry<B>) -> Option<Entry<B>> {
        let found = self.table.find_entry(key_hash, |e| e.key() == entry.key());
        match found {
            Ok(mut present) => {
                self.referenced.mark(present.bucket_index());
                Some(std::mem::replace(present.get_mut(), entry))
            }
            Err(absent) => {
                let table = absent.into_table();
                // A full table rehashes on this insert (grown or in place), moving entries.
                let rehashes = table.len() == table.capacity();
                let bucket = table
                    .insert_unique(key_hash, entry, entry_hash)
                    .bucket_index();
                if rehashes {
                    self.referenced.reset(table.num_buckets());
                }
                self.referenced.mark(bucket);
                None
            }
        }
    }

    fn remove(&mut self, key: Hashed<'_>) -> Option<Entry<B>> {
        let found = self
            .table
            .find_entry(key.in_shard(), |e| e.key() == key.key);
        let removed = found.ok().map(|e| e.remove().0);
        self.took_out(removed)
    }

    fn remove_bucket(&mut self, i: usize) -> Option<Entry<B>> {
        let removed = self.table.get_bucket_entry(i).ok().map(|e| e.remove().0);
        self.took_out(removed)
    }

    fn took_out(&mut self, removed: Option<Entry<B>>) -> Option<Entry<B>> {
        if let Some(e) = &removed {
            self.entry_bytes -= e.slot_bytes();
        }
        removed
    }

    /// The shard's memory: its entries' slots, the table's buckets (a pointer and a control
    /// byte each) and the referenced bits.
    fn memory_bytes(&self) -> usize {
        self.entry_bytes
            + self.table.num_buckets() * (size_of::<Entry<B>>() + 1)
            + self.referenced.0.len() * size_of::<AtomicU64>()
    }
}

pub(crate) struct Index<B> {
    shards: Box<[RwLock<Shard<B>>]>,
    clock_shard: AtomicUsize,
}

impl<B> Index<B> {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    RwLock::new(Shard {
                        table: HashTable::new(),
                        referenced: ReferencedBits::default(),
                        hand: 0,
                        entry_bytes: 0,
                    })
                })
                .collect(),
            clock_shard: AtomicUsize::new(0),
        }
    }

    fn read(&self, i: usize) -> RwLockReadGuard<'_, Shard<B>> {
        self.shards[i].read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self, i: usize) -> RwLockWriteGuard<'_, Shard<B>> {
        self.shards[i].write().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks a key up and marks it recently used.
    pub fn get(&self, key: &[u8]) -> Option<Entry<B>> {
        let key = Hashed::new(key);
        let shard = self.read(key.shard());
        let i = shard.bucket_of(key)?;
        shard.referenced.mark(i);
        shard.table.get_bucket(i).cloned()
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        let key = Hashed::new(key);
        self.read(key.shard()).contains(key)
    }

    /// Whether each key is present, in order. Keys are grouped by shard so each shard is locked
    /// once per call rather than once per key (a batch Exists of 1,000 keys takes 64 locks at
    /// most, not 1,000); the grouping is a counting sort, linear in the batch.
    pub fn contains_many(&self, keys: &[&[u8]]) -> Vec<bool> {
        let hashed: Vec<Hashed<'_>> = keys.iter().map(|k| Hashed::new(k)).collect();
        let mut starts = [0usize; SHARDS + 1];
        for h in &hashed {
            starts[h.shard() + 1] += 1;
        }
        for s in 0..SHARDS {
            starts[s + 1] += starts[s];
        }
        let mut next = starts;
        let mut by_shard = vec![0u32; hashed.len()];
        for (i, h) in hashed.iter().enumerate() {
            by_shard[next[h.shard()]] = i as u32;
            next[h.shard()] += 1;
        }
        let mut found = vec![false; hashed.len()];
        for s in 0..SHARDS {
            let members = &by_shard[starts[s]..starts[s + 1]];
            if members.is_empty() {
                continue;
            }
            let shard = self.read(s);
            for &i in members {
                found[i as usize] = shard.contains(hashed[i as usize]);
            }
        }
        found
    }

    /// Stores `entry` under its key, returning the entry it replaced.
    pub fn insert(&self, entry: Entry<B>) -> Option<Entry<B>> {
        let key = Hashed::new(entry.key());
        let (shard, in_shard) = (key.shard(), key.in_shard());
        self.write(shard).insert(in_shard, entry)
    }

    pub fn remove(&self, key: &[u8]) -> Option<Entry<B>> {
        let key = Hashed::new(key);
        self.write(key.shard()).remove(key)
    }

    /// Runs CLOCK over the shards in turn and returns one evictable entry (not removed).
    pub fn choose_victim(&self, evictable: impl Fn(&Entry<B>) -> bool) -> Option<Entry<B>> {
        self.sweep(evictable, false)
    }

    /// Like [`Self::choose_victim`] but removes the entry under the same lock.
    pub fn evict_one(&self, evictable: impl Fn(&Entry<B>) -> bool) -> Option<Entry<B>> {
        self.sweep(evictable, true)
    }

    /// One hand over all shards, as one clock face: it sweeps a shard's buckets from where it
    /// stopped to the table's end, then goes on to the next shard. Two turns of the face (and
    /// the rest of the shard it starts in) clear every referenced bit, so the sweep finds any
    /// evictable entry. (Each shard used to turn its own hand twice when its turn came, so it
    /// lost an entry even when all of its entries were used since the hand last passed and
    /// other shards held ones nobody had used: with few entries per shard, a value just
    /// written went before older ones.)
    fn sweep(&self, evictable: impl Fn(&Entry<B>) -> bool, remove: bool) -> Option<Entry<B>> {
        for _ in 0..2 * SHARDS + 1 {
            let s = self.clock_shard.load(Ordering::Relaxed) % SHARDS;
            let mut shard = self.write(s);
            let Some(i) = clock_pick(&mut shard, &evictable) else {
                // This shard's part is done. Another sweep may have moved the hand on already.
                let _ = self.clock_shard.compare_exchange(
                    s,
                    (s + 1) % SHARDS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                continue;
            };
            return if remove {
                shard.remove_bucket(i)
            } else {
                shard.table.get_bucket(i).cloned()
            };
        }
        None
    }

    /// Removes and returns every entry `pick` chooses, shard by shard under each one's write
    /// lock (so `pick` sees who else holds an entry as eviction does).
    pub fn evict_where(&self, pick: impl Fn(&Entry<B>) -> bool) -> Vec<Entry<B>> {
        let mut taken = Vec::new();
        for s in 0..SHARDS {
            let mut shard = self.write(s);
            for i in 0..shard.table.num_buckets() {
                if shard.table.get_bucket(i).is_some_and(&pick) {
                    taken.extend(shard.remove_bucket(i));
                }
            }
        }
        taken
    }

    /// Visits every entry (shard by shard; concurrent changes may or may not be seen).
    pub fn for_each(&self, mut f: impl FnMut(&Entry<B>)) {
        for i in 0..SHARDS {
            let shard = self.read(i);
            shard.table.iter().for_each(&mut f);
        }
    }

    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.read(i).table.len()).sum()
    }

    /// Bytes of memory the index takes: its entries (record, count, key) and its tables.
    pub fn memory_bytes(&self) -> u64 {
        (0..SHARDS)
            .map(|i| self.read(i).memory_bytes() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The bitmap tracks a `Vec<bool>` through marks, takes and resets.
        #[test]
        fn referenced_bits_follow_their_buckets(
            buckets in 1usize..300,
            ops in prop::collection::vec((0u8..3, any::<u16>()), 1..600),
        ) {
            let mut bits = ReferencedBits::default();
            bits.reset(buckets);
            let mut model = vec![true; buckets];
            for (op, at) in ops {
                let i = usize::from(at) % buckets;
                match op {
                    0 => {
                        bits.mark(i);
                        model[i] = true;
                    }
                    1 => {
                        prop_assert_eq!(bits.take(i), model[i]);
                        model[i] = false;
                    }
                    _ if at % 50 == 0 => {
                        bits.reset(buckets);
                        model = vec![true; buckets];
                    }
                    _ => {}
                }
            }
            for (i, &set) in model.iter().enumerate() {
                prop_assert_eq!(bits.take(i), set);
            }
        }
    }

    #[test]
    fn insert_replace_remove() {
        let idx: Index<u32> = Index::new();
        assert!(idx.insert(Entry::new(b"a", 1)).is_none());
        assert_eq!(*idx.insert(Entry::new(b"a", 2)).unwrap(), 1);
        for k in 0..100u32 {
            idx.insert(Entry::new(&k.to_le_bytes(), k));
        }
        assert_eq!(idx.len(), 101);
        assert_eq!(*idx.remove(b"a").unwrap(), 2);
        assert!(idx.remove(b"a").is_none());
        for k in 0..100u32 {
            assert_eq!(*idx.get(&k.to_le_bytes()).unwrap(), k);
            assert!(idx.remove(&k.to_le_bytes()).is_some());
        }
        assert_eq!(idx.len(), 0);
    }

    #[test]
    fn memory_counts_entries_in_the_table() {
        let idx: Index<u64> = Index::new();
        let empty = idx.memory_bytes();
        let keys: Vec<[u8; 12]> = (0..1000u32)
            .map(|k| {
                let mut key = [b'x'; 12];
                key[..4].copy_from_slice(&k.to_le_bytes());
                key
            })
            .collect();
        for k in &keys {
            idx.insert(Entry::new(k, 0));
        }
        let slot = Entry::new(&keys[0], 0u64).slot_bytes() as u64;
        let full = idx.memory_bytes();
        assert!(
            full >= empty + 1000 * slot,
            "{full} bytes for 1000 slots of {slot}"
        );
        // Buckets at 7/8 load or less: a pointer and a control byte each, at most twice the
        // entries plus a group per shard.
        assert!(full <= 1000 * (slot + 2 * 9) + (SHARDS as u64) * 64 * 9);
        // Replacing keeps the count; removing and evicting take the entries out.
        idx.insert(Entry::new(&keys[0], 1));
        assert_eq!(idx.memory_bytes(), full);
        let held = idx.get(&keys[1]).unwrap();
        idx.remove(&keys[1]);
        assert_eq!(idx.memory_bytes(), full - slot);
        drop(held);
        while idx.evict_one(|_| true).is_some() {}
        assert_eq!(idx.len(), 0);
        // The tables keep their buckets.
        assert_eq!(idx.memory_bytes(), full - 1000 * slot);
    }

    #[test]
    fn clock_spares_recently_used_and_unevictable() {
        let idx: Index<u32> = Index::new();
        for k in 0..50u32 {
            idx.insert(Entry::new(&k.to_le_bytes(), k));
        }
        let mut evicted = Vec::new();
        while let Some(b) = idx.evict_one(|v| **v % 2 == 0) {
            evicted.push(*b);
        }
        assert_eq!(evicted.len(), 25);
        assert!(evicted.iter().all(|v| v % 2 == 0));
        assert_eq!(idx.len(), 25);
    }

    #[test]
    fn contains_many_answers_in_the_callers_order() {
        let idx: Index<u32> = Index::new();
        for k in (0..300u32).step_by(3) {
            idx.insert(Entry::new(&k.to_le_bytes(), k));
        }
        let keys: Vec<[u8; 4]> = (0..300u32).rev().map(u32::to_le_bytes).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let want: Vec<bool> = (0..300u32).rev().map(|k| k % 3 == 0).collect();
        assert_eq!(idx.contains_many(&refs), want);
        assert!(idx.contains_many(&[]).is_empty());
    }

    proptest! {
        /// Any sequence of inserts, removes and evictions leaves the index agreeing with a
        /// plain map: through table growth (its entries move to other buckets), CLOCK takes
        /// only what is stored, and takes it out.
        #[test]
        fn agrees_with_a_map(ops in prop::collection::vec((0u16..300, 0u8..8), 0..1500)) {
            let idx: Index<u32> = Index::new();
            let mut model = std::collections::HashMap::new();
            for (n, (k, op)) in ops.into_iter().enumerate() {
                let key = k.to_le_bytes();
                match op {
                    0..=4 => prop_assert_eq!(
                        idx.insert(Entry::new(&key, n as u32)).map(|b| *b),
                        model.insert(k, n as u32)
                    ),
                    5 | 6 => prop_assert_eq!(idx.remove(&key).map(|b| *b), model.remove(&k)),
                    _ => match idx.evict_one(|_| true) {
                        Some(e) => {
                            let k = u16::from_le_bytes(e.key().try_into().unwrap());
                            prop_assert_eq!(model.remove(&k), Some(*e));
                        }
                        None => prop_assert!(model.is_empty()),
                    },
                }
            }
            prop_assert_eq!(idx.len(), model.len());
            for k in 0u16..300 {
                prop_assert_eq!(idx.get(&k.to_le_bytes()).map(|b| *b), model.get(&k).copied());
            }
        }
    }
}
