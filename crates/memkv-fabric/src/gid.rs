//! Source GID choice on RoCE ports.

use crate::config::ValueSource;
use crate::error::FabricError;
use crate::types::{Gid, GidEntry, GidType, PortFacts};
use serde::Serialize;

/// The GID a RoCE port sends from, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidChoice {
    pub index: u32,
    pub gid: Gid,
    pub gid_type: GidType,
    pub netdev: Option<String>,
    pub reason: String,
    pub source: ValueSource,
}

fn choice(entry: &GidEntry, reason: String, source: ValueSource) -> GidChoice {
    GidChoice {
        index: entry.index,
        gid: entry.gid,
        gid_type: entry.gid_type,
        netdev: entry.netdev.clone(),
        reason,
        source,
    }
}

fn netdev_name(entry: &GidEntry) -> &str {
    entry.netdev.as_deref().unwrap_or("its netdev")
}

/// `rdma.gid_index` wins; otherwise the lowest-index RoCE v2 GID holding an IPv4 address, then
/// one holding a global IPv6 address. Link-local GIDs are never chosen by default: they carry no
/// configured address and cannot cross a router, so a port with nothing else is refused.
pub fn choose_gid(facts: &PortFacts, configured: Option<u32>) -> Result<GidChoice, FabricError> {
    if let Some(index) = configured {
        let entry = facts
            .gid(index)
            .ok_or_else(|| FabricError::GidIndexNotPopulated {
                index,
                device: facts.device.clone(),
                port: facts.port,
            })?;
        return Ok(choice(
            entry,
            format!("{} GID set by gid_index", entry.gid_type),
            ValueSource::Config,
        ));
    }
    let v2 = || facts.gids.iter().filter(|g| g.gid_type == GidType::RoceV2);
    if let Some(entry) = v2().find(|g| g.gid.ipv4().is_some()) {
        let addr = entry.gid.ipv4().map(|a| a.to_string()).unwrap_or_default();
        return Ok(choice(
            entry,
            format!("RoCE v2 GID holding IPv4 {addr} of {}", netdev_name(entry)),
            ValueSource::Detected,
        ));
    }
    if let Some(entry) = v2().find(|g| !g.gid.is_link_local()) {
        return Ok(choice(
            entry,
            format!(
                "RoCE v2 GID holding IPv6 {} of {} (no IPv4 GID)",
                entry.gid,
                netdev_name(entry)
            ),
            ValueSource::Detected,
        ));
    }
    Err(FabricError::NoUsableGid {
        device: facts.device.clone(),
        port: facts.port,
    })
}
