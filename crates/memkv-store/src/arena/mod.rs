//! The memory-mode arena: one anonymous mapping (explicit hugepages, else transparent
//! hugepages, else ordinary pages) plus the blocks handed out inside it.
//!
//! This is the only module with `unsafe`: here, in [`drive_map`] (file-mode drives mapped for
//! one-pass reads), in [`prefault`], in [`uring`] (direct mode's io_uring with registered
//! buffers the kernel reads and writes), and in [`entry`] and [`slab`] (the index's entries,
//! laid out by hand in slots of their own allocator). (The SIMD checksum, whose fused copy-and-hash writes
//! arena blocks, is the `memkv-checksum` crate, shared with the client.) Soundness rests on one invariant kept
//! here: an [`ArenaBlock`] is the sole owner of its range (the [`Allocator`] never hands out
//! overlapping live ranges, and a block frees its range only when dropped), so `&mut` access
//! through a block never aliases another block's bytes. Remote writers (RDMA) act outside Rust's model; the
//! protocol (reservation ids, pins) keeps them on ranges nobody else reads at the time.

mod discard;
mod drive_map;
mod entry;
mod prefault;
mod slab;
mod uring;

use std::io;
use std::sync::Arc;

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::allocator::{AllocStats, Allocation, Allocator, Occupancy};
pub(crate) use discard::discard_range;
pub(crate) use drive_map::DriveMap;
pub(crate) use entry::Entry;
pub use memkv_checksum::Xxh3Stream;
pub(crate) use memkv_checksum::{IncrementalXxh3, copy_and_xxh3, xxh3};
pub use prefault::{MAX_PREFAULT_THREADS, PrefaultMethod, PrefaultReport};
pub(crate) use uring::{BufferLease, DIRECT_ALIGN, DirectRing, Direction, InFlight};

/// What memory backs the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArenaBacking {
    /// MAP_HUGETLB pages reserved by the administrator (`vm.nr_hugepages`).
    ExplicitHugepages { page_size: u64 },
    /// Ordinary mapping advised with MADV_HUGEPAGE.
    TransparentHugepages,
    /// Ordinary pages.
    RegularPages,
}

/// Where the arena lives, for registering it once as one RDMA memory region.
#[derive(Debug, Clone, Copy)]
pub struct ArenaInfo {
    pub ptr: *mut u8,
    pub len: usize,
    pub backing: ArenaBacking,
}

/// A share in the memory arena's mapping: the mapping stays in place, at the same address,
/// for as long as any handle lives (even after the store itself is dropped). This is what lets
/// the RDMA layer register the arena without trusting its caller about lifetimes.
#[derive(Clone)]
pub struct ArenaHandle(Arc<MemoryArena>);

impl ArenaHandle {
    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.0.map.as_mut_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Never true: an arena maps at least one granule.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    pub fn backing(&self) -> ArenaBacking {
        self.0.backing
    }

    /// The memfd behind a shareable arena (`None` for a private one), for handing to clients
    /// on the same host.
    pub fn shared_file(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.0.file.as_ref().map(|f| f.as_fd())
    }
}

impl std::fmt::Debug for ArenaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaHandle")
            .field("ptr", &self.as_ptr())
            .field("len", &self.len())
            .finish()
    }
}

pub(crate) struct MemoryArena {
    map: MmapRaw,
    /// The memfd behind a shareable arena; kept open for every client it is handed to.
    file: Option<std::fs::File>,
    len: usize,
    backing: ArenaBacking,
    allocator: Allocator,
}

