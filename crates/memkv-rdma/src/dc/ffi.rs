//! Raw pointers and zeroed attribute structs for the mlx5dv and verbs calls behind DC, shared
//! by the queue pairs (`verbs`) and the SRQs and address handles (`handles`).

use rdma_mummy_sys::{ibv_ah_attr, ibv_qp_attr, ibv_qp_state};

use crate::device::RdmaDevice;
use crate::error::RdmaError;

pub(crate) fn context_ptr(device: &RdmaDevice) -> *mut rdma_mummy_sys::ibv_context {
    // SAFETY: the pointer is only used while `device` (which owns the context) is alive.
    unsafe { device.context().context() }.as_ptr()
}

pub(crate) fn pd_ptr(device: &RdmaDevice) -> *mut rdma_mummy_sys::ibv_pd {
    // SAFETY: the pointer is only used while `device` (which owns the PD) is alive.
    unsafe { device.pd().pd() }.as_ptr()
}

pub(crate) fn blank_attr(state: ibv_qp_state::Type) -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain C data; all-zero is a valid value.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = state;
    attr
}

pub(crate) fn av(port: u8, dlid: u16, sl: u8) -> ibv_ah_attr {
    // SAFETY: ibv_ah_attr is plain C data; all-zero is a valid value.
    let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
    attr.port_num = port;
    attr.dlid = dlid;
    attr.sl = sl;
    attr
}

pub(crate) fn sgid_index(index: u32) -> Result<u8, RdmaError> {
    u8::try_from(index).map_err(|_| RdmaError::InvalidArgument {
        name: "gid_index",
        value: index.to_string(),
        limit: "verbs address handles take a GID index of 0..=255",
    })
}
