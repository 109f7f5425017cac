//! Which drives are in service. A drive that returns I/O errors stays in service for bad
//! sectors (the value on them is dropped) and goes offline at its [`DRIVE_ERROR_LIMIT`]th
//! error; the operator removes one (and adds it back) through the store. Offline or removed,
//! its values read as misses and new values go to the other drives.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// I/O errors one drive may return before it is taken out of service. Fewer are bad sectors:
/// the value on them is dropped and the drive keeps serving the rest; this many means the
/// drive itself is failing (or gone).
pub const DRIVE_ERROR_LIMIT: u64 = 8;

pub(crate) struct DriveHealth {
    failed: Box<[AtomicBool]>,
    removed: Box<[AtomicBool]>,
    errors: Box<[AtomicU64]>,
    pub read_errors: Box<[AtomicU64]>,
    pub write_errors: Box<[AtomicU64]>,
}

impl DriveHealth {
    pub fn new(drives: usize) -> Self {
        let flags = || (0..drives).map(|_| AtomicBool::new(false)).collect();
        let counters = || (0..drives).map(|_| AtomicU64::new(0)).collect();
        DriveHealth {
            failed: flags(),
            removed: flags(),
            errors: counters(),
            read_errors: counters(),
            write_errors: counters(),
        }
    }

    pub fn online(&self, drive: usize) -> bool {
        !self.failed[drive].load(Ordering::Acquire) && !self.removed[drive].load(Ordering::Acquire)
    }

    pub fn removed(&self, drive: usize) -> bool {
        self.removed[drive].load(Ordering::Acquire)
    }

    pub fn read_errors(&self, drive: usize) -> u64 {
        self.read_errors[drive].load(Ordering::Relaxed)
    }

    /// Counts an I/O error on `drive`; the [`DRIVE_ERROR_LIMIT`]th takes it out of service.
    pub fn fail(&self, drive: usize, path: &Path, e: &std::io::Error) {
        let n = self.errors[drive].fetch_add(1, Ordering::AcqRel) + 1;
        if n < DRIVE_ERROR_LIMIT {
            tracing::warn!(drive = %path.display(), error = %e, errors = n, limit = DRIVE_ERROR_LIMIT, "drive I/O error; the drive stays online until it reaches the limit");
            return;
        }
        if !self.failed[drive].swap(true, Ordering::AcqRel) {
            tracing::error!(drive = %path.display(), error = %e, errors = n, "drive reached its I/O error limit; it is offline until the store reopens or the operator adds it back: its values read as misses and new values go to the other drives");
        }
    }

    /// A failed sync of `drive`: out of service at once. The kernel may already have dropped
    /// the writes it could not flush, and a later sync would then succeed without them, so
    /// nothing written to the drive before can be taken as durable.
    pub fn sync_failed(&self, drive: usize, path: &Path, e: &std::io::Error) {
        self.errors[drive].fetch_add(1, Ordering::AcqRel);
        self.write_errors[drive].fetch_add(1, Ordering::Relaxed);
        if !self.failed[drive].swap(true, Ordering::AcqRel) {
            tracing::error!(drive = %path.display(), error = %e, "drive failed a sync; it is offline until the store reopens or the operator adds it back: writes it had not yet made durable may be lost, so its values read as misses and new values go to the other drives");
        }
    }

    /// Counts a read of a value on `drive` that could not be served (a failed drive's; a
    /// removed drive's values are missed on purpose and not counted).
    pub fn unreadable(&self, drive: usize) {
        if !self.removed(drive) {
            self.read_errors[drive].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The operator's removal; `false` when it was removed already.
    pub fn remove(&self, drive: usize) -> bool {
        !self.removed[drive].swap(true, Ordering::AcqRel)
    }

    /// Back in service, failed or removed before; its error count starts again.
    pub fn restore(&self, drive: usize) {
        self.errors[drive].store(0, Ordering::Release);
        self.failed[drive].store(false, Ordering::Release);
        self.removed[drive].store(false, Ordering::Release);
    }
}
