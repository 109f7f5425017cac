//! A pool of DC initiators on one device: creation, the peers (DC targets) it sends to, and
//! taking a broken DCI out of service and back in. The operations are in `ops`.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use memkv_fabric::LinkLayer;
use memkv_proto::connect::RdmaEndpoint;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel};
use tokio::sync::Notify;

use crate::dc::capability::require_dc;
use crate::dc::handles::RawAh;
use crate::dc::selector::DciSelector;
use crate::dc::table::DcTable;
use crate::dc::verbs::{DcPath, DcRole, Initiator, RawQp, wake_fd};
use crate::device::RdmaDevice;
use crate::endpoint::{peer_endpoint, peer_key};
use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::options::QpOptions;

/// Most DC initiators one pool may have (`rdma.num_dcis`).
pub const MAX_DCIS: u32 = 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// DC initiators of one device, shared (`&self`) by every task sending through them.
pub struct DciPool {
    pub(crate) core: Arc<PoolCore>,
}

/// A DC target the pool sends to: its address handle, DCT number and access key, and the
/// congestion window of that peer (shared with RC pairs to it).
pub struct DcPeer {
    // Field order is drop order: the address handle before the device that owns its PD.
    pub(crate) ah: RawAh,
    pub(crate) dct_num: u32,
    pub(crate) dc_key: u64,
    pub(crate) id: u64,
    pub(crate) pool_id: u64,
    pub(crate) window: Arc<PeerWindow>,
    _device: Arc<RdmaDevice>,
}

impl DcPeer {
    pub fn dct_num(&self) -> u32 {
        self.dct_num
    }

    pub fn window(&self) -> &Arc<PeerWindow> {
        &self.window
    }
}

#[derive(Default)]
pub(crate) struct DciHealth {
    pub broken: Option<String>,
    pub repair_failed: bool,
}

pub(crate) struct PoolCore {
    // Field order is drop order: the DCIs before their CQ, the CQ before its channel.
    pub dcis: Vec<Mutex<Initiator>>,
    pub cq: Arc<BasicCompletionQueue>,
    pub channel: Arc<CompletionChannel>,
    pub device: Arc<RdmaDevice>,
    pub dci_nums: Vec<u32>,
    pub path: DcPath,
    pub rd_atomic: u8,
    pub options: QpOptions,
    pub id: u64,
    pub selector: Mutex<DciSelector>,
    /// Notified whenever send queue entries free up or a DCI returns to service.
    pub sq_freed: Notify,
    pub table: Mutex<DcTable>,
    pub next_wr_id: AtomicU64,
    pub doorbells: AtomicU64,
    pub health: Mutex<Vec<DciHealth>>,
    pub shutdown: AtomicBool,
    wake: OwnedFd,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RdmaDevice {
    /// Creates `num_dcis` DC initiators in RTS (the pool `rdma.num_dcis` sizes), after checking
    /// [`RdmaDevice::dc_support`]; on a device without DC, [`RdmaError::DcUnavailable`].
    pub fn create_dci_pool(
        self: &Arc<Self>,
        num_dcis: u32,
        options: QpOptions,
    ) -> Result<DciPool, RdmaError> {
        let caps = require_dc(self)?;
        self.build_dci_pool(num_dcis, options, caps.max_dc_init_rd_atom)
    }

    /// [`RdmaDevice::create_dci_pool`] without the capability check, so that tests can drive
    /// the verbs failure path on devices without DC. Not for production use.
    #[doc(hidden)]
    pub fn create_dci_pool_unchecked(
        self: &Arc<Self>,
        num_dcis: u32,
        options: QpOptions,
    ) -> Result<DciPool, RdmaError> {
        self.build_dci_pool(num_dcis, options, self.limits().max_rd_atomic)
    }

    fn build_dci_pool(
        self: &Arc<Self>,
        num_dcis: u32,
        options: QpOptions,
        rd_atomic: u8,
    ) -> Result<DciPool, RdmaError> {
        if !(1..=MAX_DCIS).contains(&num_dcis) {
            return Err(RdmaError::InvalidArgument {
                name: "rdma.num_dcis",
                value: num_dcis.to_string(),
                limit: "a DCI pool has 1..=1024 initiators",
            });
        }
        let path = DcPath::for_device(self)?;
        let limits = self.limits();
        let (depth, cq_depth) = sizes(
            num_dcis,
            options.send_queue_depth.max(self.max_window()),
            limits.max_qp_wr,
            limits.max_cqe,
        )
        .ok_or(RdmaError::TooLarge {
            what: "rdma.num_dcis (one completion queue entry per initiator at least)",
            requested: u64::from(num_dcis),
            limit: u64::from(limits.max_cqe),
        })?;
        let (channel, cq) = crate::completion::notified_cq(self, cq_depth)?;
        let mut dcis = Vec::with_capacity(num_dcis as usize);
        for _ in 0..num_dcis {
            let qp = RawQp::create(self, &cq, DcRole::Initiator { depth })?;
            qp.initiator_to_rts(&path, &options, rd_atomic)?;
            dcis.push(Mutex::new(qp.into_initiator()?));
        }
        let dci_nums = dcis.iter().map(|d| lock(d).qp.qp_num()).collect();
        let core = Arc::new(PoolCore {
            dcis,
            cq,
            channel,
            device: self.clone(),
            dci_nums,
            path,
            rd_atomic,
            options,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            selector: Mutex::new(DciSelector::new(num_dcis as usize, depth)),
            sq_freed: Notify::new(),
            table: Mutex::new(DcTable::default()),
            next_wr_id: AtomicU64::new(1),
            doorbells: AtomicU64::new(0),
            health: Mutex::new((0..num_dcis).map(|_| DciHealth::default()).collect()),
            shutdown: AtomicBool::new(false),
            wake: wake_fd(self.name())?,
        });
        crate::dc::completion::spawn(core.clone())
            .map_err(|e| RdmaError::verbs("spawn DC completion thread", self.name(), &e))?;
        tracing::info!(
            device = self.name(),
            num_dcis,
            send_queue_depth = depth,
            "DC initiator pool ready"
        );
        Ok(DciPool { core })
    }
}

/// Per-DCI send queue depth and the shared CQ's depth: the CQ must hold a completion for every
/// entry of every send queue, so a device with a small CQ limit gets shallower send queues.
/// `None` when not even one entry per DCI fits.
pub(crate) fn sizes(
    num_dcis: u32,
    wanted_depth: u32,
    max_qp_wr: u32,
    max_cqe: u32,
) -> Option<(u32, u32)> {
    let num = num_dcis.max(1);
    let depth = wanted_depth.clamp(1, max_qp_wr.max(1)).min(max_cqe / num);
    (depth > 0).then(|| (depth, depth * num))
}

impl DciPool {
    pub fn num_dcis(&self) -> usize {
        self.core.dcis.len()
    }

