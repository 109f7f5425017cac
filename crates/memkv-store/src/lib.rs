//! memkv-store: the storage engine behind a memkv server.
//!
//! # Design
//!
//! * **Index** ([`index`]): 64 sharded maps from key to an `Arc`'d block. Writers build a
//!   complete block first and then swap the index entry, so a reader sees either the old or the
//!   new value, never a mix; old bytes are freed only when the last `Arc` (a reader, a pin) drops.
//! * **Memory mode** ([`arena`], [`allocator`], [`memory`]): one contiguous mapping
//!   (explicit hugepages if enough are free, else THP, else plain pages) that the RDMA layer
//!   registers once. Values of at least one granule (`memory.block_size`) take contiguous
//!   granule runs; smaller ones take size-class slots carved from slabs. `get` returns a
//!   zero-copy [`ValueRef`]; `lookup` pins a block for a one-sided RDMA READ with a lease.
//! * **File mode** ([`file`]): values occupy `storage.block_size` extents striped round-robin
//!   over drive files behind an I/O trait. Each drive has a superblock; drive 0 holds a
//!   two-half journal of checksummed commit/delete records, replayed at open and compacted when
//!   a half fills. Commits are acknowledged after data and record are synced, grouped across
//!   concurrent committers; reads are verified against xxh3-64 and corrupt values dropped.
//! * **Reservations** ([`reservation`]): two-phase puts by handle or id, with a lease so a
//!   writer that disappears leaks nothing. **Eviction** ([`eviction`]): CLOCK over committed,
//!   unpinned blocks, or `Full` errors when eviction is off.
//!
//! `unsafe` is confined to [`arena`].

mod allocator;
mod arena;
mod config;
mod error;
mod eviction;
mod file;
mod index;
mod memory;
mod pins;
mod reservation;
mod stats;
mod store;
mod value;

pub use allocator::AllocStats;
pub use arena::{ArenaBacking, ArenaInfo};
pub use config::{
    DEFAULT_DRIVE_SIZE, DEFAULT_FILE_BLOCK_SIZE, DEFAULT_MAX_VALUE_SIZE, DEFAULT_MEMORY_BLOCK_SIZE,
    DriveConfig, EvictionPolicy, MAX_KEY_LEN, StoreConfig, StoreMode,
};
pub use error::{Result, StoreError};
pub use reservation::Reservation;
pub use stats::{DeviceStats, StoreStats};
pub use store::Store;
pub use value::{Pinned, ValueRef};

/// On-disk format version this build writes (file mode); older versions are read.
pub const FILE_FORMAT_VERSION: u32 = file::FORMAT_VERSION;

/// The checksum the store uses: xxh3-64 of the value bytes.
pub fn checksum(bytes: &[u8]) -> u64 {
    arena::xxh3(bytes)
}
