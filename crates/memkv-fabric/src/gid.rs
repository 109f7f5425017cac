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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LinkLayer, test_port};

    const V1: GidType = GidType::RoceV1;
    const V2: GidType = GidType::RoceV2;

    #[test]
    fn ipv4_v2_beats_ipv6_v2_and_v1_entries() {
        let f = test_port(
            LinkLayer::Ethernet,
            &[
                (0, "fe80::1", V2),
                (1, "::ffff:10.0.0.1", V1),
                (2, "2001:db8::1", V2),
                (4, "::ffff:10.0.0.1", V2),
            ],
            &[0xffff],
        );
        let c = choose_gid(&f, None).unwrap();
        assert_eq!((c.index, c.source), (4, ValueSource::Detected));
        assert!(c.reason.contains("IPv4 10.0.0.1 of eth0"), "{}", c.reason);
    }

    #[test]
    fn ipv6_is_the_fallback_and_link_local_is_never_chosen() {
        let f = test_port(
            LinkLayer::Ethernet,
            &[
                (0, "fe80::1", V2),
                (1, "::ffff:10.0.0.1", V1),
                (3, "2001:db8::1", V2),
            ],
            &[0xffff],
        );
        assert_eq!(choose_gid(&f, None).unwrap().index, 3);
        let only_ll = test_port(LinkLayer::Ethernet, &[(0, "fe80::1", V2)], &[0xffff]);
        assert!(matches!(
            choose_gid(&only_ll, None),
            Err(FabricError::NoUsableGid { .. })
        ));
    }

    #[test]
    fn configured_index_wins_when_populated() {
        let f = test_port(LinkLayer::Ethernet, &[(0, "fe80::1", V2)], &[0xffff]);
        let c = choose_gid(&f, Some(0)).unwrap();
        assert_eq!((c.index, c.source), (0, ValueSource::Config));
        assert!(matches!(
            choose_gid(&f, Some(5)),
            Err(FabricError::GidIndexNotPopulated { index: 5, .. })
        ));
    }
}
