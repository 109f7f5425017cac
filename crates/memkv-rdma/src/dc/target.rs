//! The DC target of a server device: every client's DC initiators reach the arena through it.

use std::sync::Arc;

use memkv_proto::connect::RdmaEndpoint;
use sideway::ibverbs::completion::BasicCompletionQueue;

use crate::dc::capability::require_dc;
use crate::dc::handles::RawSrq;
use crate::dc::verbs::{DcPath, DcRole, RawQp};
use crate::device::RdmaDevice;
use crate::endpoint::advertise;
use crate::error::RdmaError;
use crate::options::QpOptions;

/// An SRQ and a DCT in RTR accepting remote READ and WRITE from initiators that present
/// `dc_key`. One per server device; it takes no work of its own (one-sided operations consume
/// no receives), so it has no completion thread.
pub struct DcTarget {
    // Field order is drop order: the DCT before its SRQ and CQ, all before the device.
    dct: RawQp,
    _srq: RawSrq,
    _cq: Arc<BasicCompletionQueue>,
    device: Arc<RdmaDevice>,
    dc_key: u64,
}

impl RdmaDevice {
    /// Creates this device's DC target with access key `dc_key`, after checking
    /// [`RdmaDevice::dc_support`]; on a device without DC, [`RdmaError::DcUnavailable`].
    pub fn create_dc_target(self: &Arc<Self>, dc_key: u64) -> Result<DcTarget, RdmaError> {
        require_dc(self)?;
        DcTarget::build(self, dc_key)
    }

    /// [`RdmaDevice::create_dc_target`] without the capability check, so that tests can drive
    /// the verbs failure path on devices without DC. Not for production use.
    #[doc(hidden)]
    pub fn create_dc_target_unchecked(
        self: &Arc<Self>,
        dc_key: u64,
    ) -> Result<DcTarget, RdmaError> {
        DcTarget::build(self, dc_key)
    }
}

impl DcTarget {
    fn build(device: &Arc<RdmaDevice>, dc_key: u64) -> Result<Self, RdmaError> {
        let path = DcPath::for_device(device)?;
        let cq = device
            .context()
            .create_cq_builder()
            .setup_cqe(1)
            .build()
            .map_err(|e| RdmaError::Verbs {
                call: "ibv_create_cq",
                device: device.name().to_owned(),
                errno: 0,
                reason: e.to_string(),
            })?;
        let srq = RawSrq::create(device)?;
        let dct = RawQp::create(
            device,
            &cq,
            DcRole::Target {
                srq: &srq,
                key: dc_key,
            },
        )?;
        dct.target_to_rtr(&path, &QpOptions::default())?;
        tracing::info!(
            device = device.name(),
            dct_num = dct.qp_num(),
            "DC target ready"
        );
        Ok(Self {
            dct,
            _srq: srq,
            _cq: cq,
            device: device.clone(),
            dc_key,
        })
    }

    /// The DCT number clients address (`mlx5dv_wr_set_dc_addr`).
    pub fn dct_num(&self) -> u32 {
        self.dct.qp_num()
    }

    pub fn dc_key(&self) -> u64 {
        self.dc_key
    }

    pub fn device(&self) -> &Arc<RdmaDevice> {
        &self.device
    }

    /// What the server sends in its Connect response when DC was chosen: the port's address,
    /// the DCT number as `qp_num`, `dc_capable` set, and the arena (`addr`, `rkey`). The key is
    /// not on the wire: both sides derive it.
    pub fn local_endpoint(&self, arena: Option<(u64, u32)>) -> Result<RdmaEndpoint, RdmaError> {
        let device = &self.device;
        let local = device.runtime().local_endpoint(device.plan())?;
        let pkey_index = device.plan().pkey.as_ref().map(|p| p.index).unwrap_or(0);
        Ok(RdmaEndpoint {
            dc_capable: true,
            ..advertise(&local, pkey_index, self.dct_num(), 0, arena)
        })
    }
}
