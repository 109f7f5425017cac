//! Registered memory: the server's arena (one memory region over memory the caller owns), the
//! library's own page-aligned [`RegisteredBuffer`]s, and caller buffers registered as they are.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::memory_region::MemoryRegion as VerbsRegion;

use crate::device::RdmaDevice;
use crate::error::RdmaError;

/// Memory a work request may name as its local side.
///
/// # Safety
///
/// An implementation promises that `addr()..addr() + len()` lies inside one memory region
/// registered with `lkey()` on the device the operation runs on, that the memory stays mapped
/// for as long as the value lives, and that while an operation borrows the value nothing else
/// writes the memory (RDMA WRITE reads it) or accesses it at all (RDMA READ writes it).
pub unsafe trait LocalMemory {
    /// Virtual address of the first byte, as registered.
    fn addr(&self) -> u64;
    fn len(&self) -> usize;
    fn lkey(&self) -> u32;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One registered memory region. Deregistered when dropped.
pub struct MemoryRegion {
    mr: Arc<VerbsRegion>,
    addr: u64,
    len: usize,
    registration_time: Duration,
    /// What keeps the registered memory mapped, when the region owns a share in it (the
    /// store's arena). Declared after `mr`: the memory is released after deregistration.
    _owner: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

/// What a region lets the peer do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// The NIC may write it for local operations (READ targets); no remote access.
    LocalOnly,
    /// Peers may RDMA READ and WRITE it (the server's arena).
    Remote,
}

impl MemoryRegion {
    /// # Safety
    ///
    /// `ptr` is valid for `len` bytes and stays mapped until the returned region is dropped.
    pub(crate) unsafe fn register(
        device: &RdmaDevice,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Self, RdmaError> {
        if len == 0 || ptr.is_null() {
            return Err(RdmaError::InvalidArgument {
                name: "len",
                value: format!("{len} bytes at {ptr:p}"),
                limit: "a registered region needs a non-null address and at least one byte",
            });
        }
        let flags = match access {
            Access::LocalOnly => AccessFlags::LocalWrite,
            Access::Remote => {
                AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
            }
        };
        let started = Instant::now();
        // SAFETY: forwarded from this function's contract: `ptr` is valid for `len` bytes for
        // the region's whole life.
        let mr = unsafe { device.pd().reg_mr(ptr as usize, len, flags) }.map_err(|e| {
            let io = match e.0 {
                sideway::ibverbs::memory_region::RegisterMemoryRegionErrorKind::Ibverbs(io) => io,
                other => std::io::Error::other(other.to_string()),
            };
            RdmaError::verbs("ibv_reg_mr", device.name(), &io)
        })?;
        Ok(Self {
            mr,
            addr: ptr as u64,
            len,
            registration_time: started.elapsed(),
            _owner: None,
        })
    }

    /// This region, keeping `owner` (the memory it registers) alive until it is dropped.
    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    pub(crate) fn owning(mut self, owner: impl std::any::Any + Send + Sync) -> Self {
        self._owner = Some(Box::new(owner));
        self
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// The key a peer names in RDMA READ/WRITE; zero-access regions still have one.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// How long `ibv_reg_mr` took (pinning and mapping every page).
    pub fn registration_time(&self) -> Duration {
        self.registration_time
    }
}

// SAFETY: the contract of `register` (and of `register_arena` / `register_user`, which call
// it) keeps the range mapped and registered under `lkey` for the region's life; exclusive use
// during an operation is the caller's promise made at registration.
unsafe impl LocalMemory for MemoryRegion {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
}

/// Memory the library did not allocate (an engine's pinned KV pool, a Python buffer) that a
/// [`RegisteredBuffer`] may register as it is.
///
/// # Safety
///
/// An implementation promises that `as_ptr()` is valid for reads and writes of `len()` bytes,
/// that the memory neither moves nor is unmapped for as long as the value lives, and that while
/// the library moves bytes into or out of it (an operation borrows the buffer) nothing else
/// writes the bytes being written or reads the bytes being read. Both methods return the same
/// values every time.
pub unsafe trait CallerMemory: Send + Sync {
    fn as_ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a registered buffer's bytes live.
enum Backing {
    /// A mapping of the library's own.
    Owned(MmapMut),
    /// The caller's memory, kept alive by its owner.
    Caller(Box<dyn CallerMemory>),
}

/// Memory registered for local access (the target of READs, the source of WRITEs): either a
/// page-aligned anonymous mapping owned by the library, or caller memory registered as it is
/// ([`RegisteredBuffer::over`]). Safe to use: operations borrow it.
pub struct RegisteredBuffer {
    // Drops before `backing`: the region is deregistered before the memory is released.
    region: MemoryRegion,
    backing: Backing,
    setup_time: Duration,
}

/// Buffers from this size up are populated on several threads before registration.
pub(crate) const PARALLEL_POPULATE_MIN: usize = 64 << 20;
/// Pieces handed to populating threads: whole transparent huge pages.
pub(crate) const POPULATE_PIECE: usize = 2 << 20;

/// Populates `map`'s pages on up to one thread per CPU. `ibv_reg_mr` would otherwise fault in
/// (and zero) every page itself, on one thread: minutes for hundreds of GiB. Best effort: on a
/// kernel without MADV_POPULATE_WRITE (before 5.14) registration faults the pages as before.
pub(crate) fn populate_in_parallel(map: &MmapMut) {
    let len = map.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(64)
        .min(len.div_ceil(POPULATE_PIECE));
    let per_thread = len.div_ceil(threads).next_multiple_of(POPULATE_PIECE);
    std::thread::scope(|scope| {
        for start in (0..len).step_by(per_thread) {
            let end = (start + per_thread).min(len);
            scope.spawn(move || {
                let _ = map.advise_range(memmap2::Advice::PopulateWrite, start, end - start);
            });
        }
    });
}

impl RegisteredBuffer {
    pub fn new(device: &RdmaDevice, len: usize) -> Result<Self, RdmaError> {
        if len == 0 {
            return Err(RdmaError::InvalidArgument {
                name: "len",
                value: "0".into(),
                limit: "a registered buffer needs at least one byte",
            });
        }
        let started = Instant::now();
        let mut map =
            MmapMut::map_anon(len).map_err(|e| RdmaError::verbs("mmap", device.name(), &e))?;
        if len >= POPULATE_PIECE {
            // Fewer, larger pages: faster to populate and to pin, fewer NIC translations.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        if len >= PARALLEL_POPULATE_MIN {
            populate_in_parallel(&map);
        }
        // SAFETY: the mapping is `len` bytes, owned by the buffer, and outlives the region
        // (field order drops the region first).
        let region =
            unsafe { MemoryRegion::register(device, map.as_mut_ptr(), len, Access::LocalOnly)? };
        Ok(Self {
            region,
            backing: Backing::Owned(map),
            setup_time: started.elapsed(),
        })
    }

    /// Registers `memory` as it is (no copy, no new mapping); the buffer owns it until dropped.
    /// `ibv_reg_mr` pins its pages, which costs time proportional to its size the first time.
    pub fn over(device: &RdmaDevice, memory: Box<dyn CallerMemory>) -> Result<Self, RdmaError> {
        let started = Instant::now();
        // SAFETY: `CallerMemory` promises `len` valid bytes that stay put while `memory` lives,
        // and the buffer drops the region before `memory` (field order).
        let region = unsafe {
            MemoryRegion::register(device, memory.as_ptr(), memory.len(), Access::LocalOnly)?
        };
        Ok(Self {
            region,
            backing: Backing::Caller(memory),
            setup_time: started.elapsed(),
        })
    }

    /// How long making the buffer took: mapping, populating its pages (in parallel for large
    /// buffers) and registering it.
    pub fn setup_time(&self) -> Duration {
        self.setup_time
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.backing {
            Backing::Owned(map) => map,
            // SAFETY: `CallerMemory` promises `len` readable bytes for the memory's life, and
            // `&self` keeps it alive while the slice lives.
            Backing::Caller(m) => unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) },
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.backing {
            Backing::Owned(map) => map,
            // SAFETY: as in `as_slice`, writable too; `&mut self` makes this the buffer's only
            // slice while it lives, and `CallerMemory` rules out other writers meanwhile.
            Backing::Caller(m) => unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len()) },
        }
    }

    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }
}

