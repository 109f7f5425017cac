//! Extent bookkeeping for file mode: which fixed-size extents on which drive are free.
//! A value's extents are spread round-robin over the drives, starting at a rotating drive.
//!
//! With discard on, a freed extent is first *pending*: the store discards pending extents in
//! batches ([`ExtentAllocator::take_pending`], then [`ExtentAllocator::discarded`]) before they
//! are free again, so a discard never lands on an extent a new value holds. An allocation that
//! runs short takes pending extents as they are (their discard is skipped: the new value
//! overwrites them), and waits for a batch being discarded rather than fail while one is out.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// `drive << 32 | index within the drive`.
pub(crate) type ExtentId = u64;

pub(crate) fn extent_id(drive: usize, index: u32) -> ExtentId {
    ((drive as u64) << 32) | u64::from(index)
}

pub(crate) fn split_extent(id: ExtentId) -> (usize, u32) {
    ((id >> 32) as usize, id as u32)
}

pub(crate) struct ExtentAllocator {
    lists: Mutex<Lists>,
    /// Signalled when a discarded batch becomes free.
    discarded: Condvar,
    totals: Vec<u64>,
    next_drive: AtomicUsize,
    discard: bool,
}

/// Per drive: free extent indexes, those freed but not yet discarded, and how many are out
/// being discarded now.
struct Lists {
    free: Vec<Vec<u32>>,
    pending: Vec<Vec<u32>>,
    discarding: Vec<usize>,
}

impl Lists {
    fn available(&self, d: usize) -> usize {
        self.free[d].len() + self.pending[d].len()
    }
}

