//! An opened RDMA port: the fabric's plan for it, the verbs context and protection domain, the
//! port's limits, and the congestion windows of the peers reached through it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use memkv_fabric::events::PortRuntime;
use memkv_fabric::{Fabric, FabricError, PortPlan};
use sideway::ibverbs::device::{DeviceInfo as _, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::window::{
    CongestionWindow, DEFAULT_INITIAL_WINDOW, DEFAULT_MAX_WINDOW, DEFAULT_MIN_WINDOW,
};

/// A port memkv moves data through. Shared (`Arc`) by every region and queue pair made on it.
pub struct RdmaDevice {
    plan: PortPlan,
    runtime: Arc<PortRuntime>,
    pd: Arc<ProtectionDomain>,
    context: Arc<DeviceContext>,
    limits: PortLimits,
    windows: Mutex<HashMap<String, Arc<PeerWindow>>>,
    window_template: CongestionWindow,
}

/// What the device and port allow, read once at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortLimits {
    /// Largest message one work request may carry (`ibv_port_attr.max_msg_sz`; 8 MiB on rxe).
    pub max_msg_size: u32,
    /// Outstanding RDMA READs a queue pair may have, as initiator and as responder.
    pub max_rd_atomic: u8,
    /// Send queue depth limit (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Completion queue depth limit (`max_cqe`).
    pub max_cqe: u32,
}

impl RdmaDevice {
    /// Opens the port RDMA should use: `device`/`port` when given, otherwise the first usable
    /// port of the fabric plan. A port the fabric refused (empty P_Key entry, configured MTU
    /// above the active MTU, no usable GID, ...) comes back as [`RdmaError::Fabric`] carrying
    /// the fabric's own message.
    pub fn open(
        fabric: &Fabric,
        device: Option<&str>,
        port: Option<u8>,
    ) -> Result<Arc<RdmaDevice>, RdmaError> {
        let plan = choose_port(fabric, device, port)?.clone();
        let name = plan.facts.device.clone();
        let context = open_context(&name)?;
        let port_attr = context
            .query_port(plan.facts.port)
            .map_err(|e| RdmaError::Verbs {
                call: "ibv_query_port",
                device: name.clone(),
                errno: 0,
                reason: e.to_string(),
            })?
            .attr;
        let device_attr = context
            .query_device()
            .map_err(|e| RdmaError::Verbs {
                call: "ibv_query_device",
                device: name.clone(),
                errno: 0,
                reason: e.to_string(),
            })?
            .attr
            .orig_attr;
        let positive = |v: i32| u32::try_from(v).unwrap_or(0);
        let rd_atomic = positive(device_attr.max_qp_rd_atom)
            .min(positive(device_attr.max_qp_init_rd_atom))
            .clamp(1, 16);
        let limits = PortLimits {
            max_msg_size: port_attr.max_msg_sz.max(1),
            max_rd_atomic: rd_atomic as u8,
            max_qp_wr: positive(device_attr.max_qp_wr).max(1),
            max_cqe: positive(device_attr.max_cqe).max(1),
        };
        let pd = context.alloc_pd().map_err(|e| RdmaError::Verbs {
            call: "ibv_alloc_pd",
            device: name.clone(),
            errno: 0,
            reason: e.to_string(),
        })?;
        tracing::info!(
            device = %name,
            port = plan.facts.port,
            max_msg_size = limits.max_msg_size,
            max_rd_atomic = limits.max_rd_atomic,
            "RDMA data plane opened"
        );
        Ok(Arc::new(RdmaDevice {
            runtime: fabric.runtime().clone(),
            plan,
            pd,
            context,
            limits,
            windows: Mutex::new(HashMap::new()),
            // The window never admits more requests than one queue pair can hold.
            window_template: CongestionWindow::new(
                DEFAULT_INITIAL_WINDOW,
                DEFAULT_MIN_WINDOW,
                DEFAULT_MAX_WINDOW.min(limits.max_qp_wr).min(limits.max_cqe),
            ),
        }))
    }

    pub fn name(&self) -> &str {
        &self.plan.facts.device
    }

    pub fn port(&self) -> u8 {
        self.plan.facts.port
    }

    pub fn plan(&self) -> &PortPlan {
        &self.plan
    }

    pub fn limits(&self) -> PortLimits {
        self.limits
    }

    pub(crate) fn runtime(&self) -> &PortRuntime {
        &self.runtime
    }

    pub(crate) fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    pub(crate) fn context(&self) -> &Arc<DeviceContext> {
        &self.context
    }

    /// Most work requests the congestion window ever admits towards one peer.
    pub fn max_window(&self) -> u32 {
        self.window_template.max()
    }

    /// The congestion window towards `peer` (kept across reconnects to the same peer).
    pub fn peer_window(&self, peer: &str) -> Arc<PeerWindow> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows
            .entry(peer.to_owned())
            .or_insert_with(|| {
                Arc::new(PeerWindow::new(
                    peer.to_owned(),
                    self.window_template.clone(),
                ))
            })
            .clone()
    }
}

fn choose_port<'f>(
    fabric: &'f Fabric,
    device: Option<&str>,
    port: Option<u8>,
) -> Result<&'f PortPlan, FabricError> {
    match (device, port) {
        (Some(d), Some(p)) => {
            let plan = fabric.port(d, p)?;
            plan.usable()?;
            Ok(plan)
        }
        (device, None) => fabric.usable_port(device),
        (None, Some(p)) => {
            let candidates: Vec<&PortPlan> = fabric
                .plans()
                .iter()
                .filter(|plan| plan.facts.port == p)
                .collect();
            if let Some(plan) = candidates.iter().find(|plan| plan.usable().is_ok()) {
                return Ok(plan);
            }
            match candidates.first() {
                Some(plan) => plan.usable().map(|()| *plan),
                None => Err(FabricError::NoRdmaPort {
                    device: "any".into(),
                    reason: fabric
                        .no_devices()
                        .map_or_else(|| format!("no device has a port {p}"), str::to_owned),
                }),
            }
        }
    }
}

fn open_context(name: &str) -> Result<Arc<DeviceContext>, RdmaError> {
    let err = |call, reason: String| RdmaError::Verbs {
        call,
        device: name.to_owned(),
        errno: 0,
        reason,
    };
    let list = DeviceList::new().map_err(|e| err("ibv_get_device_list", e.to_string()))?;
    let device = list
        .iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| err("ibv_get_device_list", "no such device in the list".into()))?;
    device
        .open()
        .map_err(|e| err("ibv_open_device", e.to_string()))
}
