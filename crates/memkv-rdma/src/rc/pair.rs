//! The state of one RC queue pair shared by its handle, its operations and its completion
//! thread: the verbs objects, the work requests in flight, the peer's window once connected,
//! and whether the pair is broken. To the completion thread it is a set of one queue pair.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

use crate::completion::QueuePairs;
use crate::cq::NotifiedCq;
use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::options::QpOptions;
use crate::rc::verbs;
use crate::work_requests::WorkRequests;

pub(crate) struct Connection {
    pub window: Arc<PeerWindow>,
}

pub(crate) struct QpCore {
    // Field order is drop order: the queue pair (which holds its CQ) before the CQ's channel.
    pub qp: Mutex<BasicQueuePair>,
    pub cq: NotifiedCq,
    pub device: Arc<RdmaDevice>,
    pub qp_num: u32,
    pub psn: u32,
    pub options: QpOptions,
    pub connection: OnceLock<Connection>,
    /// RC requests carry nothing besides their queue pair (always 0): the window is the
    /// connection's.
    pub work: WorkRequests<()>,
    broken: Mutex<Option<String>>,
    is_broken: AtomicBool,
    /// The pair is verifiably in the error state: the NIC no longer touches the memory of
    /// requests on it, so those it never flushed may be ended without their completion.
    stopped: AtomicBool,
}

impl QpCore {
    pub fn new(
        qp: BasicQueuePair,
        cq: NotifiedCq,
        device: Arc<RdmaDevice>,
        psn: u32,
        options: QpOptions,
    ) -> Result<Self, RdmaError> {
        Ok(Self {
            qp_num: qp.qp_number(),
            qp: Mutex::new(qp),
            cq,
            work: WorkRequests::new(device.name(), options.op_deadline)?,
            device,
            psn,
            options,
            connection: OnceLock::new(),
            broken: Mutex::new(None),
            is_broken: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        })
    }

    pub fn lock_qp(&self) -> MutexGuard<'_, BasicQueuePair> {
        self.qp.lock().unwrap_or_else(PoisonError::into_inner)
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
        if self.is_stopped() {
            return;
        }
        match verbs::to_error(&mut self.lock_qp()) {
            Ok(()) => self.stopped.store(true, Ordering::Release),
            // Not stopped: requests the NIC holds stay in flight (their memory borrowed) and
            // the completion thread calls this again.
            Err(e) => tracing::error!(
                qp_num = self.qp_num,
                "moving the queue pair to the error state: {e}"
            ),
        }
    }

    /// Whether the pair is verifiably in the error state (a move there succeeded, or the
    /// device reports it there, as after a failed move it may).
    pub fn is_stopped(&self) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return true;
        }
        // Only a broken pair can be in the error state on purpose; this keeps the query
        // (a system call) off the deadline checks of healthy pairs.
        if self.is_broken() && verbs::in_error_state(&self.lock_qp()) {
            self.stopped.store(true, Ordering::Release);
            return true;
        }
        false
    }
}

impl QueuePairs for QpCore {
    type Tag = ();

    fn work(&self) -> &WorkRequests<()> {
        &self.work
    }

    fn cq(&self) -> &NotifiedCq {
        &self.cq
    }

    fn device_name(&self) -> &str {
        self.device.name()
    }

    fn queue_count(&self) -> usize {
        1
    }

    fn qp_num(&self, _queue: usize) -> u32 {
        self.qp_num
    }

    fn is_broken(&self, _queue: usize) -> bool {
        QpCore::is_broken(self)
    }

    fn break_queue(&self, _queue: usize, reason: &str) {
        self.break_pair(reason);
    }

    fn is_stopped(&self, _queue: usize) -> bool {
        QpCore::is_stopped(self)
    }
}
