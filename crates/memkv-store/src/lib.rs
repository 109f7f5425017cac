//! memkv-store: the storage engine behind a memkv server.
//!
//! # Design
//!
//! * **Index** (`index`): 64 sharded maps from key to an `Arc`'d block. Writers build a
//!   complete block first and then swap the index entry, so a reader sees either the old or the
//!   new value, never a mix; old bytes are freed only when the last `Arc` (a reader, a pin) drops.
//! * **Memory mode** (`arena`, `allocator`, `memory`): one contiguous mapping
//!   (explicit hugepages if enough are free, else THP, else plain pages) that the RDMA layer
//!   registers once. Values of at least one granule (`memory.block_size`) take contiguous
//!   granule runs; smaller ones take size-class slots carved from slabs. `get` returns a
//!   zero-copy [`ValueRef`]; `lookup` pins a block for a one-sided RDMA READ with a lease.
//!   [`Store::prefault`] populates the arena's pages up front (MADV_POPULATE_WRITE, split over
//!   threads, safe while serving) so a fresh server does not zero pages on its first writes.
//! * **File mode** (`file`): values occupy `storage.block_size` extents striped round-robin
//!   over drive files behind an I/O trait. Each drive has a superblock; drive 0 holds a
//!   two-half journal of checksummed commit/delete records, replayed at open and compacted when
//!   a half fills. Commits are acknowledged after data and record are synced, grouped across
//!   concurrent committers; reads are verified against xxh3-64 and corrupt values dropped.
//! * **Reservations** (`reservation`): two-phase puts by handle or id, with a lease so a
//!   writer that disappears leaks nothing. **Eviction** (`eviction`): CLOCK over committed
//!   blocks that no reader holds (pinned or being sent), or `Full` errors when eviction is off.
//!
//! * **Checksums** ([`mod@checksum`], public; the `memkv-checksum` crate): xxh3-64 everywhere,
//!   with an AVX2 build (picked at run time) that also copies while hashing, so a memory-mode put reads its
//!   source once, and so does a file-mode read: drive files are mapped and a read copies the
//!   value out of the page cache while hashing it (after MADV_POPULATE_READ, which turns a
//!   would-be SIGBUS into an error; `pread` plus hashing where the kernel lacks it, or with
//!   [`FileReads::Pread`] for operators who want disk errors as errors, never SIGBUS). Clients use
//!   [`checksum::xxh3_64`] (or [`checksum::Xxh3Stream`] for data that arrives in chunks) to
//!   compute the value a commit is checked against.
//!
//! # Durability (file mode)
//!
//! A put writes its extents, then the group-commit leader appends the journal record and
//! `fdatasync`s every touched drive before anyone is acknowledged. A crash can only cut short
//! the journal's final batch, so replay re-reads and re-hashes that batch's values and keeps a
//! key's previous value when the new one did not reach the disk. Old extents are reused only
//! after the record that superseded them is durable.
//!
//! # Drive sizing
//!
//! `DriveConfig::size` grows a drive file to that size; without it an existing non-empty file
//! keeps its size and a new or empty one becomes a 1 GiB sparse file. Every value takes at
//! least one extent in file mode, so file mode suits block-sized values (KV-cache blocks), not
//! tiny ones.
//!
//! `unsafe` is confined to `arena` (the mapping and block slices); the SIMD checksum's is in
//! `memkv-checksum`.

mod allocator;
mod arena;
pub mod checksum;
mod config;
mod error;
mod eviction;
mod file;
mod ids;
mod index;
mod memory;
mod pins;
mod reservation;
mod stats;
mod store;
mod value;

pub use allocator::AllocStats;
pub use arena::{
    ArenaBacking, ArenaHandle, ArenaInfo, MAX_PREFAULT_THREADS, PrefaultMethod, PrefaultReport,
};
pub use config::{
    DEFAULT_DRIVE_SIZE, DEFAULT_FILE_BLOCK_SIZE, DEFAULT_MAX_VALUE_SIZE, DEFAULT_MEMORY_BLOCK_SIZE,
    DriveConfig, EvictionPolicy, FileReads, MAX_KEY_LEN, StoreConfig, StoreMode,
};
pub use error::{Result, StoreError};
pub use file::LeasedValue;
pub use file::inspect::{DriveContents, inspect_drive};
pub use file::io::DriveIo;
pub use file::{DRIVE_ERROR_LIMIT, check_format};
pub use ids::UnguessableIds;
pub use reservation::Reservation;
pub use stats::{DeviceStats, StoreStats};
pub use store::{DirectPut, Store};
pub use value::{Pinned, ValueParts, ValueRef};

/// On-disk format version this build writes (file mode); older versions are read.
pub const FILE_FORMAT_VERSION: u32 = file::FORMAT_VERSION;

/// The checksum the store uses: xxh3-64 of the value bytes (the same as
/// [`checksum::xxh3_64`]).
pub fn checksum(bytes: &[u8]) -> u64 {
    arena::xxh3(bytes)
}
