//! The SRQ a DC target needs and the address handles DC initiators send through, each owned
//! by a value that destroys it when dropped.

use std::ptr::NonNull;

use memkv_fabric::AddressPlan;
use rdma_mummy_sys::{ibv_ah, ibv_gid, ibv_srq, ibv_srq_init_attr};

use crate::dc::ffi::{av, pd_ptr, sgid_index};
use crate::device::RdmaDevice;
use crate::error::RdmaError;

/// A shared receive queue for a DC target. One-sided operations consume no receive entries,
/// so it stays empty; mlx5 requires one all the same.
pub(crate) struct RawSrq {
    srq: NonNull<ibv_srq>,
    device: String,
}

// SAFETY: see RawQp; nothing is ever posted to this SRQ.
unsafe impl Send for RawSrq {}
// SAFETY: as above.
unsafe impl Sync for RawSrq {}

impl RawSrq {
    pub fn create(device: &RdmaDevice) -> Result<Self, RdmaError> {
        // SAFETY: plain C data; all-zero is a valid value.
        let mut attr: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = 1;
        attr.attr.max_sge = 1;
        // SAFETY: the protection domain is alive; `attr` outlives the call.
        let srq = unsafe { rdma_mummy_sys::ibv_create_srq(pd_ptr(device), &mut attr) };
        NonNull::new(srq)
            .map(|srq| Self {
                srq,
                device: device.name().to_owned(),
            })
            .ok_or_else(|| {
                RdmaError::verbs(
                    "ibv_create_srq",
                    device.name(),
                    &std::io::Error::last_os_error(),
                )
            })
    }
}

impl RawSrq {
    pub fn as_ptr(&self) -> *mut ibv_srq {
        self.srq.as_ptr()
    }
}

impl Drop for RawSrq {
    fn drop(&mut self) {
        // SAFETY: the SRQ is alive, and the DCT using it was dropped first (field order).
        let rc = unsafe { rdma_mummy_sys::ibv_destroy_srq(self.srq.as_ptr()) };
        if rc != 0 {
            tracing::error!(device = %self.device, errno = rc, "ibv_destroy_srq failed");
        }
    }
}

/// An address handle towards one DC target's port.
pub(crate) struct RawAh {
    ah: NonNull<ibv_ah>,
    device: String,
}

// SAFETY: an address handle is immutable after creation; posts only read it.
unsafe impl Send for RawAh {}
// SAFETY: as above.
unsafe impl Sync for RawAh {}

impl RawAh {
    pub fn create(device: &RdmaDevice, plan: &AddressPlan) -> Result<Self, RdmaError> {
        let mut attr = av(plan.port, plan.dest_lid, plan.service_level);
        if let Some(grh) = plan.grh {
            attr.is_global = 1;
            attr.grh.dgid = ibv_gid { raw: grh.dgid.0 };
            attr.grh.flow_label = grh.flow_label;
            attr.grh.sgid_index = sgid_index(grh.sgid_index)?;
            attr.grh.hop_limit = grh.hop_limit;
            attr.grh.traffic_class = grh.traffic_class;
        }
        // SAFETY: the protection domain is alive; `attr` is initialised and outlives the call.
        let ah = unsafe { rdma_mummy_sys::ibv_create_ah(pd_ptr(device), &mut attr) };
        NonNull::new(ah)
            .map(|ah| Self {
                ah,
                device: device.name().to_owned(),
            })
            .ok_or_else(|| {
                RdmaError::verbs(
                    "ibv_create_ah",
                    device.name(),
                    &std::io::Error::last_os_error(),
                )
            })
    }

    pub fn as_ptr(&self) -> *mut ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for RawAh {
    fn drop(&mut self) {
        // SAFETY: the handle is alive; operations using it completed (a peer outlives none).
        let rc = unsafe { rdma_mummy_sys::ibv_destroy_ah(self.ah.as_ptr()) };
        if rc != 0 {
            tracing::error!(device = %self.device, errno = rc, "ibv_destroy_ah failed");
        }
    }
}
