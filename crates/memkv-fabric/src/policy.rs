//! Per-port decisions made at startup ([`plan_port`]) and per-peer addressing
//! ([`build_address`]). Pure: all inputs are facts already read.

use crate::config::{FabricConfig, ValueSource};
use crate::dcb::{DcbDetection, DcbSource};
use crate::error::FabricError;
use crate::gid::{GidChoice, choose_gid};
use crate::mtu::{MtuChoice, resolve_mtu};
use crate::pkey::{PkeyChoice, resolve_pkey};
use crate::types::{GidType, LinkLayer, Membership, Mtu, PortFacts};
use serde::Serialize;

pub use crate::address::{AddressPlan, GrhPlan, PeerEndpoint, ROCE_HOP_LIMIT, build_address};

/// A value and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resolved<T> {
    pub value: T,
    pub source: ValueSource,
}

/// Queue pair transports the device offers memkv.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Transport {
    /// mlx5 with Dynamically Connected transport, plus RC.
    DcAndRc,
    Rc,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DcAndRc => "DC + RC (mlx5)",
            Self::Rc => "RC",
        })
    }
}

/// A knob set in configuration that has no meaning on this port's fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredKnob {
    pub key: &'static str,
    pub value: String,
    pub reason: &'static str,
}

/// Everything decided about one port at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlan {
    pub facts: PortFacts,
    pub transport: Transport,
    /// RoCE only: the source GID. `Err` refuses RDMA on the port.
    pub gid: Option<Result<GidChoice, FabricError>>,
    pub pkey: Result<PkeyChoice, FabricError>,
    pub mtu: Result<MtuChoice, FabricError>,
    pub service_level: Resolved<u8>,
    /// RoCE only.
    pub traffic_class: Option<Resolved<u8>>,
    /// RoCE only: what DCB detection found on the netdev.
    pub dcb: Option<DcbDetection>,
    pub ignored: Vec<IgnoredKnob>,
    pub warnings: Vec<String>,
    pub config_error: Option<FabricError>,
}

impl PortPlan {
    /// Why RDMA is refused on this port, if it is. Missing LIDs and inactive ports are not
    /// refusals: both can resolve while the process runs.
    pub fn refusal(&self) -> Option<&FabricError> {
        self.config_error
            .as_ref()
            .or(self.pkey.as_ref().err())
            .or(self.mtu.as_ref().err())
            .or(self.gid.as_ref().and_then(|g| g.as_ref().err()))
    }

    pub fn usable(&self) -> Result<(), FabricError> {
        self.refusal().map_or(Ok(()), |e| Err(e.clone()))
    }

    /// The netdev whose DCB settings apply (RoCE).
    pub fn netdev(&self) -> Option<&str> {
        match &self.gid {
            Some(Ok(g)) => g.netdev.as_deref(),
            _ => self.facts.gids.iter().find_map(|g| g.netdev.as_deref()),
        }
    }

    /// What this side advertises to peers. InfiniBand needs the LID from the runtime cache.
    pub fn local_endpoint(&self, lid: Option<u16>) -> Result<PeerEndpoint, FabricError> {
        self.usable()?;
        let lid = lid.filter(|l| *l != 0);
        let (gid, gid_index) = match (&self.gid, self.facts.link_layer) {
            (Some(Ok(g)), _) => (g.gid, g.index),
            (_, LinkLayer::InfiniBand) => {
                if lid.is_none() {
                    return Err(self.no_lid());
                }
                (self.facts.gid(0).map(|g| g.gid).unwrap_or_default(), 0)
            }
            (_, LinkLayer::Ethernet) => return Err(no_usable_gid(&self.facts)),
        };
        Ok(PeerEndpoint {
            lid: if self.facts.link_layer == LinkLayer::InfiniBand {
                lid
            } else {
                None
            },
            gid,
            gid_index,
            subnet_prefix: gid.subnet_prefix(),
            mtu: self
                .mtu
                .as_ref()
                .map(|m| m.effective)
                .unwrap_or(Mtu::DEFAULT),
            pkey_membership: self
                .pkey
                .as_ref()
                .map(|p| p.membership)
                .unwrap_or(Membership::Full),
        })
    }

    pub(crate) fn no_lid(&self) -> FabricError {
        FabricError::NoLid {
            device: self.facts.device.clone(),
            port: self.facts.port,
        }
    }
}

pub(crate) fn no_usable_gid(facts: &PortFacts) -> FabricError {
    FabricError::NoUsableGid {
        device: facts.device.clone(),
        port: facts.port,
    }
}

