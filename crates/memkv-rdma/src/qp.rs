//! Reliable-connected queue pairs: creation (RESET -> INIT), the endpoint each side advertises,
//! connecting (INIT -> RTR -> RTS) and breaking. The operations are in `rc::ops`.

use std::sync::{Arc, OnceLock};

use memkv_fabric::LinkLayer;
use memkv_proto::connect::RdmaEndpoint;

use crate::cq::NotifiedCq;
use crate::device::RdmaDevice;
use crate::endpoint::{advertise, peer_endpoint, peer_key};
use crate::error::RdmaError;
use crate::gate::PeerWindow;
pub use crate::options::QpOptions;
use crate::rc::pair::{Connection, QpCore};
use crate::rc::verbs;

/// The transport of an [`RcQueuePair`]. DC is not a queue pair of its own here: it lives in
/// [`crate::dc`] (a [`crate::DciPool`] of initiators and one [`crate::DcTarget`] per server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTransport {
    Rc,
}

/// A reliable-connected queue pair and the thread that completes its operations.
///
/// Every method takes `&self`: share it (`Arc`) between tasks to run operations concurrently;
/// the peer's congestion window bounds how many work requests are outstanding.
pub struct RcQueuePair {
    pub(crate) core: Arc<QpCore>,
    /// Started by the first operation: a pair that only answers (the server's) needs none.
    pub(crate) completion_thread: OnceLock<Result<(), RdmaError>>,
}

impl RdmaDevice {
    /// Creates an RC queue pair in INIT (RESET -> INIT with this port's P_Key index and remote
    /// READ/WRITE access), with its own CQ, completion channel and completion thread.
    pub fn create_rc(self: &Arc<Self>) -> Result<RcQueuePair, RdmaError> {
        self.create_rc_with(QpOptions::default())
    }

    pub fn create_rc_with(self: &Arc<Self>, options: QpOptions) -> Result<RcQueuePair, RdmaError> {
        let limits = self.limits();
        // At least the window's maximum, so that what the window admits always fits.
        let depth = options
            .send_queue_depth
            .max(self.max_window())
            .clamp(1, limits.max_qp_wr.min(limits.max_cqe));
        let cq = NotifiedCq::new(self, depth)?;
        let qp = verbs::create_in_init(self, depth, &cq.cq)?;
        let psn = getrandom::u32().map_err(|e| RdmaError::Verbs {
            call: "getrandom",
            device: self.name().to_owned(),
            errno: 0,
            reason: e.to_string(),
        })? & 0x00ff_ffff;
        let core = Arc::new(QpCore::new(qp, cq, self.clone(), psn, options)?);
        Ok(RcQueuePair {
            core,
            completion_thread: OnceLock::new(),
        })
    }
}

impl RcQueuePair {
    pub fn transport(&self) -> QpTransport {
        QpTransport::Rc
    }

    pub fn qp_num(&self) -> u32 {
        self.core.qp_num
    }

    pub fn device(&self) -> &Arc<RdmaDevice> {
        &self.core.device
    }

    /// True once an operation failed, timed out or was aborted: the pair takes no more work.
    pub fn is_broken(&self) -> bool {
        self.core.is_broken()
    }

    /// Whether the device reports the pair in the error state (`ibv_query_qp`). A server's
    /// pairs never post work, so this is how it learns that a client's pair failed (a remote
    /// access error, for one, moves the responder's pair to the error state too).
    pub fn in_error_state(&self) -> bool {
        verbs::in_error_state(&self.core.lock_qp())
    }

    /// How many chains of work requests were posted (one doorbell each).
    pub fn doorbells(&self) -> u64 {
        self.core.work.doorbells()
    }

    /// Work requests posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.core.work.in_flight()
    }

    /// The peer's congestion window, once connected.
    pub fn window(&self) -> Option<&Arc<PeerWindow>> {
        self.core.connection.get().map(|c| &c.window)
    }

    /// What this side sends in Connect: the port's address (LID/GID, MTU, P_Key) from the
    /// fabric, this pair's number and first PSN, and on a server the arena (`addr`, `rkey`).
    pub fn local_endpoint(&self, arena: Option<(u64, u32)>) -> Result<RdmaEndpoint, RdmaError> {
        let device = &self.core.device;
        let local = device.runtime().local_endpoint(device.plan())?;
        let pkey_index = device.plan().pkey.as_ref().map(|p| p.index).unwrap_or(0);
        Ok(advertise(
            &local,
            pkey_index,
            self.core.qp_num,
            self.core.psn,
            arena,
        ))
    }

    /// Connects to the peer that sent `peer` (INIT -> RTR -> RTS). The fabric builds the
    /// address and refuses peers it cannot reach (no LID on InfiniBand, another subnet, both
    /// limited partition members, ...).
    ///
    /// Blocking: the first INIT -> RTR towards a peer waits about a second inside
    /// `ibv_modify_qp` while the kernel resolves its address (ARP). From async code call it
    /// through `tokio::task::spawn_blocking` (the pair is `Send + Sync`; wrap it in an `Arc`).
    pub fn connect(&self, peer: &RdmaEndpoint) -> Result<(), RdmaError> {
        let core = &self.core;
        if core.connection.get().is_some() {
            return Err(RdmaError::AlreadyConnected {
                qp_num: core.qp_num,
            });
        }
        core.check_usable()?;
        let device = &core.device;
        let peer_fabric = peer_endpoint(peer)?;
        let plan = device.runtime().address_for(device.plan(), &peer_fabric)?;
        verbs::connect_to(
            &mut core.lock_qp(),
            device,
            &plan,
            (peer.qp_num, peer.psn),
            core.psn,
            &core.options,
        )?;
        let infiniband = device.plan().facts.link_layer == LinkLayer::InfiniBand;
        let window = device.peer_window(&peer_key(&peer_fabric, infiniband));
        core.connection
            .set(Connection { window })
            .map_err(|_| RdmaError::AlreadyConnected {
                qp_num: core.qp_num,
            })
    }

    /// [`RcQueuePair::connect`] on tokio's blocking pool, for callers on a tokio runtime.
    pub async fn connect_async(self: &Arc<Self>, peer: &RdmaEndpoint) -> Result<(), RdmaError> {
        let (qp, peer) = (self.clone(), *peer);
        tokio::task::spawn_blocking(move || qp.connect(&peer))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// Moves the pair to the error state: every operation in flight ends with
    /// [`RdmaError::QueuePairError`] (IBV_WC_WR_FLUSH_ERR), later ones with
    /// [`RdmaError::QueuePairBroken`].
    pub fn abort(&self, reason: &str) {
        self.core.break_pair(reason);
    }
}

impl Drop for RcQueuePair {
    fn drop(&mut self) {
        self.core.work.shut_down();
    }
}
