//! The entry point for the server, client and RDMA data plane: discover and plan every port
//! once at startup, then keep LIDs and port states current from the async event queues.

use crate::config::FabricConfig;
use crate::error::FabricError;
use crate::events::{AsyncEventSource, EventWatcher, LidReader, PortRuntime};
use crate::policy::{AddressPlan, PeerEndpoint, PortPlan};
use crate::show::{FabricSources, Planned, log_plan, plan_all};
use crate::sysfs::SysfsReader;
use crate::verbs::VerbsReader;
use crate::verbs_events::VerbsEventSource;
use std::sync::Arc;

/// Planned ports plus their live state.
pub struct Fabric {
    plans: Vec<PortPlan>,
    runtime: Arc<PortRuntime>,
    watchers: Vec<EventWatcher>,
    no_devices: Option<String>,
}

impl Fabric {
    /// Starts on this machine. `devices` limits which devices are used (empty: all). A host
    /// without RDMA yields a `Fabric` with no ports and [`Fabric::no_devices`] set.
    pub fn start(cfg: &FabricConfig, devices: &[String]) -> Result<Self, FabricError> {
        let verbs = VerbsReader::new();
        let sources = FabricSources {
            sysfs: SysfsReader::default(),
            verbs: &verbs,
            dcb: &crate::dcb::NetlinkDcb,
        };
        let mut fabric = Self::plan(&sources, cfg, devices, Arc::new(SysfsReader::default()))?;
        let mut names: Vec<&str> = fabric
            .plans
            .iter()
            .map(|p| p.facts.device.as_str())
            .collect();
        names.dedup();
        let mut sources: Vec<Box<dyn AsyncEventSource>> = Vec::new();
        for device in names {
            match verbs
                .context(device)
                .and_then(|ctx| VerbsEventSource::new(device, ctx))
            {
                Ok(source) => sources.push(Box::new(source)),
                Err(e) => tracing::error!(
                    device,
                    "cannot watch async events ({e}); a reassigned LID will not be noticed"
                ),
            }
        }
        fabric.watch(sources);
        Ok(fabric)
    }

    /// Discovers, plans, logs and registers ports from the given sources, without watching
    /// events yet (see [`Fabric::watch`]).
    pub fn plan(
        sources: &FabricSources<'_>,
        cfg: &FabricConfig,
        devices: &[String],
        lid_reader: Arc<dyn LidReader>,
    ) -> Result<Self, FabricError> {
        let runtime = Arc::new(PortRuntime::new(lid_reader));
        let (plans, no_devices) = match plan_all(sources, cfg)? {
            Planned::NoDevices { reason } => {
                tracing::info!("no RDMA devices: {reason}; RDMA disabled");
                (Vec::new(), Some(reason))
            }
            Planned::Ports(plans) => (
                plans
                    .into_iter()
                    .filter(|p| devices.is_empty() || devices.contains(&p.facts.device))
                    .collect(),
                None,
            ),
        };
        for plan in &plans {
            log_plan(plan);
            runtime.register(plan);
        }
        Ok(Self {
            plans,
            runtime,
            watchers: Vec::new(),
            no_devices,
        })
    }

    /// Applies each source's events to the runtime on a background thread.
    pub fn watch(&mut self, sources: Vec<Box<dyn AsyncEventSource>>) {
        for source in sources {
            self.watchers
                .push(EventWatcher::spawn(source, self.runtime.clone()));
        }
    }

    pub fn plans(&self) -> &[PortPlan] {
        &self.plans
    }

    pub fn no_devices(&self) -> Option<&str> {
        self.no_devices.as_deref()
    }

    pub fn runtime(&self) -> &Arc<PortRuntime> {
        &self.runtime
    }

    /// Events applied so far by all watchers.
    pub fn events_applied(&self) -> u64 {
        self.watchers.iter().map(EventWatcher::applied).sum()
    }

    pub fn port(&self, device: &str, port: u8) -> Result<&PortPlan, FabricError> {
        self.plans
            .iter()
            .find(|p| p.facts.device == device && p.facts.port == port)
            .ok_or_else(|| FabricError::UnknownPort {
                device: device.to_owned(),
                port,
            })
    }

    /// The first port RDMA may use, on `device` or on any device. When none may, the error is
    /// the first port's refusal, so the log says why RDMA is off.
    pub fn usable_port(&self, device: Option<&str>) -> Result<&PortPlan, FabricError> {
        let candidates: Vec<&PortPlan> = self
            .plans
            .iter()
            .filter(|p| device.is_none_or(|d| d == p.facts.device))
            .collect();
        if let Some(p) = candidates.iter().find(|p| p.usable().is_ok()) {
            return Ok(p);
        }
        match candidates.first() {
            Some(p) => p.usable().map(|()| *p),
            None => Err(FabricError::NoRdmaPort {
                device: device.unwrap_or("any").to_owned(),
                reason: self
                    .no_devices
                    .clone()
                    .unwrap_or_else(|| "no such device".into()),
            }),
        }
    }

    /// What `device` `port` advertises to peers now.
    pub fn local_endpoint(&self, device: &str, port: u8) -> Result<PeerEndpoint, FabricError> {
        self.runtime.local_endpoint(self.port(device, port)?)
    }

    /// The address of `peer` from `device` `port`, with the current LID and port state.
    pub fn address_for(
        &self,
        device: &str,
        port: u8,
        peer: &PeerEndpoint,
    ) -> Result<AddressPlan, FabricError> {
        self.runtime.address_for(self.port(device, port)?, peer)
    }
}
