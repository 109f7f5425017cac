//! The server's RDMA fabric at start-up: which device and port it would serve RDMA on, or why
//! not. A refusal never stops the server: it logs the reason and serves every client over TCP.

use std::sync::Arc;

use memkv_fabric::doctor::{HostRoot, Rail};
use memkv_fabric::{Fabric, FabricConfig, FabricError, PortPlan, PortState, config::parse_mtu};
use memkv_rdma::{DcSupport, DcTarget, MemoryRegion, RdmaDevice, RemoteStaging};
use memkv_store::ArenaHandle;

use crate::admin::RdmaDeviceStatus;
use crate::config::RdmaConfig;
use crate::staging::Staging;

/// What clients' one-sided transfers reach.
pub enum RemoteMemory {
    /// Memory mode: the store's arena, registered as it is.
    Arena(ArenaHandle),
    /// Drive-backed modes: a staging region of `chunks` chunks of `chunk_size` bytes.
    Staging { chunk_size: usize, chunks: usize },
}

/// The device and the registered memory RDMA clients read and write.
pub struct RdmaServing {
    /// The DC target DC-capable clients reach the arena through (mlx5 devices that support
    /// DC); `None`: every client gets an RC queue pair. Dropped before the region and device.
    pub dc: Option<DcTarget>,
    /// Memory mode: the registered arena. Declared before `device`: the region is
    /// deregistered before the device closes.
    pub arena: Option<MemoryRegion>,
    /// Drive-backed modes: where values are staged (and its open transfers).
    pub staging: Option<Staging>,
    pub device: Arc<RdmaDevice>,
}

impl RdmaServing {
    /// The registered memory as Connect advertises it: `(address, rkey)`.
    pub fn window(&self) -> (u64, u32) {
        match (&self.arena, &self.staging) {
            (Some(arena), _) => (arena.addr(), arena.rkey()),
            (None, Some(staging)) => staging.window(),
            (None, None) => (0, 0),
        }
    }
}

/// What `/v1/status`, `/v1/health` and Connect report about RDMA. Its registration holds a
/// handle on the store's arena, so the arena stays mapped while it is registered.
pub struct RdmaState {
    pub serving: Option<RdmaServing>,
    pub active: bool,
    /// RDMA was wanted (enabled, and a device exists) but is not serving: health degrades.
    pub expected: bool,
    /// Why RDMA is not active; `None` when it is.
    pub reason: Option<String>,
    pub devices: Vec<RdmaDeviceStatus>,
    /// Kept alive so its event watchers keep LIDs and port states current.
    pub _fabric: Option<Fabric>,
}

impl RdmaState {
    fn inactive(
        reason: String,
        fabric: Option<Fabric>,
        devices: Vec<RdmaDeviceStatus>,
    ) -> RdmaState {
        RdmaState {
            serving: None,
            expected: !devices.is_empty(),
            active: false,
            reason: Some(reason),
            devices,
            _fabric: fabric,
        }
    }
}

impl RdmaState {
    /// `devices` with each port's state as the fabric's event watcher last saw it, not as it
    /// was read at start: a port error or a device's fatal error shows at once.
    pub fn devices_now(&self) -> Vec<RdmaDeviceStatus> {
        let mut devices = self.devices.clone();
        for d in &mut devices {
            if let Some(state) = self.port_state(&d.name, d.port) {
                d.state = format!("{state:?}");
            }
        }
        devices
    }

    /// Serving RDMA now: set up at start, and its port not down since (until it is active
    /// again, new queue pairs on it fail, so clients' values go over TCP).
    pub fn active_now(&self) -> bool {
        self.active && self.serving_port_down().is_none()
    }

    /// Why RDMA is not serving now; `None` when it is.
    pub fn reason_now(&self) -> Option<String> {
        self.reason.clone().or_else(|| {
            self.serving_port_down().map(|(device, port, state)| {
                format!("port {port} of {device} is {state:?} (it was active at start)")
            })
        })
    }

    fn serving_port_down(&self) -> Option<(String, u8, PortState)> {
        let device = self.serving.as_ref()?.device.name();
        let port = self.devices.iter().find(|d| d.name == device)?.port;
        let state = self.port_state(device, port)?;
        (!state.is_active()).then(|| (device.to_owned(), port, state))
    }

    fn port_state(&self, device: &str, port: u8) -> Option<PortState> {
        self._fabric.as_ref()?.runtime().state(device, port)
    }
}

