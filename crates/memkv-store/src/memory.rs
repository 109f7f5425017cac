//! Memory mode: values live in the arena; the index maps keys to arena blocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::allocator::Occupancy;
use crate::arena::{ArenaBlock, ArenaInfo, MemoryArena};
use crate::error::{Result, StoreError};
use crate::index::{Entry, Index};

/// A committed value in the arena. Immutable: no `&mut` to its bytes exists once committed.
pub(crate) struct MemBlock {
    pub data: ArenaBlock,
    pub checksum: u64,
}

pub(crate) struct MemoryBackend {
    pub arena: Arc<MemoryArena>,
    pub index: Index<MemBlock>,
    value_bytes: AtomicU64,
    granule: u64,
}

impl MemoryBackend {
    pub fn new(max_size: u64, block_size: u64, shareable: bool) -> Result<Self> {
        Ok(Self {
            arena: MemoryArena::new(max_size, block_size, shareable)?,
            index: Index::new(),
            value_bytes: AtomicU64::new(0),
            granule: block_size,
        })
    }

    pub fn try_allocate(&self, len: u64) -> Option<ArenaBlock> {
        ArenaBlock::allocate(&self.arena, len)
    }

    /// Evicts one committed value that no reader holds (an RDMA pin, a response being sent):
    /// dropping one still held would free nothing. Returns the bytes it freed (its
    /// reservation's), `None` when nothing is evictable.
    pub fn evict_one(&self) -> Option<u64> {
        let old = self.index.evict_one(Entry::only_in_index)?;
        self.value_bytes
            .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
        Some(old.data.reserved())
    }

    /// Evicts every value in a run of granules that a new block of `len` bytes could take once
    /// they are gone: for when evicting in CLOCK order has freed as many bytes as the block
    /// needs, but in pieces (slots in slabs that other values keep, granules between others),
    /// so that going on would evict most of the cache before a slab empties or free granules
    /// meet. The run holds the value CLOCK picks next (so what goes is still chosen by
    /// recency), and is the cheapest such run in bytes evicted; when none around it can be
    /// cleared, the cheapest anywhere. A run counts only where every value in it can be evicted
    /// and nothing outside the index (a put in progress, a replaced value still being read)
    /// holds space in it. Returns how many values it evicted (0: no such run).
    pub fn evict_room_for(&self, len: u64) -> u64 {
        let need = self.arena.granules_needed(len) as usize;
        let occ = self.arena.occupancy();
        let n = occ.unit.len();
        if need == 0 || need > n {
            return 0;
        }
        // The granule the next CLOCK victim starts in; the clone is dropped at once, since a
        // held entry is not evictable.
        let Some(anchor) = self
            .index
            .choose_victim(Entry::only_in_index)
            .map(|e| e.data.units().0.start as usize)
        else {
            return 0;
        };
        // Per unit: the bytes the index's values hold in it, and whether one of them is held
        // by a reader.
        let mut indexed = vec![0u64; n];
        let mut held = vec![false; n];
        self.index.for_each(|e| {
            let (units, bytes) = e.data.units();
            let evictable = Entry::only_in_index(e);
            for u in units {
                indexed[u as usize] += bytes;
                held[u as usize] |= !evictable;
            }
        });
        let clearable = |u: u32| !held[u as usize] && indexed[u as usize] == occ.bytes[u as usize];
        // The bytes evicting the values of `need` granules from `start` on frees (a unit
        // reaching into the run costs all of its bytes once), `None` when one cannot go.
        let cost = |start: usize| {
            let mut cost = 0;
            let mut last = Occupancy::FREE;
            for &u in &occ.unit[start..start + need] {
                if u == Occupancy::FREE || u == last {
                    continue;
                }
                if !clearable(u) {
                    return None;
                }
                cost += occ.bytes[u as usize];
                last = u;
            }
            Some(cost)
        };
        let cheapest = |starts: std::ops::RangeInclusive<usize>| {
            starts
                .filter_map(|start| cost(start).map(|c| (c, start)))
                .min()
                .map(|(_, start)| start)
        };
        let around = anchor.saturating_sub(need - 1)..=anchor.min(n - need);
        let Some(start) = cheapest(around).or_else(|| cheapest(0..=n - need)) else {
            return 0;
        };
        let mut chosen = vec![false; n];
        for &u in &occ.unit[start..start + need] {
            if u != Occupancy::FREE {
                chosen[u as usize] = true;
            }
        }
        let evicted = self.index.evict_where(|e| {
            Entry::only_in_index(e) && e.data.units().0.any(|u| chosen[u as usize])
        });
        for old in &evicted {
            self.value_bytes
                .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
        }
        evicted.len() as u64
    }

    /// Publishes `data` under `key` once its bytes hash to `checksum`.
    pub fn commit(&self, key: &[u8], data: ArenaBlock, checksum: u64, verify: bool) -> Result<()> {
        if verify {
            let actual = crate::arena::xxh3(data.as_slice());
            if actual != checksum {
                return Err(StoreError::ChecksumMismatch {
                    expected: checksum,
                    actual,
                });
            }
        }
        let len = data.len() as u64;
        let block = MemBlock { data, checksum };
        self.value_bytes.fetch_add(len, Ordering::Relaxed);
        if let Some(old) = self.index.insert(Entry::new(key, block)) {
            self.value_bytes
                .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    pub fn get(&self, key: &[u8]) -> Option<Entry<MemBlock>> {
        self.index.get(key)
    }

    pub fn delete(&self, key: &[u8]) -> bool {
        match self.index.remove(key) {
            Some(old) => {
                self.value_bytes
                    .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    pub fn value_bytes(&self) -> u64 {
        self.value_bytes.load(Ordering::Relaxed)
    }

    pub fn info(&self) -> ArenaInfo {
        self.arena.info()
    }

    pub fn granule(&self) -> u64 {
        self.granule
    }
}