impl MemoryArena {
    /// Maps `max_size` bytes and carves them into `granule`-sized units. `shareable`: in a
    /// sealed memfd that clients on the same host can map, else anonymous memory.
    pub fn new(max_size: u64, granule: u64, shareable: bool) -> io::Result<Arc<Self>> {
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "arena size exceeds usize");
        let len = usize::try_from(max_size).map_err(|_| too_big())?;
        let (map, file, len, backing) = if shareable {
            let (map, file, len, backing) = map_shareable(len)?;
            (map, Some(file), len, backing)
        } else {
            let (map, len, backing) = map_with_best_backing(len)?;
            (map, None, len, backing)
        };
        let granules = max_size / granule;
        if granules > crate::allocator::MAX_GRANULES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an arena of {max_size} bytes holds {granules} blocks of {granule} bytes; at most {} blocks are supported (raise memory.block_size)",
                    crate::allocator::MAX_GRANULES
                ),
            ));
        }
        tracing::info!(len, ?backing, shareable, "memory arena mapped");
        if backing == ArenaBacking::RegularPages && len as u64 >= HUGE_2M {
            tracing::warn!(
                len,
                shareable,
                remedy = small_pages_remedy(shareable),
                "memory arena is on 4 KiB pages: a NIC's translation cache and the CPU's TLB cover 512 times less of it than of 2 MiB pages"
            );
        }
        Ok(Arc::new(Self {
            map,
            file,
            len,
            backing,
            allocator: Allocator::new(granule, granules),
        }))
    }

    pub fn handle(self: &Arc<Self>) -> ArenaHandle {
        ArenaHandle(Arc::clone(self))
    }

    pub fn info(&self) -> ArenaInfo {
        ArenaInfo {
            ptr: self.map.as_mut_ptr(),
            len: self.len,
            backing: self.backing,
        }
    }

    pub fn alloc_stats(&self) -> AllocStats {
        self.allocator.stats()
    }

    /// Free granules in one run that a new block of `len` bytes may need.
    pub fn granules_needed(&self, len: u64) -> u64 {
        self.allocator.granules_needed(len)
    }

    /// What holds each granule (a picture that may be slightly stale).
    pub fn occupancy(&self) -> Occupancy {
        self.allocator.occupancy()
    }
}

/// Exclusive owner of `len` bytes at `offset` inside the arena; frees them on drop. Every
/// memory-mode block holds one, so it is 24 bytes: the offset is derived from the allocation
/// and the length stored as what the allocation reserves beyond it (under one granule, at most
/// 1 GiB, so 32 bits).
pub(crate) struct ArenaBlock {
    arena: Arc<MemoryArena>,
    alloc: Allocation,
    slack: u32,
}

impl ArenaBlock {
    pub fn allocate(arena: &Arc<MemoryArena>, len: u64) -> Option<Self> {
        let alloc = arena.allocator.allocate(len)?;
        let reserved = arena.allocator.reserved(&alloc);
        debug_assert!(arena.allocator.offset(&alloc) + reserved <= arena.len as u64);
        let slack = u32::try_from(reserved - len)
            .expect("an allocation reserves under a granule (at most 1 GiB) beyond its value");
        Some(Self {
            arena: Arc::clone(arena),
            alloc,
            slack,
        })
    }

    pub fn offset(&self) -> u64 {
        self.arena.allocator.offset(&self.alloc)
    }

    pub fn len(&self) -> usize {
        (self.arena.allocator.reserved(&self.alloc) - u64::from(self.slack)) as usize
    }

    /// The bytes this block holds in the arena: its length rounded up to its size class,
    /// page run or granule run.
    pub fn reserved(&self) -> u64 {
        self.arena.allocator.reserved(&self.alloc)
    }

    /// The allocator's units this block lies in and the bytes it holds in each
    /// ([`Occupancy`]).
    pub fn units(&self) -> (std::ops::Range<u32>, u64) {
        self.arena.allocator.units(&self.alloc)
    }

    pub fn as_slice(&self) -> &[u8] {
        let len = self.len();
        if len == 0 {
            return &[];
        }
        // SAFETY: the range [offset, offset + len) lies inside the live mapping (the allocator
        // only hands out ranges below the granule count, which fits in `len` of the map), the
        // mapping outlives `self` because we hold an `Arc` to the arena, and no `&mut` to this
        // range exists while `&self` is borrowed because this block is its only owner.
        unsafe {
            std::slice::from_raw_parts(self.arena.map.as_ptr().add(self.offset() as usize), len)
        }
    }

