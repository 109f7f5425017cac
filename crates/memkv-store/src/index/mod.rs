//! Sharded key -> block index shared by both modes.
//!
//! Each shard keeps its entries in a dense vector (so the CLOCK hand in [`crate::eviction`] can
//! sweep it) plus a hash table of slot numbers. The key is stored once, in its [`Entry`]: the
//! table holds only a `u32` per entry and finds keys through the slots (hashbrown's
//! `HashTable`), which halves the index's memory against a map that keeps its own copy of every
//! key. Entries are reference-counted: replacing or removing one never frees bytes a reader
//! still holds; they go when the last clone drops. CLOCK's referenced bits are a bitmap beside
//! the slots (a bit per entry, not a padded byte in each slot).

mod entry;

pub(crate) use entry::Entry;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use crate::eviction::clock_pick;

const SHARDS: usize = 64;

pub(crate) struct Shard<B> {
    /// Slot numbers, hashed by their slots' keys.
    table: HashTable<u32>,
    pub slots: Vec<Entry<B>>,
    /// Bit `i`: slot `i` was used since the CLOCK hand last passed it.
    pub referenced: ReferencedBits,
    pub hand: usize,
}

/// One bit per slot, set by readers under the shard's read lock.
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

    /// Sets bit `len` for a slot pushed at the end (`len` slots before it).
    fn push(&mut self, len: usize) {
        let (w, _) = Self::word_bit(len);
        if w == self.0.len() {
            self.0.push(AtomicU64::new(0));
        }
        self.mark(len);
    }

    /// Mirrors `Vec::swap_remove(i)` on `len` slots: the last bit moves to `i`.
    fn swap_remove(&mut self, i: usize, len: usize) {
        let last = len - 1;
        let moved = self.take(last);
        if i != last {
            self.take(i);
            if moved {
                self.mark(i);
            }
        }
        if last % 64 == 0 {
            self.0.pop();
        }
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

/// The hash of a stored key within its shard (the table's rehash needs it).
fn key_hash(key: &[u8]) -> u64 {
    Hashed::new(key).in_shard()
}

impl<B> Shard<B> {
    fn find(&self, key: Hashed<'_>) -> Option<usize> {
        self.table
            .find(key.in_shard(), |&i| self.slots[i as usize].key() == key.key)
            .map(|&i| i as usize)
    }

    /// Adds `entry`, whose key is not present and hashes to `in_shard`.
    fn insert_new(&mut self, in_shard: u64, entry: Entry<B>) {
        let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 entries per shard");
        self.referenced.push(self.slots.len());
        self.slots.push(entry);
        let Shard { table, slots, .. } = self;
        table.insert_unique(in_shard, i, |&j| key_hash(slots[j as usize].key()));
    }

    fn remove_slot(&mut self, i: usize) -> Entry<B> {
        let key_of = |slots: &[Entry<B>], at: usize| key_hash(slots[at].key());
        let removed_hash = key_of(&self.slots, i);
        if let Ok(entry) = self.table.find_entry(removed_hash, |&j| j as usize == i) {
            entry.remove();
        }
        self.referenced.swap_remove(i, self.slots.len());
        let slot = self.slots.swap_remove(i);
        if i < self.slots.len() {
            // The last slot moved into `i`: repoint its table entry.
            let last = self.slots.len() as u32;
            let moved_hash = key_of(&self.slots, i);
            if let Some(entry) = self.table.find_mut(moved_hash, |&j| j == last) {
                *entry = i as u32;
            }
        }
        slot
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
                        slots: Vec::new(),
                        referenced: ReferencedBits::default(),
                        hand: 0,
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
        let i = shard.find(key)?;
        shard.referenced.mark(i);
        Some(shard.slots[i].clone())
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        let key = Hashed::new(key);
        self.read(key.shard()).find(key).is_some()
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
                found[i as usize] = shard.find(hashed[i as usize]).is_some();
            }
        }
        found
    }

    /// Stores `entry` under its key, returning the entry it replaced.
    pub fn insert(&self, entry: Entry<B>) -> Option<Entry<B>> {
        let key = Hashed::new(entry.key());
        let (shard_no, in_shard) = (key.shard(), key.in_shard());
        let mut shard = self.write(shard_no);
        match shard.find(key) {
            Some(i) => {
                shard.referenced.mark(i);
                Some(std::mem::replace(&mut shard.slots[i], entry))
            }
            None => {
                shard.insert_new(in_shard, entry);
                None
            }
        }
    }

    pub fn remove(&self, key: &[u8]) -> Option<Entry<B>> {
        let key = Hashed::new(key);
        let mut shard = self.write(key.shard());
        let i = shard.find(key)?;
        Some(shard.remove_slot(i))
    }

    /// Runs CLOCK over the shards in turn and returns one evictable entry (not removed).
    pub fn choose_victim(&self, evictable: impl Fn(&Entry<B>) -> bool) -> Option<Entry<B>> {
        self.sweep(evictable, false)
    }

    /// Like [`Self::choose_victim`] but removes the entry under the same lock.
    pub fn evict_one(&self, evictable: impl Fn(&Entry<B>) -> bool) -> Option<Entry<B>> {
        self.sweep(evictable, true)
    }

    fn sweep(&self, evictable: impl Fn(&Entry<B>) -> bool, remove: bool) -> Option<Entry<B>> {
        for _ in 0..SHARDS {
            let s = self.clock_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut shard = self.write(s);
            let Some(i) = clock_pick(&mut shard, &evictable) else {
                continue;
            };
            if remove {
                return Some(shard.remove_slot(i));
            }
            return Some(shard.slots[i].clone());
        }
        None
    }

    /// Visits every entry (shard by shard; concurrent changes may or may not be seen).
    pub fn for_each(&self, mut f: impl FnMut(&Entry<B>)) {
        for i in 0..SHARDS {
            let shard = self.read(i);
            for entry in &shard.slots {
                f(entry);
            }
        }
    }

    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.read(i).slots.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The bitmap tracks a `Vec<bool>` through pushes, swap-removes, marks and takes.
        #[test]
        fn referenced_bits_follow_their_slots(ops in prop::collection::vec((0u8..4, any::<u16>()), 1..600)) {
            let mut bits = ReferencedBits::default();
            let mut model: Vec<bool> = Vec::new();
            for (op, at) in ops {
                let i = usize::from(at) % model.len().max(1);
                match op {
                    0 | 1 => {
                        bits.push(model.len());
                        model.push(true);
                    }
                    2 if !model.is_empty() => {
                        bits.swap_remove(i, model.len());
                        model.swap_remove(i);
                    }
                    3 if !model.is_empty() => {
                        prop_assert_eq!(bits.take(i), model[i]);
                        model[i] = false;
                    }
                    _ => {}
                }
                prop_assert_eq!(bits.0.len(), model.len().div_ceil(64));
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

    proptest::proptest! {
        /// Any sequence of inserts and removes leaves the index agreeing with a plain map, the
        /// table pointing every key at its own slot.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u8..40, proptest::bool::ANY), 0..400)) {
            let idx: Index<u32> = Index::new();
            let mut model = std::collections::HashMap::new();
            for (n, (k, insert)) in ops.into_iter().enumerate() {
                let key = [k];
                if insert {
                    proptest::prop_assert_eq!(idx.insert(Entry::new(&key, n as u32)).map(|b| *b), model.insert(k, n as u32));
                } else {
                    proptest::prop_assert_eq!(idx.remove(&key).map(|b| *b), model.remove(&k));
                }
            }
            proptest::prop_assert_eq!(idx.len(), model.len());
            for k in 0u8..40 {
                proptest::prop_assert_eq!(idx.get(&[k]).map(|b| *b), model.get(&k).copied());
            }
        }
    }
}
