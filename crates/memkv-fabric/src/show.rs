//! `memkv net show` and startup planning: discover ports, plan each, report.

use crate::config::FabricConfig;
use crate::dcb::{DcbSource, NetlinkDcb};
use crate::discover::{Discovery, PortQuery, discover};
use crate::error::FabricError;
use crate::policy::{PortPlan, plan_port};
use crate::render::{render_json, render_no_devices, render_text};
use crate::report::PortReport;
use crate::sysfs::SysfsReader;
use crate::verbs::VerbsReader;
use thiserror::Error;

/// Exit code of `memkv net show` when the host has no RDMA devices (sysexits EX_UNAVAILABLE).
pub const EXIT_NO_RDMA_DEVICES: i32 = 69;
/// Exit code when `--device` / `--port` match no port (sysexits EX_USAGE).
pub const EXIT_NO_MATCHING_PORT: i32 = 64;
/// Exit code when discovery itself failed (unreadable sysfs, verbs error).
pub const EXIT_DISCOVERY_FAILED: i32 = 1;

/// `--device` / `--port` filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShowFilter {
    pub device: Option<String>,
    pub port: Option<u8>,
}

impl ShowFilter {
    fn matches(&self, plan: &PortPlan) -> bool {
        self.device
            .as_deref()
            .is_none_or(|d| d == plan.facts.device)
            && self.port.is_none_or(|p| p == plan.facts.port)
    }
}

/// Where facts come from. `FabricSources::system` is the real machine.
pub struct FabricSources<'a> {
    pub sysfs: SysfsReader,
    pub verbs: &'a dyn PortQuery,
    pub dcb: &'a dyn DcbSource,
}

/// Plans for every port, or why there are none.
#[derive(Debug, Clone)]
pub enum Planned {
    Ports(Vec<PortPlan>),
    NoDevices { reason: String },
}

/// Discovers and plans every port. Used at server/client startup and by `net show`.
pub fn plan_all(sources: &FabricSources<'_>, cfg: &FabricConfig) -> Result<Planned, FabricError> {
    Ok(match discover(&sources.sysfs, sources.verbs)? {
        Discovery::NoDevices { reason } => Planned::NoDevices { reason },
        Discovery::Ports(ports) => Planned::Ports(
            ports
                .into_iter()
                .map(|facts| plan_port(facts, cfg, sources.dcb))
                .collect(),
        ),
    })
}

/// Logs a plan the way startup reports it: warnings, ignored knobs, refusal.
pub fn log_plan(plan: &PortPlan) {
    let (device, port) = (&plan.facts.device, plan.facts.port);
    for knob in &plan.ignored {
        tracing::info!(%device, port, "ignoring {} = {}: {}", knob.key, knob.value, knob.reason);
    }
    for w in &plan.warnings {
        tracing::warn!(%device, port, "{w}");
    }
    match plan.refusal() {
        Some(e) => tracing::error!(%device, port, "RDMA refused on this port: {e}"),
        None => tracing::info!(
            %device,
            port,
            link_layer = %plan.facts.link_layer,
            transport = %plan.transport,
            service_level = plan.service_level.value,
            "RDMA port ready"
        ),
    }
}

/// The result of `net show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetShow {
    pub ports: Vec<PortReport>,
    /// Set when the host has no RDMA devices at all.
    pub no_devices: Option<String>,
}

impl NetShow {
    pub fn text(&self) -> String {
        match &self.no_devices {
            Some(reason) => render_no_devices(reason),
            None => render_text(&self.ports),
        }
    }

    pub fn json(&self) -> String {
        render_json(&self.ports, self.no_devices.as_deref())
    }

    /// 0, or [`EXIT_NO_RDMA_DEVICES`].
    pub fn exit_code(&self) -> i32 {
        if self.no_devices.is_some() {
            EXIT_NO_RDMA_DEVICES
        } else {
            0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShowError {
    #[error("no RDMA port matches{filter}; ports here: {available}")]
    NoMatchingPort { filter: String, available: String },
    #[error(transparent)]
    Fabric(#[from] FabricError),
}

impl ShowError {
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::NoMatchingPort { .. } => EXIT_NO_MATCHING_PORT,
            Self::Fabric(_) => EXIT_DISCOVERY_FAILED,
        }
    }
}

/// `net show` against the given sources.
pub fn net_show(
    sources: &FabricSources<'_>,
    cfg: &FabricConfig,
    filter: &ShowFilter,
) -> Result<NetShow, ShowError> {
    let plans = match plan_all(sources, cfg)? {
        Planned::NoDevices { reason } => {
            return Ok(NetShow {
                ports: Vec::new(),
                no_devices: Some(reason),
            });
        }
        Planned::Ports(plans) => plans,
    };
    let selected: Vec<PortReport> = plans
        .iter()
        .filter(|p| filter.matches(p))
        .map(PortReport::from)
        .collect();
    if selected.is_empty() {
        let mut text = String::new();
        if let Some(d) = &filter.device {
            text.push_str(&format!(" --device {d}"));
        }
        if let Some(p) = filter.port {
            text.push_str(&format!(" --port {p}"));
        }
        let available = plans
            .iter()
            .map(|p| format!("{} port {}", p.facts.device, p.facts.port))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ShowError::NoMatchingPort {
            filter: text,
            available,
        });
    }
    Ok(NetShow {
        ports: selected,
        no_devices: None,
    })
}

/// `net show` on this machine: `/sys/class/infiniband`, libibverbs and rtnetlink.
pub fn net_show_system(cfg: &FabricConfig, filter: &ShowFilter) -> Result<NetShow, ShowError> {
    let verbs = VerbsReader::new();
    let sources = FabricSources {
        sysfs: SysfsReader::default(),
        verbs: &verbs,
        dcb: &NetlinkDcb,
    };
    net_show(&sources, cfg, filter)
}
