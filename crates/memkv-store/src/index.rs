//! Sharded key -> block index shared by both modes.
//!
//! Each shard keeps its entries in a dense vector (so the CLOCK hand in [`crate::eviction`] can
//! sweep it) plus a hash map from key to slot. Blocks are `Arc`s: replacing or removing an entry
//! never frees bytes a reader still holds; they go when the last `Arc` drops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::eviction::clock_pick;

const SHARDS: usize = 64;

pub(crate) struct Slot<B> {
    pub key: Box<[u8]>,
    pub block: Arc<B>,
    pub referenced: AtomicBool,
}

pub(crate) struct Shard<B> {
    map: HashMap<Box<[u8]>, usize>,
    pub slots: Vec<Slot<B>>,
    pub hand: usize,
}

impl<B> Shard<B> {
    fn remove_slot(&mut self, i: usize) -> Slot<B> {
        let slot = self.slots.swap_remove(i);
        self.map.remove(&slot.key);
        if let Some(moved) = self.slots.get(i) {
            *self.map.get_mut(&moved.key).expect("moved slot is mapped") = i;
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
                        map: HashMap::new(),
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
        let slot = &shard.slots[*shard.map.get(key)?];
        slot.referenced.store(true, Ordering::Relaxed);
        Some(Arc::clone(&slot.block))
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.read(self.shard_of(key)).map.contains_key(key)
    }

    /// Points `key` at `block`, returning the block it replaced.
    pub fn insert(&self, key: &[u8], block: Arc<B>) -> Option<Arc<B>> {
        let mut shard = self.write(self.shard_of(key));
        if let Some(&i) = shard.map.get(key) {
            let slot = &mut shard.slots[i];
            slot.referenced.store(true, Ordering::Relaxed);
            return Some(std::mem::replace(&mut slot.block, block));
        }
        let i = shard.slots.len();
        shard.map.insert(key.into(), i);
        shard.slots.push(Slot {
            key: key.into(),
            block,
            referenced: AtomicBool::new(true),
        });
        None
    }

    pub fn remove(&self, key: &[u8]) -> Option<Arc<B>> {
        let mut shard = self.write(self.shard_of(key));
        let i = *shard.map.get(key)?;
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
}
