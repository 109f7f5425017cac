//! `net show` data: one serialisable record per port, built from a [`PortPlan`].

use crate::config::ValueSource;
use crate::dcb::DcbDetection;
use crate::error::FabricError;
use crate::policy::{IgnoredKnob, PortPlan};
use crate::types::{Gid, GidType, LinkLayer, Membership};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortReport {
    pub device: String,
    pub port: u8,
    pub link_layer: LinkLayer,
    /// InfiniBand only; None until the subnet manager assigns one.
    pub lid: Option<u16>,
    pub sm_lid: Option<u16>,
    pub state: String,
    pub phys_state: Option<String>,
    pub transport: String,
    /// RoCE only.
    pub gid: Option<GidReport>,
    pub pkey: PkeyReport,
    pub service_level: ServiceLevelReport,
    /// RoCE only.
    pub traffic_class: Option<TrafficClassReport>,
    /// RoCE only.
    pub dcb: Option<DcbDetection>,
    pub mtu: MtuReport,
    pub ignored: Vec<IgnoredKnob>,
    pub warnings: Vec<String>,
    /// Why RDMA is refused on this port; None when it is usable.
    pub refused: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidReport {
    pub index: Option<u32>,
    pub gid: Option<Gid>,
    pub gid_type: Option<GidType>,
    pub netdev: Option<String>,
    /// Why this GID, or why none could be chosen.
    pub reason: String,
    pub source: Option<ValueSource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PkeyReport {
    pub index: Option<u16>,
    /// The table entry, as `0xffff`.
    pub value: Option<String>,
    pub membership: Option<Membership>,
    pub source: Option<ValueSource>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceLevelReport {
    pub value: u8,
    pub meaning: String,
    pub source: ValueSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrafficClassReport {
    pub value: u8,
    pub dscp: u8,
    pub source: ValueSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MtuReport {
    pub active: Option<u32>,
    pub max: Option<u32>,
    pub configured: Option<u32>,
    /// What this side offers peers (path MTU = min with the peer's offer).
    pub effective: Option<u32>,
    pub error: Option<String>,
}

fn service_level_meaning(plan: &PortPlan) -> String {
    let sl = plan.service_level;
    match plan.facts.link_layer {
        LinkLayer::InfiniBand => "virtual lane, via the SM's SL-to-VL map".into(),
        LinkLayer::Ethernet => match (&plan.dcb, sl.source) {
            (Some(DcbDetection::Lossless { priority, .. }), _) if *priority == sl.value => {
                "lossless PFC priority".into()
            }
            (_, ValueSource::Default) => "PFC priority; best effort, no lossless class".into(),
            _ => "PFC priority".into(),
        },
    }
}

impl From<&PortPlan> for PortReport {
    fn from(plan: &PortPlan) -> Self {
        let f = &plan.facts;
        let gid = plan.gid.as_ref().map(|g| match g {
            Ok(c) => GidReport {
                index: Some(c.index),
                gid: Some(c.gid),
                gid_type: Some(c.gid_type),
                netdev: c.netdev.clone(),
                reason: c.reason.clone(),
                source: Some(c.source),
            },
            Err(e) => GidReport {
                index: None,
                gid: None,
                gid_type: None,
                netdev: plan.netdev().map(str::to_owned),
                reason: e.to_string(),
                source: None,
            },
        });
        let pkey = match &plan.pkey {
            Ok(p) => PkeyReport {
                index: Some(p.index),
                value: Some(format!("{:#06x}", p.pkey)),
                membership: Some(p.membership),
                source: Some(p.source),
                error: None,
            },
            Err(e) => PkeyReport {
                index: match e {
                    FabricError::PkeyEntryEmpty { index, .. }
                    | FabricError::PkeyIndexOutOfRange { index, .. } => Some(*index),
                    _ => None,
                },
                value: None,
                membership: None,
                source: None,
                error: Some(e.to_string()),
            },
        };
        let mtu = match &plan.mtu {
            Ok(m) => MtuReport {
                active: Some(m.active.bytes()),
                max: f.max_mtu.map(|m| m.bytes()),
                configured: m.configured.map(|c| c.bytes()),
                effective: Some(m.effective.bytes()),
                error: None,
            },
            Err(e) => MtuReport {
                active: f.active_mtu.map(|m| m.bytes()),
                max: f.max_mtu.map(|m| m.bytes()),
                configured: None,
                effective: None,
                error: Some(e.to_string()),
            },
        };
        PortReport {
            device: f.device.clone(),
            port: f.port,
            link_layer: f.link_layer,
            lid: f.lid,
            sm_lid: f.sm_lid,
            state: f.state.to_string(),
            phys_state: f.phys_state.clone(),
            transport: plan.transport.to_string(),
            gid,
            pkey,
            service_level: ServiceLevelReport {
                value: plan.service_level.value,
                meaning: service_level_meaning(plan),
                source: plan.service_level.source,
            },
            traffic_class: plan.traffic_class.map(|t| TrafficClassReport {
                value: t.value,
                dscp: t.value >> 2,
                source: t.source,
            }),
            dcb: plan.dcb.clone(),
            mtu,
            ignored: plan.ignored.clone(),
            warnings: plan.warnings.clone(),
            refused: plan.refusal().map(ToString::to_string),
        }
    }
}
