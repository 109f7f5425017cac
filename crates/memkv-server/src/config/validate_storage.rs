//! Checks of the `storage` section: mode, drives, eviction and leases.

use std::collections::HashSet;
use std::time::Duration;

use super::error::ConfigError;
use super::raw::{RawDrive, RawStorage};
use super::sections::*;
use super::validate::Checker;
use memkv_config::ByteSize;

type Checked<T> = Result<T, ConfigError>;

impl Checker<'_> {
    pub(super) fn storage(&self, raw: RawStorage) -> Checked<StorageConfig> {
        let raw_drives = raw.drives.unwrap_or_default();
        let mode = match raw.mode.as_deref().map(str::trim) {
            None if raw_drives.is_empty() => StorageMode::Memory,
            // The product's default; with drives listed the operator meant raw NVMe.
            None => StorageMode::Direct,
            Some("memory") => StorageMode::Memory,
            Some("file") => StorageMode::File,
            Some("direct") => StorageMode::Direct,
            Some(other) => {
                return Err(self.invalid(
                    "storage.mode",
                    format!("unknown mode {other:?}; expected memory, file or direct"),
                ));
            }
        };
        let block_size = self.block_size(
            "storage.block_size",
            raw.block_size.as_ref(),
            DEFAULT_STORAGE_BLOCK_SIZE,
        )?;
        let drives = self.drives(mode, block_size, raw_drives)?;
        let eviction = match raw.eviction.as_deref().map(str::trim) {
            None | Some("lru") => EvictionPolicy::Lru,
            Some("none") => EvictionPolicy::None,
            Some(other) => {
                return Err(self.invalid(
                    "storage.eviction",
                    format!("unknown policy {other:?}; expected lru or none"),
                ));
            }
        };
        let file_reads = match raw.file_reads.as_deref().map(str::trim) {
            None | Some("mapped") => FileReads::Mapped,
            Some("pread") => FileReads::Pread,
            Some(other) => {
                return Err(self.invalid(
                    "storage.file_reads",
                    format!("unknown read path {other:?}; expected mapped or pread"),
                ));
            }
        };
        let lease = |key, value: Option<u64>, default: Duration| {
            self.ranged(key, value, default.as_secs(), 1, 86_400)
                .map(Duration::from_secs)
        };
        Ok(StorageConfig {
            mode,
            block_size,
            drives,
            eviction,
            file_reads,
            reservation_lease: lease(
                "storage.reservation_lease_secs",
                raw.reservation_lease_secs,
                DEFAULT_RESERVATION_LEASE,
            )?,
            pin_lease: lease(
                "storage.pin_lease_secs",
                raw.pin_lease_secs,
                DEFAULT_PIN_LEASE,
            )?,
            discard: raw.discard.unwrap_or(true),
        })
    }

    fn drives(
        &self,
        mode: StorageMode,
        block_size: ByteSize,
        raw: Vec<RawDrive>,
    ) -> Checked<Vec<DriveConfig>> {
        match mode {
            StorageMode::Memory if !raw.is_empty() => {
                return Err(self.invalid(
                    "storage.drives",
                    "drives are only used with storage.mode file or direct; this config uses memory",
                ));
            }
            StorageMode::File | StorageMode::Direct if raw.is_empty() => {
                return Err(self.invalid(
                    "storage.drives",
                    format!("storage.mode {} needs at least one drive", mode.as_str()),
                ));
            }
            _ => {}
        }
        let mut seen = HashSet::new();
        let mut drives = Vec::with_capacity(raw.len());
        for (index, drive) in raw.into_iter().enumerate() {
            let media_key = format!("storage.drives[{index}].media");
            let size_key = format!("storage.drives[{index}].size");
            let media = self.path(&media_key, &drive.media)?;
            if !seen.insert(media.clone()) {
                return Err(
                    self.invalid(&media_key, format!("{} is listed twice", media.display()))
                );
            }
            let size = drive
                .size
                .as_ref()
                .map(|text| self.size(&size_key, Some(text), ByteSize(0)))
                .transpose()?;
            if let Some(size) = size {
                if size < block_size {
                    return Err(self.invalid(
                        &size_key,
                        format!("{size} is smaller than storage.block_size ({block_size})"),
                    ));
                }
            }
            drives.push(DriveConfig { media, size });
        }
        Ok(drives)
    }
}