// SAFETY: the region covers exactly the mapping (or the caller's memory), which lives as long
// as the buffer; operations borrow the buffer (shared for WRITE, exclusive for READ), so safe
// code cannot touch the bytes the NIC is writing (and `CallerMemory` promises the same of
// everyone else).
unsafe impl LocalMemory for RegisteredBuffer {
    fn addr(&self) -> u64 {
        self.region.addr
    }
    fn len(&self) -> usize {
        self.region.len
    }
    fn lkey(&self) -> u32 {
        self.region.lkey()
    }
}

/// Registration entry points on the device (here, with the regions they make, so that the
/// device needs nothing of this module).
impl RdmaDevice {
    /// Registers the server's whole memory arena as one region that peers may READ and WRITE.
    /// Hand `addr()`/`rkey()` of the result to clients (Connect response).
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for `len` bytes and stay mapped until the returned region is
    /// dropped. Peers write into it at any time while it is registered; the caller owns the
    /// protocol that says which bytes are theirs.
    pub unsafe fn register_arena(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<MemoryRegion, RdmaError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { MemoryRegion::register(self, ptr, len, Access::Remote) }
    }

    /// Registers the store's memory arena for remote READ and WRITE. The region holds the
    /// handle, so the arena stays mapped for as long as the region is registered, whatever
    /// order the store and the region are dropped in.
    #[cfg(feature = "store")]
    pub fn register_store_arena(
        &self,
        arena: memkv_store::ArenaHandle,
    ) -> Result<MemoryRegion, RdmaError> {
        // SAFETY: `arena` maps `len` bytes at `as_ptr` for as long as the handle lives, and
        // the returned region owns the handle.
        let region = unsafe { self.register_arena(arena.as_ptr(), arena.len()) }?;
        Ok(region.owning(arena))
    }

    /// Registers a caller's buffer for local use (source of WRITEs, target of READs).
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for `len` bytes and stay mapped until the returned region is
    /// dropped, and while an operation uses the region nothing else may write the bytes (WRITE)
    /// or access them (READ).
    pub unsafe fn register_user(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<MemoryRegion, RdmaError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { MemoryRegion::register(self, ptr, len, Access::LocalOnly) }
    }
}
