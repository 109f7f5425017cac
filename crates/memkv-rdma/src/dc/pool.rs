//! A pool of DC initiators on one device: its creation and the peers (DC targets) it sends
//! to. Taking a broken DCI out of service and back in is in `initiators`, the operations in
//! `ops`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memkv_fabric::LinkLayer;
use memkv_proto::connect::RdmaEndpoint;
use tokio::sync::Notify;

use crate::completion;
use crate::cq::NotifiedCq;
use crate::dc::capability::require_dc;
use crate::dc::handles::RawAh;
use crate::dc::initiators::{DciHealth, PoolCore, lock};
use crate::dc::selector::DciSelector;
use crate::dc::verbs::{DcPath, DcRole, RawQp};
use crate::device::RdmaDevice;
use crate::endpoint::{peer_endpoint, peer_key};
use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::options::QpOptions;
use crate::work_requests::WorkRequests;

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
        let cq = NotifiedCq::new(self, cq_depth)?;
        let mut dcis = Vec::with_capacity(num_dcis as usize);
        for _ in 0..num_dcis {
            let qp = RawQp::create(self, &cq.cq, DcRole::Initiator { depth })?;
            qp.initiator_to_rts(&path, &options, rd_atomic)?;
            dcis.push(Mutex::new(qp.into_initiator()?));
        }
        let work = WorkRequests::new(self.name(), options.op_deadline)?;
        let dci_nums = dcis.iter().map(|d| lock(d).qp.qp_num()).collect();
        let core = Arc::new(PoolCore {
            dcis,
            cq,
            device: self.clone(),
            dci_nums,
            path,
            rd_atomic,
            options,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            selector: Mutex::new(DciSelector::new(num_dcis as usize, depth)),
            sq_freed: Notify::new(),
            work,
            health: Mutex::new((0..num_dcis).map(|_| DciHealth::default()).collect()),
        });
        let name = format!("rdma-dci-{}", core.dci_nums[0]);
        completion::spawn(core.clone(), name)
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
        self.core.work.doorbells()
    }

    /// Work requests posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.core.work.in_flight()
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
        self.core.work.shut_down();
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
