//! Which drives are in service: a drive that failed an I/O goes offline on its own; the
//! operator removes one (and adds it back) through the store. Either way its values read as
//! misses and new values go to the other drives.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub(crate) struct DriveHealth {
    failed: Box<[AtomicBool]>,
    removed: Box<[AtomicBool]>,
    read_errors: Box<[AtomicU64]>,
}

impl DriveHealth {
    pub fn new(drives: usize) -> Self {
        let flags = || (0..drives).map(|_| AtomicBool::new(false)).collect();
        DriveHealth {
            failed: flags(),
            removed: flags(),
            read_errors: (0..drives).map(|_| AtomicU64::new(0)).collect(),
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

    /// Takes `drive` out of service after an I/O error on it.
    pub fn fail(&self, drive: usize, path: &Path, e: &std::io::Error) {
        if !self.failed[drive].swap(true, Ordering::AcqRel) {
            tracing::error!(drive = %path.display(), error = %e, "drive failed an I/O; it is offline until the store reopens or the operator adds it back: its values read as misses and new values go to the other drives");
        }
    }

    /// Counts a read of a value on `drive` that could not be served (a failed drive's;
    /// a removed drive's values are missed on purpose and not counted).
    pub fn unreadable(&self, drive: usize) {
        if !self.removed(drive) {
            self.read_errors[drive].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The operator's removal; `false` when it was removed already.
    pub fn remove(&self, drive: usize) -> bool {
        !self.removed[drive].swap(true, Ordering::AcqRel)
    }

    /// Back in service, failed or removed before.
    pub fn restore(&self, drive: usize) {
        self.failed[drive].store(false, Ordering::Release);
        self.removed[drive].store(false, Ordering::Release);
    }
}
