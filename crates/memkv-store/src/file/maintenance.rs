//! The operator's drive changes on a running store: remove a drive from service, add it back.
//! The store's geometry is fixed when it is formatted (each superblock names its slot of
//! `drive_count`), so adding means a drive of this store rejoining its slot: one removed, or
//! one that failed and has been repaired. Growing a store is `memkv setup`'s job, with the
//! server stopped.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::FileBackend;
use super::superblock::{Probe, SUPERBLOCK_LEN, Superblock};
use crate::error::{Result, StoreError};

impl FileBackend {
    /// The slot of the drive configured as `path`.
    fn slot_of(&self, path: &Path) -> Result<usize> {
        self.drives
            .iter()
            .position(|d| d.path() == path)
            .ok_or_else(|| {
                let known: Vec<String> = self
                    .drives
                    .iter()
                    .map(|d| d.path().display().to_string())
                    .collect();
                StoreError::UnknownDrive(format!(
                    "no drive {} in this store (its drives: {})",
                    path.display(),
                    known.join(", ")
                ))
            })
    }

    /// Takes the drive at `path` out of service: no new values go to it and its values read
    /// as misses (they stay indexed, and come back if the drive is added again). `Ok(false)`:
    /// it was removed already.
    pub fn remove_drive(&self, path: &Path) -> Result<bool> {
        let slot = self.slot_of(path)?;
        if slot == 0 {
            return Err(StoreError::BadRequest(format!(
                "drive {} holds the journal, which every put and delete writes; it cannot be \
                 removed while the server runs (stop the server to replace it)",
                path.display()
            )));
        }
        let others = (0..self.drives.len())
            .filter(|&d| d != slot && self.health.online(d))
            .count();
        if others == 0 && self.health.online(slot) {
            return Err(StoreError::BadRequest(format!(
                "drive {} is the last drive in service; removing it would leave no room for \
                 any value",
                path.display()
            )));
        }
        let removed = self.health.remove(slot);
        if removed {
            tracing::warn!(drive = %path.display(), "drive removed by the operator: its values read as misses and new values go to the other drives");
        }
        Ok(removed)
    }

    /// Puts the drive at `path` back into service after checking, through the store's open
    /// handle, that it still carries this store's superblock for its slot. `Ok(false)`: it was
    /// in service already.
    pub fn add_drive(&self, path: &Path) -> Result<bool> {
        let slot = self.slot_of(path)?;
        if self.failed.load(Ordering::Acquire) {
            return Err(StoreError::BadRequest(
                "the store stopped writing after a journal write failed; restart the server".into(),
            ));
        }
        if self.health.online(slot) {
            return Ok(false);
        }
        let drive = &self.drives[slot];
        let mut page = vec![0; SUPERBLOCK_LEN];
        drive.read_at(0, &mut page).map_err(|e| {
            StoreError::Io(std::io::Error::new(
                e.kind(),
                format!("drive {}: reading its superblock: {e}", path.display()),
            ))
        })?;
        let what = format!("drive {}", path.display());
        match Superblock::probe(&page, &what)? {
            Probe::Formatted(sb)
                if sb.store_id == self.store_id && sb.drive_index as usize == slot =>
            {
                self.health.restore(slot);
                tracing::info!(drive = %path.display(), "drive added back into service");
                Ok(true)
            }
            Probe::Formatted(sb) => Err(StoreError::BadRequest(format!(
                "{what} holds drive {} of {} of another memkv store, not drive {} of this one; \
                 refusing it",
                sb.drive_index, sb.drive_count, slot
            ))),
            Probe::Blank => Err(StoreError::BadRequest(format!(
                "{what} is blank, not this store's drive {slot}; a drive joins a running store \
                 only in its own slot (to grow a store, run memkv setup with the server stopped)"
            ))),
        }
    }
}