/// Maps the `rdma.*` keys onto the fabric's knobs.
pub fn fabric_config(rdma: &RdmaConfig) -> Result<FabricConfig, String> {
    Ok(FabricConfig {
        service_level: rdma.service_level,
        traffic_class: rdma.traffic_class,
        gid_index: rdma.gid_index.map(u32::from),
        pkey_index: rdma.pkey_index,
        mtu: rdma
            .mtu
            .map(parse_mtu)
            .transpose()
            .map_err(|e| format!("rdma.mtu: {e}"))?,
    })
}

fn device_status(plan: &PortPlan) -> RdmaDeviceStatus {
    let rail = Rail::of_plan(plan, &HostRoot::default());
    RdmaDeviceStatus {
        name: plan.facts.device.clone(),
        port: plan.facts.port,
        link_layer: format!("{:?}", plan.facts.link_layer),
        state: format!("{:?}", plan.facts.state),
        qp_transport: "rc".to_owned(),
        netdev: rail.as_ref().map(|r| r.netdev.clone()),
        mac: rail.as_ref().and_then(|r| r.mac.clone()),
        ipv4: rail
            .map(|r| r.ipv4.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
    }
}

/// Discovers the configured device, checks its port against the runbooks' rules and, when it
/// passes, registers the memory arena on it (memory mode) or a staging region of the given
/// size (drive-backed modes). Blocking (sysfs, netlink, verbs, memory
/// registration): call it off the async runtime.
///
/// `dc_key` is the DC access key derived from the auth key (used when the device has DC).
///
/// Every refusal of the port leaves the server serving TCP only, with the reason, except one:
/// an explicit `rdma.mtu` above the port's active MTU is an error (the InfiniBand runbook:
/// "MemKV refuses to start when the configured mtu exceeds what the port negotiated, naming
/// both values"), returned as the message for a `rdma.mtu` configuration error.
pub fn bring_up(rdma: &RdmaConfig, remote: RemoteMemory, dc_key: u64) -> Result<RdmaState, String> {
    if let Some(n) = rdma.num_dcis {
        tracing::warn!(
            "rdma.num_dcis: {n} has no effect on a memkv server, which opens no DC initiators \
             (clients start every transfer and reach its DC target); clients size their pools \
             with num_dcis in their config or MEMKV_RDMA_NUM_DCIS"
        );
    }
    if !rdma.enabled {
        return Ok(RdmaState::inactive(
            "disabled by rdma.enabled: false".into(),
            None,
            Vec::new(),
        ));
    }
    let cfg = match fabric_config(rdma) {
        Ok(c) => c,
        Err(e) => return Ok(RdmaState::inactive(e, None, Vec::new())),
    };
    let fabric = match Fabric::start(&cfg, std::slice::from_ref(&rdma.device)) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(device = %rdma.device, error = %e, "RDMA not used; serving TCP only");
            return Ok(RdmaState::inactive(e.to_string(), None, Vec::new()));
        }
    };
    if let Some(why) = fabric.no_devices() {
        let reason = format!("no RDMA devices: {why}");
        tracing::info!("{reason}; serving TCP only");
        return Ok(RdmaState::inactive(reason, Some(fabric), Vec::new()));
    }
    let mut devices: Vec<RdmaDeviceStatus> = fabric.plans().iter().map(device_status).collect();
    let plan = match fabric.usable_port(Some(&rdma.device)) {
        Ok(plan) => plan.clone(),
        Err(e) => {
            if let Some(refusal) = mtu_refusal(fabric.plans(), &rdma.device) {
                tracing::error!("{refusal}");
                return Err(refusal);
            }
            let reason = format!("RDMA refused on {}: {e}", rdma.device);
            tracing::warn!("{reason}; serving TCP only");
            return Ok(RdmaState::inactive(reason, Some(fabric), devices));
        }
    };
    let device = match RdmaDevice::open(&fabric, Some(&plan.facts.device), Some(plan.facts.port)) {
        Ok(d) => d,
        Err(e) => {
            let reason = format!(
                "cannot open {} port {}: {e}",
                plan.facts.device, plan.facts.port
            );
            tracing::warn!("{reason}; serving TCP only");
            return Ok(RdmaState::inactive(reason, Some(fabric), devices));
        }
    };
    let (arena, staging, registered_bytes, registration_ms) = match remote {
        RemoteMemory::Arena(arena) => {
            let arena_bytes = arena.len();
            match device.register_store_arena(arena) {
                Ok(r) => {
                    let ms = r.registration_time().as_millis() as u64;
                    (Some(r), None, arena_bytes, ms)
                }
                Err(e) => {
                    let reason = format!(
                        "cannot register the {arena_bytes} byte arena on {}: {e}",
                        device.name()
                    );
                    tracing::warn!("{reason}; serving TCP only");
                    return Ok(RdmaState::inactive(reason, Some(fabric), devices));
                }
            }
        }
        RemoteMemory::Staging { chunk_size, chunks } => {
            let started = std::time::Instant::now();
            match RemoteStaging::new(&device, chunk_size, chunks) {
                Ok(region) => {
                    let bytes = region.len();
                    let ms = started.elapsed().as_millis() as u64;
                    (None, Some(Staging::new(region)), bytes, ms)
                }
                Err(e) => {
                    let reason = format!(
                        "cannot register the {} byte RDMA staging (rdma.staging_size) on {}: {e}",
                        chunk_size.saturating_mul(chunks),
                        device.name()
                    );
                    tracing::warn!("{reason}; serving TCP only");
                    return Ok(RdmaState::inactive(reason, Some(fabric), devices));
                }
            }
        }
    };
    let dc = dc_target(&device, dc_key);
    let transport = if dc.is_some() { "dc+rc" } else { "rc" };
    for d in devices
        .iter_mut()
        .filter(|d| d.name == device.name() && d.port == device.port())
    {
        d.qp_transport = transport.to_owned();
    }
    tracing::info!(
        device = device.name(),
        port = device.port(),
        registered_bytes,
        registration_ms,
        transport,
        staged = staging.is_some(),
        "RDMA serving: {} registered",
        if staging.is_some() {
            "staging"
        } else {
            "arena"
        }
    );
    Ok(RdmaState {
        serving: Some(RdmaServing {
            dc,
            arena,
            staging,
            device,
        }),
        active: true,
        expected: true,
        reason: None,
        devices,
        _fabric: Some(fabric),
    })
}

