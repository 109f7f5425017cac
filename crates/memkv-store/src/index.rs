//! Sharded key -> block index shared by both modes.
//!
//! Each shard keeps its entries in a dense vector (so the CLOCK hand in [`crate::eviction`] can
//! sweep it) plus a hash table of slot numbers. The key is stored once, in its slot: the table
//! holds only a `u32` per entry and finds keys through the slots (hashbrown's `HashTable`), which
//! halves the index's memory against a map that keeps its own copy of every key. Blocks are
//! `Arc`s: replacing or removing an entry never frees bytes a reader still holds; they go when
//! the last `Arc` drops.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use crate::eviction::clock_pick;

const SHARDS: usize = 64;

pub(crate) struct Slot<B> {
    pub key: Box<[u8]>,
    pub block: Arc<B>,
    pub referenced: AtomicBool,
}

pub(crate) struct Shard<B> {
    /// Slot numbers, hashed by their slots' keys.
    table: HashTable<u32>,
    pub slots: Vec<Slot<B>>,
    pub hand: usize,
}

/// The hash of a key within a shard (the shard itself is chosen by the same hash's low bits,
/// so the table uses it rotated).
fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key).rotate_right(32)
}

impl<B> Shard<B> {
    fn find(&self, key: &[u8]) -> Option<usize> {
        self.table
            .find(key_hash(key), |&i| &*self.slots[i as usize].key == key)
            .map(|&i| i as usize)
    }

    fn insert_new(&mut self, key: &[u8], block: Arc<B>) {
        let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 entries per shard");
        self.slots.push(Slot {
            key: key.into(),
            block,
            referenced: AtomicBool::new(true),
        });
        let Shard { table, slots, .. } = self;
        table.insert_unique(key_hash(key), i, |&j| key_hash(&slots[j as usize].key));
    }

    fn remove_slot(&mut self, i: usize) -> Slot<B> {
        let key_of = |slots: &[Slot<B>], at: usize| key_hash(&slots[at].key);
        let removed_hash = key_of(&self.slots, i);
        if let Ok(entry) = self.table.find_entry(removed_hash, |&j| j as usize == i) {
            entry.remove();
        }
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
                        hand: 0,
                    })
                })
                .collect(),
            clock_shard: AtomicUsize::new(0),
        }
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64(key) % SHARDS as u64) as usize
    }

    fn read(&self, i: usize) -> RwLockReadGuard<'_, Shard<B>> {
        self.shards[i].read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self, i: usize) -> RwLockWriteGuard<'_, Shard<B>> {
        self.shards[i].write().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks a key up and marks it recently used.
    pub fn get(&self, key: &[u8]) -> Option<Arc<B>> {
        let shard = self.read(self.shard_of(key));
        let slot = &shard.slots[shard.find(key)?];
        slot.referenced.store(true, Ordering::Relaxed);
        Some(Arc::clone(&slot.block))
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.read(self.shard_of(key)).find(key).is_some()
    }

    /// Points `key` at `block`, returning the block it replaced.
    pub fn insert(&self, key: &[u8], block: Arc<B>) -> Option<Arc<B>> {
        let mut shard = self.write(self.shard_of(key));
        if let Some(i) = shard.find(key) {
            let slot = &mut shard.slots[i];
            slot.referenced.store(true, Ordering::Relaxed);
            return Some(std::mem::replace(&mut slot.block, block));
        }
        shard.insert_new(key, block);
        None
    }

    pub fn remove(&self, key: &[u8]) -> Option<Arc<B>> {
        let mut shard = self.write(self.shard_of(key));
        let i = shard.find(key)?;
        Some(shard.remove_slot(i).block)
    }

    /// Runs CLOCK over the shards in turn and returns one evictable entry (not removed).
    pub fn choose_victim(&self, evictable: impl Fn(&B) -> bool) -> Option<(Box<[u8]>, Arc<B>)> {
        self.sweep(evictable, false)
    }

    /// Like [`Self::choose_victim`] but removes the entry under the same lock.
    pub fn evict_one(&self, evictable: impl Fn(&B) -> bool) -> Option<(Box<[u8]>, Arc<B>)> {
        self.sweep(evictable, true)
    }

    fn sweep(&self, evictable: impl Fn(&B) -> bool, remove: bool) -> Option<(Box<[u8]>, Arc<B>)> {
        for _ in 0..SHARDS {
            let s = self.clock_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut shard = self.write(s);
            let Some(i) = clock_pick(&mut shard, &evictable) else {
                continue;
            };
            if remove {
                let slot = shard.remove_slot(i);
                return Some((slot.key, slot.block));
            }
            let slot = &shard.slots[i];
            return Some((slot.key.clone(), Arc::clone(&slot.block)));
        }
        None
    }

    /// Visits every entry (shard by shard; concurrent changes may or may not be seen).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &Arc<B>)) {
        for i in 0..SHARDS {
            let shard = self.read(i);
            for slot in &shard.slots {
                f(&slot.key, &slot.block);
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

    #[test]
    fn insert_replace_remove() {
        let idx: Index<u32> = Index::new();
        assert!(idx.insert(b"a", Arc::new(1)).is_none());
        assert_eq!(*idx.insert(b"a", Arc::new(2)).unwrap(), 1);
        for k in 0..100u32 {
            idx.insert(&k.to_le_bytes(), Arc::new(k));
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
            idx.insert(&k.to_le_bytes(), Arc::new(k));
        }
        let mut evicted = Vec::new();
        while let Some((_, b)) = idx.evict_one(|v| *v % 2 == 0) {
            evicted.push(*b);
        }
        assert_eq!(evicted.len(), 25);
        assert!(evicted.iter().all(|v| v % 2 == 0));
        assert_eq!(idx.len(), 25);
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
                    proptest::prop_assert_eq!(idx.insert(&key, Arc::new(n as u32)).map(|b| *b), model.insert(k, n as u32));
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