    /// The queue pair numbers of the initiators.
    pub fn dci_qp_nums(&self) -> &[u32] {
        &self.core.dci_nums
    }

    pub fn device(&self) -> &Arc<RdmaDevice> {
        &self.core.device
    }

    /// How many chains of work requests were posted (one doorbell each).
    pub fn doorbells(&self) -> u64 {
        self.core.doorbells.load(Ordering::Relaxed)
    }

    /// Work requests posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        lock(&self.core.table).len()
    }

    /// Initiators out of service (broken, being flushed or failed to reset).
    pub fn broken_dcis(&self) -> usize {
        lock(&self.core.health)
            .iter()
            .filter(|h| h.broken.is_some())
            .count()
    }

    /// Builds the address handle towards the DC target a server advertised in `peer` (its
    /// `qp_num` is the DCT number), with the access key both sides derived. The fabric builds
    /// the address and refuses peers it cannot reach, as for RC.
    pub fn add_peer(&self, peer: &RdmaEndpoint, dc_key: u64) -> Result<DcPeer, RdmaError> {
        let core = &self.core;
        let device = &core.device;
        if !peer.dc_capable {
            return Err(RdmaError::BadPeerEndpoint {
                reason: "the peer does not offer DC".into(),
            });
        }
        // The RC check in peer_endpoint does not apply: a DC target needs no RC.
        let fabric_peer = peer_endpoint(&RdmaEndpoint {
            rc_capable: true,
            ..*peer
        })?;
        let plan = device.runtime().address_for(device.plan(), &fabric_peer)?;
        if plan.path_mtu.bytes() < core.path.mtu.bytes() {
            return Err(RdmaError::BadPeerEndpoint {
                reason: format!(
                    "path MTU {} towards the peer is below the {} bytes this pool's DC \
                     initiators use for every peer",
                    plan.path_mtu.bytes(),
                    core.path.mtu.bytes()
                ),
            });
        }
        let ah = RawAh::create(device, &plan)?;
        let infiniband = device.plan().facts.link_layer == LinkLayer::InfiniBand;
        Ok(DcPeer {
            ah,
            dct_num: peer.qp_num,
            dc_key,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            pool_id: core.id,
            window: device.peer_window(&peer_key(&fabric_peer, infiniband)),
            _device: device.clone(),
        })
    }

    /// Breaks every initiator: operations in flight end with [`RdmaError::QueuePairError`]
    /// (flushed); the initiators are reset and return to service once flushed.
    pub fn abort(&self, reason: &str) {
        for dci in 0..self.core.dcis.len() {
            self.core.break_dci(dci, reason);
        }
    }
}

impl Drop for DciPool {
    fn drop(&mut self) {
        self.core.shutdown.store(true, Ordering::Release);
        self.core.wake_thread();
    }
}

impl PoolCore {
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    pub fn channel_fd(&self) -> RawFd {
        self.channel.as_raw_fd()
    }

    /// Takes `dci` out of service and moves it to the error state, which flushes its requests.
    pub fn break_dci(&self, dci: usize, reason: &str) {
        {
            let mut health = lock(&self.health);
            let Some(h) = health.get_mut(dci) else { return };
            if h.broken.is_some() {
                return;
            }
            tracing::warn!(
                qp_num = self.dci_nums[dci],
                device = self.device.name(),
                "DC initiator broken: {reason}"
            );
            h.broken = Some(reason.to_owned());
            lock(&self.selector).mark_broken(dci);
        }
        if let Err(e) = lock(&self.dcis[dci]).qp.to_error() {
            tracing::error!(qp_num = self.dci_nums[dci], "{e}");
        }
        self.wake_thread();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_queues_shrink_to_fit_the_completion_queue() {
        assert_eq!(sizes(16, 256, 32_768, 4_194_303), Some((256, 4096)));
        assert_eq!(
            sizes(16, 256, 128, 4_194_303),
            Some((128, 2048)),
            "max_qp_wr"
        );
        assert_eq!(
            sizes(1024, 256, 32_768, 65_536),
            Some((64, 65_536)),
            "max_cqe"
        );
        assert_eq!(sizes(1024, 256, 32_768, 1000), None, "not one entry each");
        assert_eq!(sizes(0, 0, 0, 1), Some((1, 1)));
    }

    #[test]
    fn pools_and_peers_can_be_shared_between_threads() {
        fn check<T: Send + Sync>() {}
        check::<DciPool>();
        check::<DcPeer>();
    }
}
