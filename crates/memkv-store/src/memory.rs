//! Memory mode: values live in the arena; the index maps keys to arena blocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// dropping one still held would free nothing. `false` when nothing is evictable.
    pub fn evict_one(&self) -> bool {
        match self.index.evict_one(Entry::only_in_index) {
            Some(old) => {
                self.value_bytes
                    .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
                true
            }
            None => false,
        }
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
