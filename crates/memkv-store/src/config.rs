//! Store configuration and its validation.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StoreError};

/// Longest accepted key.
pub const MAX_KEY_LEN: usize = 1024;
/// Default largest value (also capped by the store's capacity).
pub const DEFAULT_MAX_VALUE_SIZE: u64 = 1 << 30;
/// Default allocation granule in memory mode.
pub const DEFAULT_MEMORY_BLOCK_SIZE: u64 = 2 << 20;
/// Default extent size in file mode.
pub const DEFAULT_FILE_BLOCK_SIZE: u64 = 4 << 20;
/// Size a new drive file gets when the config names no size and the file is empty.
pub const DEFAULT_DRIVE_SIZE: u64 = 1 << 30;

const MIN_BLOCK_SIZE: u64 = 64 << 10;
const MAX_BLOCK_SIZE: u64 = 1 << 30;
const MAX_DRIVES: usize = 256;

/// One drive (a file path) in file mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveConfig {
    pub path: PathBuf,
    /// Capacity in bytes. `None`: keep an existing file's size, or create a
    /// [`DEFAULT_DRIVE_SIZE`] sparse file when it is missing or empty.
    pub size: Option<u64>,
}

/// Where values live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreMode {
    /// One contiguous (hugepage-backed when possible) arena of `max_size` bytes.
    Memory { max_size: u64, block_size: u64 },
    /// Extents of `block_size` bytes striped over drive files, through the page cache.
    File {
        drives: Vec<DriveConfig>,
        block_size: u64,
    },
    /// File mode's layout on block devices (or files) opened with O_DIRECT and driven through
    /// io_uring: no page cache, several requests in flight per drive.
    Direct {
        drives: Vec<DriveConfig>,
        block_size: u64,
    },
}

impl StoreMode {
    /// The drives and extent size of a drive-backed mode.
    pub fn drives(&self) -> Option<(&[DriveConfig], u64)> {
        match self {
            StoreMode::Memory { .. } => None,
            StoreMode::File { drives, block_size } | StoreMode::Direct { drives, block_size } => {
                Some((drives, *block_size))
            }
        }
    }
}

/// How file mode reads values back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileReads {
    /// Copy and hash in one pass out of a read-only mapping of each drive (about 1.2x `pread`
    /// on the benchmark machine). A disk error on a page the kernel has dropped, or another
    /// process truncating a drive file, then ends the process with SIGBUS, as in any store
    /// that maps its files.
    #[default]
    Mapped,
    /// `pread`, then hash (about 0.6 of `pread`): I/O errors always come back as errors.
    Pread,
}

/// What happens when the store is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionPolicy {
    /// Evict committed, unpinned values in approximate least-recently-used order (CLOCK).
    #[default]
    Lru,
    /// Fail the put/allocate with [`StoreError::Full`].
    None,
}

/// Everything [`crate::Store::open`] needs.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub mode: StoreMode,
    pub eviction: EvictionPolicy,
    /// How long an uncommitted reservation lives before it is reclaimed.
    pub reservation_lease: Duration,
    /// Longest lease a `lookup` pin may hold.
    pub pin_lease: Duration,
    /// Largest value accepted.
    pub max_value_size: u64,
    /// File mode: how values are read back.
    pub file_reads: FileReads,
    /// Memory mode: put the arena in a sealed memfd that clients on the same host can map
    /// (the same-host transport), instead of anonymous memory.
    pub share_memory: bool,
    /// Drive-backed modes: discard freed extents in batches ([`crate::Store::discard_freed`]:
    /// BLKDISCARD on block devices, hole punching on files), so the drive or filesystem gets
    /// the space back.
    pub discard: bool,
}

impl StoreConfig {
    /// Memory mode with defaults (2 MiB granule, LRU, 30 s / 10 s leases).
    pub fn memory(max_size: u64) -> Self {
        Self::with_mode(StoreMode::Memory {
            max_size,
            block_size: DEFAULT_MEMORY_BLOCK_SIZE,
        })
    }

