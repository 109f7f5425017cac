//! Verbs reader: device list and port query through sideway, plus the raw calls sideway does
//! not wrap (P_Key query, mlx5 DC capability) through rdma-mummy-sys.

use crate::discover::{DeviceListing, PortQuery, VerbsPortAttrs};
use crate::error::FabricError;
use crate::types::{Mtu, PortState};
use rdma_mummy_sys::{
    ibv_query_pkey, mlx5dv_context, mlx5dv_context_comp_mask, mlx5dv_query_device,
};
use sideway::ibverbs::device::{DeviceInfo as _, DeviceList, GetDeviceListErrorKind};
use sideway::ibverbs::device_context::DeviceContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Reads ports through libibverbs; device contexts are opened once and kept.
#[derive(Default)]
pub struct VerbsReader {
    contexts: Mutex<HashMap<String, Arc<DeviceContext>>>,
}

impl VerbsReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens (or returns the already open) context of `device`.
    pub fn context(&self, device: &str) -> Result<Arc<DeviceContext>, FabricError> {
        let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ctx) = contexts.get(device) {
            return Ok(ctx.clone());
        }
        let verbs_err = |call, reason: String| FabricError::Verbs {
            call,
            device: device.to_owned(),
            reason,
        };
        let list =
            DeviceList::new().map_err(|e| verbs_err("ibv_get_device_list", e.to_string()))?;
        let found = list
            .iter()
            .find(|d| d.name() == device)
            .ok_or_else(|| verbs_err("ibv_get_device_list", "no such device in the list".into()))?;
        let ctx = found
            .open()
            .map_err(|e| verbs_err("ibv_open_device", e.0.to_string()))?;
        contexts.insert(device.to_owned(), ctx.clone());
        Ok(ctx)
    }

    /// Reads entry `index` of a port's P_Key table; `Ok(None)` when the index is past the end.
    pub fn query_pkey(
        &self,
        device: &str,
        port: u8,
        index: u16,
    ) -> Result<Option<u16>, FabricError> {
        let ctx = self.context(device)?;
        let mut pkey_be: u16 = 0;
        // SAFETY: `ctx` keeps the ibv_context open for the duration of the call, and
        // `pkey_be` is a valid, writable u16 that ibv_query_pkey fills in network byte order.
        let rc =
            unsafe { ibv_query_pkey(ctx.context().as_ptr(), port, i32::from(index), &mut pkey_be) };
        if rc == 0 {
            return Ok(Some(u16::from_be(pkey_be)));
        }
        // Depending on the rdma-core release the errno is returned, or -1 with errno set.
        let errno = if rc > 0 {
            rc
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        };
        match errno {
            libc::EINVAL | libc::ENOENT => Ok(None),
            e => Err(FabricError::Verbs {
                call: "ibv_query_pkey",
                device: device.to_owned(),
                reason: std::io::Error::from_raw_os_error(e).to_string(),
            }),
        }
    }
}

impl PortQuery for VerbsReader {
    fn device_list(&self) -> Result<DeviceListing, FabricError> {
        match DeviceList::new() {
            Ok(list) => Ok(DeviceListing::Devices(
                list.iter().map(|d| d.name()).collect(),
            )),
            Err(e) => {
                let io = match &e.0 {
                    GetDeviceListErrorKind::Ibverbs(io) => io,
                    _ => {
                        return Err(FabricError::Verbs {
                            call: "ibv_get_device_list",
                            device: "*".into(),
                            reason: e.to_string(),
                        });
                    }
                };
                match io.raw_os_error() {
                    Some(libc::ENOSYS) => Ok(DeviceListing::Unavailable(
                        "this kernel has no RDMA support (ibv_get_device_list: ENOSYS)".into(),
                    )),
                    // rdma-mummy-sys reports a missing libibverbs.so.1 as EOPNOTSUPP.
                    Some(libc::EOPNOTSUPP) => Ok(DeviceListing::Unavailable(
                        "libibverbs.so.1 could not be loaded (install rdma-core / libibverbs1)"
                            .into(),
                    )),
                    _ => Err(FabricError::Verbs {
                        call: "ibv_get_device_list",
                        device: "*".into(),
                        reason: io.to_string(),
                    }),
                }
            }
        }
    }

    fn port_attrs(&self, device: &str, port: u8) -> Result<VerbsPortAttrs, FabricError> {
        let ctx = self.context(device)?;
        let attr = ctx
            .query_port(port)
            .map_err(|e| FabricError::Verbs {
                call: "ibv_query_port",
                device: device.to_owned(),
                reason: e.to_string(),
            })?
            .attr;
        // Raw fields, converted here: sideway's own conversions panic on values a newer
        // kernel may report.
        let mtu = |code, what: &str| {
            Mtu::from_verbs(code).ok_or_else(|| FabricError::Verbs {
                call: "ibv_query_port",
                device: device.to_owned(),
                reason: format!("unknown {what} code {code}"),
            })
        };
        Ok(VerbsPortAttrs {
            active_mtu: mtu(attr.active_mtu, "active_mtu")?,
            max_mtu: mtu(attr.max_mtu, "max_mtu")?,
            state: PortState::from_code(attr.state),
            lid: Some(attr.lid).filter(|l| *l != 0),
        })
    }

    fn dc_supported(&self, device: &str) -> bool {
        // mlx5dv calls are only valid on mlx5 contexts.
        if !device.starts_with("mlx5_") {
            return false;
        }
        let Ok(ctx) = self.context(device) else {
            return false;
        };
        // SAFETY: mlx5dv_context is plain old data (integers and a pointer the call may set);
        // all-zero is a valid initial value.
        let mut attrs: mlx5dv_context = unsafe { std::mem::zeroed() };
        let asked = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM.0
            | mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DCI_STREAMS.0;
        attrs.comp_mask = u64::from(asked);
        // SAFETY: the context is an open mlx5 device context kept alive by `ctx`, and `attrs`
        // is a writable mlx5dv_context of the size this build's headers declare; the library
        // writes only the fields whose comp_mask bits it knows.
        let rc = unsafe { mlx5dv_query_device(ctx.context().as_ptr(), &mut attrs) };
        if rc != 0 {
            return false;
        }
        let got = |bit: u32| attrs.comp_mask & u64::from(bit) != 0;
        (got(mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM.0)
            && attrs.max_dc_rd_atom > 0)
            || (got(mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DCI_STREAMS.0)
                && attrs.dci_streams_caps.max_log_num_concurent > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a host without RDMA (this one: ENOSYS) the listing must read as zero devices, never
    /// as an error; on a host with RDMA it lists them.
    #[test]
    fn device_list_never_errors_for_missing_rdma() {
        match VerbsReader::new().device_list().unwrap() {
            DeviceListing::Unavailable(reason) => assert!(!reason.is_empty()),
            DeviceListing::Devices(_) => {}
        }
    }
}
