//! The server's staging region for drive-backed storage: one mapping, registered once for
//! remote READ and WRITE, cut into chunks ([`crate::chunks::ChunkMap`]). A put's bytes land
//! here by the client's RDMA WRITE before the server writes them to the drives; a get's bytes
//! are read from the drives into here for the client's RDMA READ. Each value holds one
//! contiguous run of chunks, a [`StagedRange`], until it is dropped.

use std::sync::{Arc, Mutex, PoisonError};

use memmap2::MmapMut;

use crate::chunks::ChunkMap;
use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::memory::{
    Access, MemoryRegion, PARALLEL_POPULATE_MIN, POPULATE_PIECE, populate_in_parallel,
};

/// A registered region of `chunks × chunk_size` bytes that peers may READ and WRITE.
pub struct RemoteStaging {
    // Drops before `_map`: the region is deregistered before the memory is unmapped.
    region: MemoryRegion,
    _map: MmapMut,
    /// The mapping's first byte; ranges are derived from it without borrowing the mapping.
    base: usize,
    chunk_size: usize,
    chunks: Mutex<ChunkMap>,
}

/// How much of a [`RemoteStaging`] is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingUsage {
    pub chunk_size: usize,
    pub chunks_total: usize,
    pub chunks_in_use: usize,
    /// The longest free run: the largest value that can be staged now is this many chunks.
    pub largest_free_run: usize,
}

impl RemoteStaging {
    /// Maps, populates and registers `chunk_size * chunks` bytes on `device`.
    pub fn new(
        device: &RdmaDevice,
        chunk_size: usize,
        chunks: usize,
    ) -> Result<Arc<Self>, RdmaError> {
        if chunk_size == 0 || chunks == 0 {
            return Err(RdmaError::InvalidArgument {
                name: "staging region",
                value: format!("{chunks} chunks of {chunk_size} bytes"),
                limit: "needs at least one chunk of at least one byte",
            });
        }
        let len = chunk_size.checked_mul(chunks).ok_or(RdmaError::TooLarge {
            what: "staging region size in bytes",
            requested: u64::MAX,
            limit: usize::MAX as u64,
        })?;
        let mut map =
            MmapMut::map_anon(len).map_err(|e| RdmaError::verbs("mmap", device.name(), &e))?;
        if len >= POPULATE_PIECE {
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        if len >= PARALLEL_POPULATE_MIN {
            populate_in_parallel(&map);
        }
        let base = map.as_mut_ptr() as usize;
        // SAFETY: the mapping is `len` bytes, owned by the staging, and outlives the region
        // (field order drops the region first).
        let region =
            unsafe { MemoryRegion::register(device, map.as_mut_ptr(), len, Access::Remote)? };
        Ok(Arc::new(Self {
            region,
            _map: map,
            base,
            chunk_size,
            chunks: Mutex::new(ChunkMap::new(chunks)),
        }))
    }

    /// The registered address and rkey peers use (the Connect answer names them).
    pub fn addr(&self) -> u64 {
        self.region.addr()
    }

    pub fn rkey(&self) -> u32 {
        self.region.rkey()
    }

    pub fn len(&self) -> usize {
        self.region.len()
    }

    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    pub fn usage(&self) -> StagingUsage {
        let map = self.lock();
        StagingUsage {
            chunk_size: self.chunk_size,
            chunks_total: map.total(),
            chunks_in_use: map.in_use(),
            largest_free_run: map.largest_free_run(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ChunkMap> {
        self.chunks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run of chunks holding `len` bytes, or `None` when no free run is that long now.
    pub fn try_stage(self: &Arc<Self>, len: usize) -> Option<StagedRange> {
        let chunks = len.div_ceil(self.chunk_size);
        let first = self.lock().allocate(chunks)?;
        Some(StagedRange {
            staging: Arc::clone(self),
            first,
            chunks,
            len,
        })
    }
}

/// `len` bytes of a [`RemoteStaging`], held by one value until dropped.
pub struct StagedRange {
    staging: Arc<RemoteStaging>,
    first: usize,
    chunks: usize,
    len: usize,
}

impl StagedRange {
    fn start(&self) -> usize {
        self.staging.base + self.first * self.staging.chunk_size
    }

    /// Where a peer READs or WRITEs these bytes (with [`Self::rkey`]).
    pub fn remote_addr(&self) -> u64 {
        self.staging.addr() + (self.first * self.staging.chunk_size) as u64
    }

    pub fn rkey(&self) -> u32 {
        self.staging.rkey()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the staged bytes from `offset` on into `dst` (a put's, once the client's WRITE
    /// completed and it sent Commit). Panics if the bytes lie outside the range.
    ///
    /// A copy, not a slice: peers hold the region's rkey, so a misbehaving one can write these
    /// bytes at any time, and a reference to memory changed under it is undefined behaviour.
    /// The server verifies every value's checksum on what it copied.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: `check` keeps the bytes inside the run, which lies inside the mapping the
        // `Arc` keeps mapped and belongs to this range alone (the chunk map handed it out
        // once); `dst` is owned memory that cannot overlap the mapping. Raw copies make no
        // claim that the bytes stay unchanged (a peer's WRITE may land meanwhile).
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.start() + offset) as *const u8,
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
    }

    /// Copies `src` into the staged bytes from `offset` on (a get's, from the drives, before
    /// the client READs them). Panics if the bytes lie outside the range.
    pub fn copy_in(&mut self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: as in `copy_out`, with the roles of the two sides swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                (self.start() + offset) as *mut u8,
                src.len(),
            );
        }
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "{len} bytes at {offset} lie outside a staged range of {} bytes",
            self.len
        );
    }
}

impl Drop for StagedRange {
    fn drop(&mut self) {
        self.staging.lock().free(self.first, self.chunks);
    }
}