    /// File mode with defaults (4 MiB extents, LRU, 30 s / 10 s leases).
    pub fn file(drives: Vec<DriveConfig>) -> Self {
        Self::with_mode(StoreMode::File {
            drives,
            block_size: DEFAULT_FILE_BLOCK_SIZE,
        })
    }

    /// Direct mode with file mode's defaults.
    pub fn direct(drives: Vec<DriveConfig>) -> Self {
        Self::with_mode(StoreMode::Direct {
            drives,
            block_size: DEFAULT_FILE_BLOCK_SIZE,
        })
    }

    fn with_mode(mode: StoreMode) -> Self {
        Self {
            mode,
            eviction: EvictionPolicy::Lru,
            reservation_lease: Duration::from_secs(30),
            pin_lease: Duration::from_secs(10),
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            file_reads: FileReads::default(),
            share_memory: false,
            discard: true,
        }
    }

    /// Checks every field; the error names the field and the limit it broke.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(StoreError::BadRequest(m));
        match &self.mode {
            StoreMode::Memory {
                max_size,
                block_size,
            } => {
                check_block_size("memory.block_size", *block_size)?;
                if max_size < block_size {
                    return bad(format!(
                        "memory.max_size {max_size} must be at least memory.block_size {block_size}"
                    ));
                }
                if *max_size > (1u64 << 47) {
                    return bad(format!("memory.max_size {max_size} exceeds the limit 2^47"));
                }
            }
            StoreMode::File { drives, block_size } | StoreMode::Direct { drives, block_size } => {
                check_block_size("storage.block_size", *block_size)?;
                if drives.is_empty() {
                    return bad("storage.drives must name at least one drive".into());
                }
                if drives.len() > MAX_DRIVES {
                    return bad(format!(
                        "storage.drives has {} entries, limit {MAX_DRIVES}",
                        drives.len()
                    ));
                }
                for (i, d) in drives.iter().enumerate() {
                    if d.path.as_os_str().is_empty() {
                        return bad(format!("storage.drives[{i}].path is empty"));
                    }
                    if drives[..i].iter().any(|o| o.path == d.path) {
                        return bad(format!(
                            "storage.drives[{i}].path {} is listed twice",
                            d.path.display()
                        ));
                    }
                }
            }
        }
        if self.reservation_lease.is_zero() || self.reservation_lease > Duration::from_secs(3600) {
            return bad(format!(
                "reservation_lease {:?} must be between 1 ns and 3600 s",
                self.reservation_lease
            ));
        }
        if self.pin_lease.is_zero() || self.pin_lease > Duration::from_secs(3600) {
            return bad(format!(
                "pin_lease {:?} must be between 1 ns and 3600 s",
                self.pin_lease
            ));
        }
        if self.max_value_size == 0 || self.max_value_size > (1 << 40) {
            return bad(format!(
                "max_value_size {} must be between 1 and 2^40",
                self.max_value_size
            ));
        }
        Ok(())
    }
}

pub(crate) fn check_block_size(field: &str, size: u64) -> Result<()> {
    if !size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&size) {
        return Err(StoreError::BadRequest(format!(
            "{field} {size} must be a power of two between {MIN_BLOCK_SIZE} and {MAX_BLOCK_SIZE}"
        )));
    }
    Ok(())
}

/// Rejects keys that are empty or longer than [`MAX_KEY_LEN`].
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::TooLarge {
            what: "key",
            len: key.len() as u64,
            limit: MAX_KEY_LEN as u64,
        });
    }
    if key.is_empty() {
        return Err(StoreError::BadRequest("key must not be empty".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_fields_by_name() {
        let mut c = StoreConfig::memory(1 << 20);
        c.mode = StoreMode::Memory {
            max_size: 1 << 20,
            block_size: 3000,
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("memory.block_size"), "{e}");
        let c = StoreConfig::memory(1000);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("memory.max_size"), "{e}");
        let c = StoreConfig::file(vec![]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("storage.drives")
        );
        let e = check_key(&[0; 1025]).unwrap_err().to_string();
        assert!(e.contains("1024"), "{e}");
        assert!(StoreConfig::memory(4 << 20).validate().is_ok());
    }
}
