//! Extent bookkeeping for file mode: which fixed-size extents on which drive are free.
//! A value's extents are spread round-robin over the drives, starting at a rotating drive.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// `drive << 32 | index within the drive`.
pub(crate) type ExtentId = u64;

pub(crate) fn extent_id(drive: usize, index: u32) -> ExtentId {
    ((drive as u64) << 32) | u64::from(index)
}

pub(crate) fn split_extent(id: ExtentId) -> (usize, u32) {
    ((id >> 32) as usize, id as u32)
}

pub(crate) struct ExtentAllocator {
    free: Mutex<Vec<Vec<u32>>>,
    totals: Vec<u64>,
    next_drive: AtomicUsize,
}

impl ExtentAllocator {
    /// `totals[d]` extents on drive `d`, of which those in `used` are taken.
    pub fn new(totals: Vec<u64>, used: &HashSet<ExtentId>) -> Arc<Self> {
        let free = totals
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                (0..n as u32)
                    .rev()
                    .filter(|&i| !used.contains(&extent_id(d, i)))
                    .collect()
            })
            .collect();
        Arc::new(Self {
            free: Mutex::new(free),
            totals,
            next_drive: AtomicUsize::new(0),
        })
    }

    /// `count` extents striped over the drives `usable` accepts, or `None` if fewer are free.
    pub fn allocate(
        self: &Arc<Self>,
        count: usize,
        usable: impl Fn(usize) -> bool,
    ) -> Option<ExtentSet> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let available: usize = (0..free.len())
            .filter(|&d| usable(d))
            .map(|d| free[d].len())
            .sum();
        if available < count {
            return None;
        }
        let drives = free.len();
        let mut d = self.next_drive.fetch_add(1, Ordering::Relaxed) % drives;
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            if usable(d)
                && let Some(i) = free[d].pop()
            {
                ids.push(extent_id(d, i));
            }
            d = (d + 1) % drives;
        }
        Some(ExtentSet {
            ids,
            alloc: Arc::clone(self),
        })
    }

    /// Takes ownership of extents that replay found in use.
    pub fn adopt(self: &Arc<Self>, ids: Vec<ExtentId>) -> ExtentSet {
        ExtentSet {
            ids,
            alloc: Arc::clone(self),
        }
    }

    fn release(&self, ids: &[ExtentId]) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        for &id in ids {
            let (d, i) = split_extent(id);
            free[d].push(i);
        }
    }

    /// `(total, used)` extents per drive.
    pub fn usage(&self) -> Vec<(u64, u64)> {
        let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        self.totals
            .iter()
            .zip(free.iter())
            .map(|(&t, f)| (t, t - f.len() as u64))
            .collect()
    }
}

/// Extents owned by one value or reservation; freed on drop.
pub(crate) struct ExtentSet {
    pub ids: Vec<ExtentId>,
    alloc: Arc<ExtentAllocator>,
}

impl Drop for ExtentSet {
    fn drop(&mut self) {
        self.alloc.release(&self.ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_round_robin_and_frees() {
        let a = ExtentAllocator::new(vec![4, 4, 4], &HashSet::from([extent_id(1, 3)]));
        let set = a.allocate(6, |_| true).unwrap();
        let drives: Vec<usize> = set.ids.iter().map(|&id| split_extent(id).0).collect();
        assert_eq!(drives, vec![0, 1, 2, 0, 1, 2]);
        assert!(!set.ids.contains(&extent_id(1, 3)));
        assert!(a.allocate(6, |_| true).is_none());
        let rest = a.allocate(5, |_| true).unwrap();
        assert!(a.allocate(1, |_| true).is_none());
        drop(set);
        drop(rest);
        // Extent 1/3 was in use at construction and never adopted, so it stays taken.
        assert_eq!(a.usage(), vec![(4, 0), (4, 1), (4, 0)]);
    }
}
