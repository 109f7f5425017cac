//! Pins for one-sided (RDMA READ) access: a pinned block keeps its arena bytes unchanged until
//! released or until its lease runs out. The pin holds the index entry, so eviction, which takes
//! only entries nobody else holds, skips it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::ids::UnguessableIds;
use crate::index::Entry;
use crate::memory::MemBlock;
use crate::value::Pinned;

#[derive(Default)]
pub(crate) struct PinTable {
    pins: Mutex<HashMap<u64, (Entry<MemBlock>, Instant)>>,
    ids: UnguessableIds,
}

impl PinTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (Entry<MemBlock>, Instant)>> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn pin(&self, block: Entry<MemBlock>, deadline: Instant) -> Pinned {
        let mut pins = self.lock();
        let pin_id = self.ids.next(|id| pins.contains_key(&id));
        let pinned = Pinned {
            pin_id,
            arena_offset: block.data.offset(),
            len: block.data.len() as u64,
            checksum: block.checksum,
        };
        pins.insert(pin_id, (block, deadline));
        pinned
    }

    pub fn release(&self, pin_id: u64) -> bool {
        // The entry drops after the lock does: it may be the last holder and free the bytes.
        let removed = self.lock().remove(&pin_id);
        removed.is_some()
    }

    pub fn reap(&self, now: Instant) -> usize {
        let mut pins = self.lock();
        let before = pins.len();
        pins.retain(|_, (_, deadline)| now <= *deadline);
        before - pins.len()
    }

    /// The arena bytes pinned values hold (each value once, however many pins it has): space
    /// no eviction can free, including values overwritten or deleted since they were pinned.
    pub fn pinned_bytes(&self) -> u64 {
        let pins = self.lock();
        let mut seen = std::collections::HashSet::with_capacity(pins.len());
        pins.values()
            .filter(|(block, _)| seen.insert(block.data.offset()))
            .map(|(block, _)| block.data.reserved())
            .sum()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}