impl ExtentAllocator {
    /// `totals[d]` extents on drive `d`, of which those in `used` are taken. `discard`: freed
    /// extents wait to be discarded before they are free.
    pub fn new(totals: Vec<u64>, used: &HashSet<ExtentId>, discard: bool) -> Arc<Self> {
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
        let drives = totals.len();
        Arc::new(Self {
            lists: Mutex::new(Lists {
                free,
                pending: vec![Vec::new(); drives],
                discarding: vec![0; drives],
            }),
            discarded: Condvar::new(),
            totals,
            next_drive: AtomicUsize::new(0),
            discard,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `count` extents striped over the drives `usable` accepts, or `None` if fewer are free.
    pub fn allocate(
        self: &Arc<Self>,
        count: usize,
        usable: impl Fn(usize) -> bool,
    ) -> Option<ExtentSet> {
        let mut lists = self.lock();
        let drives = lists.free.len();
        // Which drives are in service is read once per count and kept for the taking below: a
        // drive leaving service in between (removed, or failing on another thread) would
        // otherwise leave the taking looking, forever and under the lock, for extents counted
        // on it. A value placed on it just then fails its write, as one placed a moment before.
        let mut online: Vec<bool>;
        loop {
            online = (0..drives).map(&usable).collect();
            let (available, out) = (0..drives)
                .filter(|&d| online[d])
                .fold((0, 0), |(a, o), d| {
                    (a + lists.available(d), o + lists.discarding[d])
                });
            if available >= count {
                break;
            }
            if available + out < count {
                return None;
            }
            // Enough once the batch being discarded is back: a few milliseconds.
            lists = self
                .discarded
                .wait(lists)
                .unwrap_or_else(|p| p.into_inner());
        }
        let mut d = self.next_drive.fetch_add(1, Ordering::Relaxed) % drives;
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            if online[d] {
                let taken = match lists.free[d].pop() {
                    Some(i) => Some(i),
                    None => lists.pending[d].pop(),
                };
                if let Some(i) = taken {
                    ids.push(extent_id(d, i));
                }
            }
            d = (d + 1) % drives;
        }
        Some(ExtentSet {
            ids: ids.into(),
            alloc: Arc::clone(self),
        })
    }

    /// Takes ownership of extents that replay found in use.
    pub fn adopt(self: &Arc<Self>, ids: Vec<ExtentId>) -> ExtentSet {
        ExtentSet {
            ids: ids.into(),
            alloc: Arc::clone(self),
        }
    }

    fn release(&self, ids: &[ExtentId]) {
        let mut lists = self.lock();
        for &id in ids {
            let (d, i) = split_extent(id);
            if self.discard {
                lists.pending[d].push(i);
            } else {
                lists.free[d].push(i);
            }
        }
    }

    /// Hands out every pending extent, per drive, for discarding; they are neither free nor
    /// pending until [`Self::discarded`] returns them.
    pub fn take_pending(&self) -> Vec<Vec<u32>> {
        let mut lists = self.lock();
        let Lists {
            pending,
            discarding,
            ..
        } = &mut *lists;
        pending
            .iter_mut()
            .zip(discarding.iter_mut())
            .map(|(p, out)| {
                *out += p.len();
                std::mem::take(p)
            })
            .collect()
    }

    /// Frees a batch from [`Self::take_pending`], discarded (or not) by the caller.
    pub fn discarded(&self, batch: Vec<Vec<u32>>) {
        let mut lists = self.lock();
        for (d, ids) in batch.into_iter().enumerate() {
            lists.discarding[d] -= ids.len();
            lists.free[d].extend(ids);
        }
        drop(lists);
        self.discarded.notify_all();
    }

    /// `(total, used)` extents per drive. Pending and discarding extents are not used.
    pub fn usage(&self) -> Vec<(u64, u64)> {
        let lists = self.lock();
        (0..self.totals.len())
            .map(|d| {
                let t = self.totals[d];
                let unused = lists.available(d) + lists.discarding[d];
                (t, t - unused as u64)
            })
            .collect()
    }
}

/// Extents owned by one value or reservation; freed on drop.
pub(crate) struct ExtentSet {
    pub ids: ExtentIds,
    alloc: Arc<ExtentAllocator>,
}

/// A block's extent ids. Most values fit one extent (4 MiB by default), so one id is held
/// inline: an index of a million blocks then saves a million small heap allocations (about
/// 40 bytes per block with the vector's own header; docs/benchmarks.md, index memory).
pub(crate) enum ExtentIds {
    One(ExtentId),
    Many(Box<[ExtentId]>),
}

impl From<Vec<ExtentId>> for ExtentIds {
    fn from(ids: Vec<ExtentId>) -> Self {
        match ids.as_slice() {
            &[one] => ExtentIds::One(one),
            _ => ExtentIds::Many(ids.into_boxed_slice()),
        }
    }
}

impl std::ops::Deref for ExtentIds {
    type Target = [ExtentId];

    fn deref(&self) -> &[ExtentId] {
        match self {
            ExtentIds::One(id) => std::slice::from_ref(id),
            ExtentIds::Many(ids) => ids,
        }
    }
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
    fn one_extent_is_held_inline_and_any_count_reads_back() {
        assert!(matches!(ExtentIds::from(vec![7]), ExtentIds::One(7)));
        assert!(std::mem::size_of::<ExtentIds>() <= std::mem::size_of::<Vec<ExtentId>>());
        for ids in [vec![], vec![9], vec![1, 2, 3]] {
            assert_eq!(&*ExtentIds::from(ids.clone()), ids.as_slice());
        }
    }

    #[test]
    fn stripes_round_robin_and_frees() {
        let a = ExtentAllocator::new(vec![4, 4, 4], &HashSet::from([extent_id(1, 3)]), false);
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

    /// A drive leaving service while an allocation runs (the operator's removal, or its
    /// error limit reached on another thread), simulated by a `usable` that says yes once and
    /// no after: the allocation takes what it counted, where it used to look forever, under
    /// the lock, for extents only that drive had.
    #[test]
    fn a_drive_leaving_service_mid_allocation_does_not_stall_it() {
        let a = ExtentAllocator::new(vec![2, 4], &HashSet::new(), false);
        // Drive 0 full; kept (never freed) so that a failure here cannot block on the lock.
        std::mem::forget(a.allocate(2, |d| d == 0).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let racing = Arc::clone(&a);
        std::thread::spawn(move || {
            let asked = std::sync::atomic::AtomicUsize::new(0);
            let set = racing.allocate(3, |d| {
                d == 1 && asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0
            });
            let _ = tx.send(set.map(|s| s.ids.to_vec()));
        });
        let ids = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the allocation returns")
            .expect("three extents were free on the drive in service when counted");
        assert!(ids.iter().all(|&id| split_extent(id).0 == 1), "{ids:?}");
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn freed_extents_wait_for_their_discard_unless_space_runs_short() {
        let a = ExtentAllocator::new(vec![2, 2], &HashSet::new(), true);
        let first = a.allocate(4, |_| true).unwrap();
        drop(first);
        assert_eq!(a.usage(), vec![(2, 0), (2, 0)], "pending is not used");
        let batch = a.take_pending();
        assert_eq!(batch.iter().map(Vec::len).sum::<usize>(), 4);
        assert!(
            a.take_pending().iter().all(Vec::is_empty),
            "handed out once"
        );
        a.discarded(batch);
        // Now free: a full allocation succeeds, and its extents go back to pending.
        let again = a.allocate(4, |_| true).unwrap();
        drop(again);
        // Short of free extents, an allocation takes pending ones as they are.
        let taken = a.allocate(3, |_| true).unwrap();
        let rest = a.take_pending();
        assert_eq!(
            rest.iter().map(Vec::len).sum::<usize>(),
            1,
            "only the one left over"
        );
        for id in taken.ids.iter() {
            let (d, i) = split_extent(*id);
            assert!(!rest[d].contains(&i), "a taken extent is never discarded");
        }
        a.discarded(rest);
        assert_eq!(a.usage().iter().map(|u| u.1).sum::<u64>(), 3);
    }

    #[test]
    fn an_allocation_waits_for_a_batch_being_discarded() {
        let a = ExtentAllocator::new(vec![2], &HashSet::new(), true);
        drop(a.allocate(2, |_| true).unwrap());
        let batch = a.take_pending();
        let waiter = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || a.allocate(2, |_| true))
        };
        a.discarded(batch);
        let held = waiter
            .join()
            .unwrap()
            .expect("allocated once the batch was back");
        assert_eq!(held.ids.len(), 2);
        assert!(
            a.allocate(1, |_| true).is_none(),
            "nothing out, nothing free: no wait"
        );
    }
}