/// Why the server refuses to start on `device`: no port of it usable and one refused because
/// the configured MTU is above its active MTU (the message names both MTUs and the port).
fn mtu_refusal(plans: &[PortPlan], device: &str) -> Option<String> {
    plans
        .iter()
        .filter(|p| p.facts.device == device)
        .find_map(|p| match &p.mtu {
            Err(FabricError::MtuAboveActive { configured, active }) => Some(format!(
                "configured mtu {configured} exceeds the active MTU {active} of {} port {}; \
                 memkv refuses to start: set rdma.mtu to {active} or lower (or leave it unset \
                 for 4096 capped at the active MTU)",
                p.facts.device, p.facts.port
            )),
            _ => None,
        })
}

/// The device's DC target when it can do DC; otherwise (every non-mlx5 device, Soft-RoCE
/// included) `None` with the reason logged, and clients get RC queue pairs.
fn dc_target(device: &Arc<RdmaDevice>, dc_key: u64) -> Option<DcTarget> {
    match device.dc_support() {
        DcSupport::Unsupported(why) => {
            tracing::info!(device = device.name(), "DC not used ({why}); serving RC");
            None
        }
        DcSupport::Supported(_) => match device.create_dc_target(dc_key) {
            Ok(target) => Some(target),
            Err(e) => {
                tracing::warn!(
                    device = device.name(),
                    "DC target not created ({e}); serving RC"
                );
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged() -> RemoteMemory {
        RemoteMemory::Staging {
            chunk_size: 2 << 20,
            chunks: 4,
        }
    }

    #[test]
    fn this_host_has_no_rdma_and_says_so() {
        let state = bring_up(&RdmaConfig::default(), staged(), 0).unwrap();
        assert!(!state.active);
        let reason = state.reason.unwrap();
        // The build machines have no RDMA; inside the Soft-RoCE VM mlx5_0 does not exist.
        assert!(
            reason.contains("no RDMA devices") || reason.contains("mlx5_0"),
            "{reason}"
        );
    }

    #[test]
    fn disabled_in_config_is_reported_as_such() {
        let cfg = RdmaConfig {
            enabled: false,
            ..RdmaConfig::default()
        };
        let state = bring_up(&cfg, staged(), 0).unwrap();
        assert_eq!(
            state.reason.as_deref(),
            Some("disabled by rdma.enabled: false")
        );
    }

    #[test]
    fn knobs_map_onto_the_fabric_config() {
        let cfg = RdmaConfig {
            traffic_class: Some(106),
            service_level: Some(3),
            gid_index: Some(1),
            mtu: Some(1024),
            pkey_index: Some(1),
            ..RdmaConfig::default()
        };
        let f = fabric_config(&cfg).unwrap();
        assert_eq!(
            (f.traffic_class, f.service_level, f.gid_index, f.pkey_index),
            (Some(106), Some(3), Some(1), Some(1))
        );
        assert_eq!(f.mtu.map(|m| m.bytes()), Some(1024));
    }
}