    /// Fills the block from `src` (same length) and returns the bytes' xxh3-64, in one pass.
    pub fn fill_hashed(&mut self, src: &[u8]) -> u64 {
        copy_and_xxh3(self.as_mut_slice(), src)
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len();
        if len == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`; additionally `&mut self` proves no other borrow of this
        // block's bytes is live, and no other block overlaps the range.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.arena.map.as_mut_ptr().add(self.offset() as usize),
                len,
            )
        }
    }
}

impl Drop for ArenaBlock {
    fn drop(&mut self) {
        self.arena.allocator.free(self.alloc);
    }
}

const HUGE_2M: u64 = 2 << 20;

fn map_with_best_backing(len: usize) -> io::Result<(MmapRaw, usize, ArenaBacking)> {
    if let Some(page) = hugetlb_page_size() {
        let rounded = (len as u64).div_ceil(page) * page;
        if hugetlb_free_bytes(page) >= rounded
            && let Ok(m) = MmapOptions::new()
                .len(rounded as usize)
                .huge(Some(page.trailing_zeros() as u8))
                .map_anon()
        {
            let backing = ArenaBacking::ExplicitHugepages { page_size: page };
            return Ok((MmapRaw::from(m), rounded as usize, backing));
        }
    }
    let m = MmapOptions::new().len(len).map_anon()?;
    let backing = if thp_available() && len as u64 >= HUGE_2M && m.advise(Advice::HugePage).is_ok()
    {
        ArenaBacking::TransparentHugepages
    } else {
        ArenaBacking::RegularPages
    };
    Ok((MmapRaw::from(m), len, backing))
}

/// A memfd-backed arena: explicit hugepages when enough are free, else shared memory advised
/// to use transparent hugepages (which the kernel grants only where
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows).
fn map_shareable(len: usize) -> io::Result<(MmapRaw, std::fs::File, usize, ArenaBacking)> {
    const NAME: &str = "memkv-arena";
    if let Some(page) = hugetlb_page_size() {
        let rounded = (len as u64).div_ceil(page) * page;
        if hugetlb_free_bytes(page) >= rounded
            && let Ok(file) = memkv_shm::arena_file::create(NAME, rounded, Some(page))
            && let Ok(map) = MmapOptions::new().len(rounded as usize).map_raw(&file)
        {
            let backing = ArenaBacking::ExplicitHugepages { page_size: page };
            return Ok((map, file, rounded as usize, backing));
        }
    }
    let file = memkv_shm::arena_file::create(NAME, len as u64, None)?;
    let map = MmapOptions::new().len(len).map_raw(&file)?;
    let backing =
        if shmem_thp_available() && len as u64 >= HUGE_2M && map.advise(Advice::HugePage).is_ok() {
            ArenaBacking::TransparentHugepages
        } else {
            ArenaBacking::RegularPages
        };
    Ok((map, file, len, backing))
}

/// What an operator can do about an arena left on 4 KiB pages.
fn small_pages_remedy(shareable: bool) -> &'static str {
    if shareable {
        "reserve hugepages (vm.nr_hugepages), or let shared memory use transparent hugepages (echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled), or, with no client on this host, set network.shared_memory: false"
    } else {
        "reserve hugepages (vm.nr_hugepages), or enable transparent hugepages (echo madvise > /sys/kernel/mm/transparent_hugepage/enabled)"
    }
}

fn shmem_thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .map(|s| s.contains("[always]") || s.contains("[advise]") || s.contains("[within_size]"))
        .unwrap_or(false)
}

fn meminfo_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn hugetlb_page_size() -> Option<u64> {
    meminfo_field("Hugepagesize:").map(|kib| kib * 1024)
}

fn hugetlb_free_bytes(page: u64) -> u64 {
    meminfo_field("HugePages_Free:").unwrap_or(0) * page
}

fn thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| !s.contains("[never]"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_writable_and_freed() {
        let arena = MemoryArena::new(8 << 20, 2 << 20, false).unwrap();
        assert_eq!(arena.info().len, 8 << 20);
        let mut a = ArenaBlock::allocate(&arena, 5000).unwrap();
        let mut b = ArenaBlock::allocate(&arena, 3 << 20).unwrap();
        a.as_mut_slice().fill(1);
        b.as_mut_slice().fill(2);
        assert!(a.as_slice().iter().all(|&x| x == 1));
        assert!(b.as_slice().iter().all(|&x| x == 2));
        assert!(ArenaBlock::allocate(&arena, 5 << 20).is_none());
        drop(b);
        assert!(ArenaBlock::allocate(&arena, 5 << 20).is_some());
        drop(a);
        assert_eq!(arena.alloc_stats().granules_used, 0);
    }
}
