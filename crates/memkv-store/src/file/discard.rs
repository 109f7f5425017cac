//! Batch discard of freed extents: the extents freed since the last batch are discarded per
//! drive, neighbours merged into one range, then made free again (`extents.rs` keeps them out
//! of allocation meanwhile). Safe against crashes: an extent is freed only after the journal
//! record that superseded its value is durable, so replay never points at a discarded one.

use std::sync::atomic::Ordering;

use super::FileBackend;
use super::extents::ExtentAllocator;

/// Gives a batch back to the allocator however the discard went (an allocation may be
/// waiting for it).
struct Batch<'a> {
    extents: &'a ExtentAllocator,
    ids: Option<Vec<Vec<u32>>>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if let Some(ids) = self.ids.take() {
            self.extents.discarded(ids);
        }
    }
}

/// Runs of consecutive indexes in `ids` (sorted here): `(first, count)`.
fn runs(ids: &mut [u32]) -> Vec<(u32, u32)> {
    ids.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &i in ids.iter() {
        match out.last_mut() {
            Some((first, count)) if *first + *count == i => *count += 1,
            _ => out.push((i, 1)),
        }
    }
    out
}

impl FileBackend {
    pub fn discard_freed(&self) -> u64 {
        let mut batch = Batch {
            extents: &self.extents,
            ids: Some(self.extents.take_pending()),
        };
        let mut discarded = 0;
        for (d, ids) in batch
            .ids
            .as_mut()
            .expect("set above")
            .iter_mut()
            .enumerate()
        {
            if ids.is_empty()
                || !self.health.online(d)
                || self.discard_refused[d].load(Ordering::Relaxed)
            {
                continue;
            }
            let drive = &self.drives[d];
            for (first, count) in runs(ids) {
                let offset = self.data_offset + u64::from(first) * self.block_size;
                let len = u64::from(count) * self.block_size;
                match drive.discard(offset, len) {
                    Ok(()) => discarded += u64::from(count),
                    Err(e) => {
                        // Unsupported here (a filesystem without hole punching, a device
                        // without discard): skipped from now on. Freed extents stay usable.
                        self.discard_refused[d].store(true, Ordering::Relaxed);
                        tracing::info!(drive = %drive.path().display(), error = %e, "drive does not take discards; freed extents are reused without them");
                        break;
                    }
                }
            }
        }
        drop(batch);
        discarded
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn neighbouring_extents_form_one_range() {
        assert_eq!(runs(&mut [7, 3, 4, 9, 5, 8]), vec![(3, 3), (7, 3)]);
        assert_eq!(runs(&mut []), vec![]);
        assert_eq!(runs(&mut [1]), vec![(1, 1)]);
    }
}
