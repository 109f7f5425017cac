//! The state of one queue pair shared by its handle, its operations and its completion
//! thread: the verbs objects, the work requests in flight, and whether the pair is broken.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rdma_mummy_sys::ibv_wc;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel};
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};

use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::inflight::{InFlightTable, outcome, timeout_error};
use crate::metrics_names::{STATUS_LABEL, WC_ERRORS_TOTAL};
use crate::options::QpOptions;
use crate::status::WcStatus;

/// How long after a timeout the completion thread waits for the NIC to flush a request before
/// it gives up on the NIC and ends the operation anyway.
pub(crate) const FLUSH_GRACE: Duration = Duration::from_secs(2);

pub(crate) struct Connection {
    pub window: Arc<PeerWindow>,
}

pub(crate) struct QpCore {
    // Field order is drop order: the queue pair (which holds its CQ) before the channel.
    qp: Mutex<BasicQueuePair>,
    pub cq: Arc<BasicCompletionQueue>,
    pub channel: Arc<CompletionChannel>,
    pub device: Arc<RdmaDevice>,
    pub qp_num: u32,
    pub psn: u32,
    pub options: QpOptions,
    pub connection: OnceLock<Connection>,
    in_flight: Mutex<InFlightTable>,
    pub(crate) next_wr_id: AtomicU64,
    pub(crate) doorbells: AtomicU64,
    broken: Mutex<Option<String>>,
    is_broken: AtomicBool,
    pub shutdown: AtomicBool,
    /// Written to wake the completion thread (shutdown).
    wake: OwnedFd,
}

impl QpCore {
    pub fn new(
        qp: BasicQueuePair,
        cq: Arc<BasicCompletionQueue>,
        channel: Arc<CompletionChannel>,
        device: Arc<RdmaDevice>,
        psn: u32,
        options: QpOptions,
    ) -> Result<Self, RdmaError> {
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(RdmaError::verbs(
                "eventfd",
                device.name(),
                &std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` is a freshly created descriptor nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            qp_num: qp.qp_number(),
            qp: Mutex::new(qp),
            cq,
            channel,
            device,
            psn,
            options,
            connection: OnceLock::new(),
            in_flight: Mutex::new(InFlightTable::default()),
            next_wr_id: AtomicU64::new(1),
            doorbells: AtomicU64::new(0),
            broken: Mutex::new(None),
            is_broken: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            wake,
        })
    }

    pub fn lock_qp(&self) -> MutexGuard<'_, BasicQueuePair> {
        self.qp.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock_in_flight(&self) -> MutexGuard<'_, InFlightTable> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn channel_fd(&self) -> RawFd {
        self.channel.as_raw_fd()
    }

    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    pub fn wake_thread(&self) {
        crate::completion::wake(self.wake.as_raw_fd());
    }

    pub fn is_broken(&self) -> bool {
        self.is_broken.load(Ordering::Acquire)
    }

    pub fn check_usable(&self) -> Result<(), RdmaError> {
        if self.is_broken() {
            let reason = self
                .broken
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_default();
            return Err(RdmaError::QueuePairBroken {
                qp_num: self.qp_num,
                reason,
            });
        }
        Ok(())
    }

    /// Marks the pair broken and moves it to the error state, which makes the NIC flush every
    /// outstanding request (each completes with IBV_WC_WR_FLUSH_ERR).
    pub fn break_pair(&self, reason: &str) {
        {
            let mut broken = self.broken.lock().unwrap_or_else(PoisonError::into_inner);
            if broken.is_none() {
                tracing::warn!(
                    qp_num = self.qp_num,
                    device = self.device.name(),
                    "queue pair broken: {reason}"
                );
                *broken = Some(reason.to_owned());
            }
            self.is_broken.store(true, Ordering::Release);
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        if let Err(e) = self.lock_qp().modify(&attr) {
            tracing::error!(
                qp_num = self.qp_num,
                "moving the queue pair to the error state: {e}"
            );
        }
    }

    /// Applies one work completion: settles its operation, feeds the window, counts errors.
    pub fn on_completion(&self, wc: &ibv_wc) {
        let Some(entry) = self.lock_in_flight().take(wc.wr_id) else {
            tracing::warn!(
                qp_num = self.qp_num,
                wr_id = wc.wr_id,
                "completion for an unknown work request"
            );
            return;
        };
        let status = WcStatus(wc.status);
        if let Some(conn) = self.connection.get() {
            conn.window.complete(status);
        }
        let result = outcome(
            &entry,
            status,
            wc.vendor_err,
            self.qp_num,
            self.options.op_deadline,
        );
        if !status.is_success() {
            metrics::counter!(WC_ERRORS_TOTAL, STATUS_LABEL => status.metric_label()).increment(1);
            if status != WcStatus::WR_FLUSH_ERR {
                self.break_pair(&format!("{} completed with {status}", entry.op.name()));
            } else if !self.is_broken() {
                self.break_pair("work requests were flushed");
            }
        }
        entry.slot.settle_one(result);
    }

    /// Breaks the pair when a request outlives its deadline, and ends requests the NIC has not
    /// flushed `FLUSH_GRACE` later. Returns when the next deadline falls, if any.
    pub fn check_deadlines(&self, now: Instant) -> Option<Instant> {
        let deadline = self.options.op_deadline;
        let expiry = self.lock_in_flight().expire(now, deadline, FLUSH_GRACE);
        if let Some(op) = expiry.newly_late {
            self.break_pair(&format!(
                "{} got no completion within {} ms",
                op.name(),
                deadline.as_millis()
            ));
        }
        if !expiry.abandoned.is_empty() {
            tracing::error!(
                qp_num = self.qp_num,
                count = expiry.abandoned.len(),
                "the NIC flushed no completion for timed-out work requests; ending them anyway"
            );
        }
        for entry in expiry.abandoned {
            if let Some(conn) = self.connection.get() {
                conn.window.complete(WcStatus::WR_FLUSH_ERR);
            }
            entry
                .slot
                .settle_one(Err(timeout_error(self.qp_num, entry.op, deadline)));
        }
        expiry.next
    }

    /// Successful ibv_post_send calls (each rings the doorbell once for a whole chain).
    pub fn doorbells(&self) -> u64 {
        self.doorbells.load(Ordering::Relaxed)
    }

    pub fn in_flight_count(&self) -> usize {
        self.lock_in_flight().len()
    }
}
