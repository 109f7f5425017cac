//! Capacity and health counters reported by [`crate::Store::stats`].

use std::path::PathBuf;

/// Whole-store counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes of memory mapped or of drive space configured.
    pub raw_bytes: u64,
    /// Bytes values can occupy (granules or data extents, after metadata).
    pub usable_bytes: u64,
    /// Bytes taken by committed values and open reservations, including rounding to size
    /// classes, granules or extents.
    pub used_bytes: u64,
    /// Sum of committed value lengths.
    pub value_bytes: u64,
    /// Committed values.
    pub blocks: u64,
    /// Memory the index takes: each block's entry (its record, count and key) and the hash
    /// tables. Not counted: entries already replaced that a reader still holds, and a
    /// drive-backed block's list of extents beyond its first.
    pub index_bytes: u64,
    pub evictions: u64,
    /// Values found corrupt on read (dropped, never served).
    pub checksum_failures: u64,
    pub open_reservations: u64,
    pub active_pins: u64,
    /// One entry per drive in file mode; empty in memory mode.
    pub per_device: Vec<DeviceStats>,
}

/// Per-drive counters (file mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStats {
    pub path: PathBuf,
    pub raw: u64,
    pub usable: u64,
    pub used: u64,
    /// False once the drive returned `DRIVE_ERROR_LIMIT` I/O errors (or the whole store
    /// failed): its values read as misses and new values go to the other drives until the
    /// store is reopened.
    pub online: bool,
    /// Taken out of service by the operator ([`crate::Store::remove_drive`]), as opposed to
    /// failed; `online` is false too.
    pub removed: bool,
    /// Reads of values on this drive that failed: an I/O error, or the drive out of service
    /// (each served as a miss; reads of a removed drive's values are not counted).
    pub read_errors: u64,
    /// Writes of values to this drive that failed with an I/O error (each failed its put).
    pub write_errors: u64,
}