/// Decides transport, addressing and knobs for one port. `dcb` is consulted on RoCE only.
pub fn plan_port(facts: PortFacts, cfg: &FabricConfig, dcb: &dyn DcbSource) -> PortPlan {
    let mut warnings = Vec::new();
    let mut ignored = Vec::new();
    let transport = if facts.device_info.dc_supported && facts.device_info.is_mlx5(&facts.device) {
        Transport::DcAndRc
    } else {
        Transport::Rc
    };
    let pkey = resolve_pkey(&facts, cfg.pkey_index);
    let mtu = resolve_mtu(&facts, cfg.mtu);
    let configured_sl = cfg.service_level.map(|value| Resolved {
        value,
        source: ValueSource::Config,
    });
    let default_zero = Resolved {
        value: 0,
        source: ValueSource::Default,
    };
    if !facts.state.is_active() {
        warnings.push(format!(
            "{} port {} is {}; connections wait for PORT_ACTIVE",
            facts.device, facts.port, facts.state
        ));
    }
    let (gid, service_level, traffic_class, detection) = match facts.link_layer {
        LinkLayer::InfiniBand => {
            if facts.lid.is_none() {
                warnings.push(format!(
                    "the subnet manager has not assigned a LID to {} port {} yet; \
                     memkv keeps running and re-reads the LID on first use",
                    facts.device, facts.port
                ));
            }
            if let Some(tc) = cfg.traffic_class {
                ignored.push(IgnoredKnob {
                    key: "traffic_class",
                    value: tc.to_string(),
                    reason: "InfiniBand addresses by LID without a GRH",
                });
            }
            if let Some(gi) = cfg.gid_index {
                ignored.push(IgnoredKnob {
                    key: "gid_index",
                    value: gi.to_string(),
                    reason: "InfiniBand addresses by LID without a GRH",
                });
            }
            if let Some(sl) = cfg.service_level.filter(|sl| *sl != 0) {
                warnings.push(format!(
                    "service_level {sl} on InfiniBand selects a virtual lane through the SM's \
                     SL-to-VL map, not a PFC priority; keep it only if meant in InfiniBand terms"
                ));
            }
            (None, configured_sl.unwrap_or(default_zero), None, None)
        }
        LinkLayer::Ethernet => {
            let gid = choose_gid(&facts, cfg.gid_index);
            if let Some(g) = gid
                .as_ref()
                .ok()
                .filter(|g| g.source == ValueSource::Config)
            {
                if g.gid_type != GidType::RoceV2 {
                    warnings.push(format!(
                        "gid_index {} is a {} GID: not routable over IP, it reaches peers only \
                         within one layer-2 domain",
                        g.index, g.gid_type
                    ));
                } else if g.gid.is_link_local() {
                    warnings.push(format!(
                        "gid_index {} is a link-local GID: it cannot cross a router",
                        g.index
                    ));
                }
            }
            let netdev = match &gid {
                Ok(g) => g.netdev.clone(),
                Err(_) => facts.gids.iter().find_map(|g| g.netdev.clone()),
            };
            let detection = match &netdev {
                Some(nd) => dcb.detect(nd),
                None => DcbDetection::Failed {
                    reason: "no netdev is bound to this port's GIDs".into(),
                },
            };
            let nd_name = netdev.as_deref().unwrap_or("the port's netdev");
            let detected = detection.class();
            let needs_detection = cfg.service_level.is_none() || cfg.traffic_class.is_none();
            if needs_detection && let Some(w) = detection.warning(nd_name) {
                warnings.push(w);
            }
            let pick = |configured: Option<u8>, detected: Option<u8>| match (configured, detected) {
                (Some(value), _) => Resolved {
                    value,
                    source: ValueSource::Config,
                },
                (None, Some(value)) => Resolved {
                    value,
                    source: ValueSource::Detected,
                },
                (None, None) => default_zero,
            };
            let sl = pick(cfg.service_level, detected.map(|d| d.0));
            let tc = pick(cfg.traffic_class, detected.map(|d| d.1));
            if let (Some(value), DcbDetection::Lossless { priority, .. }) =
                (cfg.service_level, &detection)
                && value != *priority
            {
                warnings.push(format!(
                    "configured service_level {value} differs from the PFC-enabled priority \
                     {priority} on {nd_name}; traffic on it is not lossless"
                ));
            }
            (Some(gid), sl, Some(tc), Some(detection))
        }
    };
    PortPlan {
        facts,
        transport,
        gid,
        pkey,
        mtu,
        service_level,
        traffic_class,
        dcb: detection,
        ignored,
        warnings,
        config_error: cfg.validate().err(),
    }
}
