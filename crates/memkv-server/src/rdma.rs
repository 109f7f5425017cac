//! The server's RDMA fabric at start-up: which device and port it would serve RDMA on, or why
//! not. A refusal never stops the server: it logs the reason and serves every client over TCP.

use memkv_fabric::{Fabric, FabricConfig, PortPlan, config::parse_mtu};

use crate::admin::RdmaDeviceStatus;
use crate::config::RdmaConfig;

/// What `/v1/status`, `/v1/health` and Connect report about RDMA.
pub struct RdmaState {
    pub active: bool,
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
            active: false,
            reason: Some(reason),
            devices,
            _fabric: fabric,
        }
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
    RdmaDeviceStatus {
        name: plan.facts.device.clone(),
        port: plan.facts.port,
        link_layer: format!("{:?}", plan.facts.link_layer),
        state: format!("{:?}", plan.facts.state),
        qp_transport: "rc".to_owned(),
    }
}

/// Discovers the configured device and decides whether RDMA can be served on it. Blocking
/// (sysfs, netlink, verbs): call it off the async runtime.
pub fn bring_up(rdma: &RdmaConfig) -> RdmaState {
    if !rdma.enabled {
        return RdmaState::inactive("disabled by rdma.enabled: false".into(), None, Vec::new());
    }
    let cfg = match fabric_config(rdma) {
        Ok(c) => c,
        Err(e) => return RdmaState::inactive(e, None, Vec::new()),
    };
    let fabric = match Fabric::start(&cfg, std::slice::from_ref(&rdma.device)) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(device = %rdma.device, error = %e, "RDMA not used; serving TCP only");
            return RdmaState::inactive(e.to_string(), None, Vec::new());
        }
    };
    if let Some(why) = fabric.no_devices() {
        let reason = format!("no RDMA devices: {why}");
        tracing::info!("{reason}; serving TCP only");
        return RdmaState::inactive(reason, Some(fabric), Vec::new());
    }
    let devices: Vec<RdmaDeviceStatus> = fabric.plans().iter().map(device_status).collect();
    let reason = match fabric.usable_port(Some(&rdma.device)) {
        Err(e) => format!("RDMA refused on {}: {e}", rdma.device),
        Ok(plan) => format!(
            "{} port {} passes the fabric checks, but {}",
            plan.facts.device,
            plan.facts.port,
            crate::state::RDMA_UNAVAILABLE
        ),
    };
    tracing::warn!("{reason}; serving TCP only");
    RdmaState::inactive(reason, Some(fabric), devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_no_rdma_and_says_so() {
        let state = bring_up(&RdmaConfig::default());
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
        assert_eq!(
            bring_up(&cfg).reason.as_deref(),
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
