//! What the server needs of the memory arena itself: where it is (for RDMA registration) and
//! populating it up front.

use std::time::Duration;

use super::{Backend, Store};
use crate::arena::{ArenaHandle, ArenaInfo, MAX_PREFAULT_THREADS, PrefaultMethod, PrefaultReport};
use crate::error::{Result, StoreError};

impl Store {
    /// The arena to register for RDMA (memory mode).
    pub fn arena(&self) -> Option<ArenaInfo> {
        match &self.inner.backend {
            Backend::Memory(m) => Some(m.info()),
            Backend::File(_) => None,
        }
    }

    /// A handle that keeps the memory arena mapped (memory mode), for registering it with the
    /// RDMA layer; `None` in file mode.
    pub fn arena_handle(&self) -> Option<ArenaHandle> {
        match &self.inner.backend {
            Backend::Memory(m) => Some(m.arena.handle()),
            Backend::File(_) => None,
        }
    }

    /// Populates every page of the memory arena now, so that first writes into it do not fault
    /// and zero pages on the data path. Uses MADV_POPULATE_WRITE (Linux 5.14+), else an atomic
    /// read-modify-write of one byte per page; split over `threads` threads
    /// (1..=[`MAX_PREFAULT_THREADS`]). Safe while the store serves: no byte's value changes.
    /// A no-op in file mode. Takes as long as the kernel needs to allocate and zero the arena.
    pub fn prefault(&self, threads: usize) -> Result<PrefaultReport> {
        if !(1..=MAX_PREFAULT_THREADS).contains(&threads) {
            return Err(StoreError::BadRequest(format!(
                "prefault threads {threads} must be between 1 and {MAX_PREFAULT_THREADS}"
            )));
        }
        match &self.inner.backend {
            Backend::Memory(m) => Ok(m.arena.prefault(threads)?),
            Backend::File(_) => Ok(PrefaultReport {
                bytes: 0,
                elapsed: Duration::ZERO,
                threads: 0,
                method: PrefaultMethod::NotNeeded,
            }),
        }
    }
}
