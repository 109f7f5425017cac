//! The bookkeeping of the work requests behind one completion queue, shared by the operations
//! that post them and the completion thread that ends them: their ids, the in-flight table,
//! the doorbell count, and the eventfd that wakes the thread. Transport-neutral: posting itself
//! is a closure (RC `ibv_post_send` on its pair, DC `ibv_wr_*` on a DCI).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::cq::WakeFd;
use crate::error::RdmaError;
use crate::inflight::{InFlightTable, Owner};
use crate::metrics_names::{OP_LABEL, WR_TOTAL};
use crate::transfer::Chunk;

pub(crate) struct WorkRequests<T> {
    table: Mutex<InFlightTable<T>>,
    next_wr_id: AtomicU64,
    doorbells: AtomicU64,
    /// An operation whose requests have not all completed by then times out.
    pub deadline: Duration,
    /// Set when the owner is dropped: the thread ends once nothing is in flight.
    shutdown: AtomicBool,
    wake: WakeFd,
}

impl<T: Clone> WorkRequests<T> {
    pub fn new(device: &str, deadline: Duration) -> Result<Self, RdmaError> {
        Ok(Self {
            table: Mutex::new(InFlightTable::default()),
            next_wr_id: AtomicU64::new(1),
            doorbells: AtomicU64::new(0),
            deadline,
            shutdown: AtomicBool::new(false),
            wake: WakeFd::new(device)?,
        })
    }

    pub fn table(&self) -> MutexGuard<'_, InFlightTable<T>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Work requests posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.table().len()
    }

    /// Successful posts (each rings the doorbell once for a whole chain).
    pub fn doorbells(&self) -> u64 {
        self.doorbells.load(Ordering::Relaxed)
    }

    pub fn wake_fd(&self) -> &WakeFd {
        &self.wake
    }

    /// Wakes the completion thread (new work after an idle spell, a broken queue pair).
    pub fn wake_thread(&self) {
        self.wake.wake();
    }

    /// Tells the completion thread to end once nothing is in flight.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.wake_thread();
    }

    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Posts `chunks` as one chain (one doorbell) through `ring`, which gets the first work
    /// request id (the others follow it) and returns how many the provider took before the
    /// one it refused. The requests are in the table before `ring` runs, since the NIC may
    /// complete them before it returns. On failure the requests not posted are forgotten and
    /// the error says how many were posted.
    pub fn post(
        &self,
        owner: &Owner<'_, T>,
        chunks: &[Chunk],
        ring: impl FnOnce(u64) -> Result<(), (usize, RdmaError)>,
    ) -> Result<(), (usize, RdmaError)> {
        let n = chunks.len();
        if n == 0 {
            return Ok(());
        }
        let first_id = self.next_wr_id.fetch_add(n as u64, Ordering::Relaxed);
        owner.slot.expect(n);
        let was_idle = self.table().insert_run(first_id, n, owner, Instant::now());
        if was_idle {
            // The completion thread may be asleep without a deadline to wake for; a peer that
            // never answers would otherwise leave it (and the operation) asleep for good.
            self.wake_thread();
        }
        let label = owner.op.label();
        match ring(first_id) {
            Ok(()) => {
                self.doorbells.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(WR_TOTAL, OP_LABEL => label).increment(n as u64);
                Ok(())
            }
            Err((posted, e)) => {
                let posted = posted.min(n);
                self.table().remove_run(first_id, posted..n);
                owner.slot.forget(n - posted);
                if posted > 0 {
                    metrics::counter!(WR_TOTAL, OP_LABEL => label).increment(posted as u64);
                }
                Err((posted, e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::gate::PeerWindow;
    use crate::op::Op;
    use crate::slot::Slot;
    use crate::window::CongestionWindow;

    fn chunks(n: usize) -> Vec<Chunk> {
        (0..n)
            .map(|i| Chunk {
                local_addr: 0x1000 * i as u64,
                lkey: 1,
                len: 64,
                remote_addr: 0x8000 + 64 * i as u64,
                rkey: 2,
            })
            .collect()
    }

    #[test]
    fn a_partly_refused_chain_keeps_what_was_posted_in_flight() {
        let work = WorkRequests::<()>::new("test", Duration::from_secs(1)).unwrap();
        let slot = Arc::new(Slot::default());
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::default()));
        let owner = Owner {
            slot: &slot,
            op: Op::Write,
            window: &window,
            queue: 0,
            tag: (),
        };
        let mut first = 0;
        work.post(&owner, &chunks(3), |id| {
            first = id;
            Ok(())
        })
        .unwrap();
        assert_eq!((first, work.doorbells(), work.in_flight()), (1, 1, 3));
        assert_eq!(slot.outstanding(), 3);

        let refused = RdmaError::verbs_errno("ibv_post_send", "test", libc::ENOMEM);
        let e = work
            .post(&owner, &chunks(4), |id| {
                first = id;
                Err((1, refused.clone()))
            })
            .unwrap_err();
        assert_eq!(e, (1, refused));
        assert_eq!(first, 4, "ids follow on");
        assert_eq!((work.doorbells(), work.in_flight()), (1, 4));
        assert_eq!(
            slot.outstanding(),
            4,
            "the one posted request is still awaited"
        );
        assert!(work.table().take(4).is_some() && work.table().take(5).is_none());

        work.post(&owner, &[], |_| unreachable!("nothing to post"))
            .unwrap();
    }
}
