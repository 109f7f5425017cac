//! The shared state of a DCI pool: its initiators, their health and the selector placing work
//! on them, and the work requests in flight on their one completion queue. To the completion
//! thread it is a set of queue pairs numbered by DCI index; a broken DCI is taken out of
//! service, flushed, reset and returned to service.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::completion::QueuePairs;
use crate::cq::NotifiedCq;
use crate::dc::selector::DciSelector;
use crate::dc::verbs::{DcPath, Initiator};
use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::inflight::InFlight;
use crate::options::QpOptions;
use crate::work_requests::WorkRequests;

#[derive(Default)]
pub(crate) struct DciHealth {
    pub broken: Option<String>,
    /// The move to the error state succeeded: the NIC no longer touches the memory of the
    /// DCI's requests, so those it never flushed may be ended without their completion.
    pub stopped: bool,
    pub repair_failed: bool,
}

pub(crate) struct PoolCore {
    // Field order is drop order: the DCIs before their CQ, the CQ before its channel.
    pub dcis: Vec<Mutex<Initiator>>,
    pub cq: NotifiedCq,
    pub device: Arc<RdmaDevice>,
    pub dci_nums: Vec<u32>,
    pub path: DcPath,
    pub rd_atomic: u8,
    pub options: QpOptions,
    pub id: u64,
    pub selector: Mutex<DciSelector>,
    /// Notified whenever send queue entries free up or a DCI returns to service.
    pub sq_freed: Notify,
    /// Each request carries the id of its peer, whose place on the DCI it frees on completion.
    pub work: WorkRequests<u64>,
    pub health: Mutex<Vec<DciHealth>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PoolCore {
    /// Takes `dci` out of service and moves it to the error state, which flushes its requests.
    /// On a DCI already broken but not stopped (the move failed), retries the move.
    pub fn break_dci(&self, dci: usize, reason: &str) {
        {
            let mut health = lock(&self.health);
            let Some(h) = health.get_mut(dci) else { return };
            if h.stopped {
                return;
            }
            if h.broken.is_none() {
                tracing::warn!(
                    qp_num = self.dci_nums[dci],
                    device = self.device.name(),
                    "DC initiator broken: {reason}"
                );
                h.broken = Some(reason.to_owned());
                lock(&self.selector).mark_broken(dci);
            }
        }
        let initiator = lock(&self.dcis[dci]);
        match initiator.qp.to_error() {
            // Recorded under the DCI's lock, which a repair's reset also takes, so the flag
            // cannot be set after a reset that already put the DCI back in service.
            Ok(()) => {
                if let Some(h) = lock(&self.health).get_mut(dci) {
                    h.stopped = true;
                }
            }
            // Not stopped: requests the NIC holds stay in flight (their memory borrowed, the
            // DCI out of service) and the completion thread calls this again.
            Err(e) => tracing::error!(qp_num = self.dci_nums[dci], "{e}"),
        }
        drop(initiator);
        self.work.wake_thread();
    }

    /// The error for an operation that cannot use `dci` (or, `None`, any DCI).
    pub fn broken_error(&self, dci: Option<usize>) -> RdmaError {
        let health = lock(&self.health);
        let (qp_num, reason) = match dci {
            Some(d) => (
                self.dci_nums[d],
                health[d].broken.clone().unwrap_or_default(),
            ),
            None => (
                self.dci_nums[0],
                format!(
                    "every DC initiator of the pool is broken; the first: {}",
                    health[0].broken.clone().unwrap_or_default()
                ),
            ),
        };
        RdmaError::QueuePairBroken { qp_num, reason }
    }

    /// Gives back `count` places of `peer` on `dci` and wakes operations waiting for one.
    pub fn release_places(&self, dci: usize, peer: u64, count: u32) {
        lock(&self.selector).release(dci, peer, count);
        self.sq_freed.notify_waiters();
    }

    /// Resets broken initiators whose requests have all completed and returns them to
    /// service. One that fails to reset stays out of service.
    pub fn repair_drained(&self) {
        let drained = lock(&self.selector).drained_broken();
        let mut repaired = false;
        for dci in drained {
            if lock(&self.health)[dci].repair_failed {
                continue;
            }
            let result = lock(&self.dcis[dci]).qp.initiator_to_rts(
                &self.path,
                &self.options,
                self.rd_atomic,
            );
            let mut health = lock(&self.health);
            match result {
                Ok(()) => {
                    health[dci] = DciHealth::default();
                    lock(&self.selector).mark_repaired(dci);
                    repaired = true;
                    tracing::info!(qp_num = self.dci_nums[dci], "DC initiator back in service");
                }
                Err(e) => {
                    health[dci].repair_failed = true;
                    tracing::error!(qp_num = self.dci_nums[dci], "resetting a DC initiator: {e}");
                }
            }
        }
        if repaired {
            self.sq_freed.notify_waiters();
        }
    }
}

impl QueuePairs for PoolCore {
    type Tag = u64;

    fn work(&self) -> &WorkRequests<u64> {
        &self.work
    }

    fn cq(&self) -> &NotifiedCq {
        &self.cq
    }

    fn device_name(&self) -> &str {
        self.device.name()
    }

    fn queue_count(&self) -> usize {
        self.dcis.len()
    }

    fn qp_num(&self, dci: usize) -> u32 {
        self.dci_nums[dci]
    }

    fn is_broken(&self, dci: usize) -> bool {
        lock(&self.health)
            .get(dci)
            .is_some_and(|h| h.broken.is_some())
    }

    fn break_queue(&self, dci: usize, reason: &str) {
        self.break_dci(dci, reason);
    }

    fn is_stopped(&self, dci: usize) -> bool {
        lock(&self.health).get(dci).is_some_and(|h| h.stopped)
    }

    fn release(&self, request: &InFlight<u64>) {
        self.release_places(request.queue, request.tag, 1);
    }

    fn between_polls(&self) {
        self.repair_drained();
    }
}
