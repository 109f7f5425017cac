//! Rails: the RoCE netdevs under RDMA ports, with the IPv4 addresses and MAC that ARP resolves.
//! Shared by doctor and by the server, which reports its rails in `/v1/status`.

use super::host::HostRoot;
use crate::types::{LinkLayer, PortFacts};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// One RoCE rail: an RDMA port and the netdev carrying its traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rail {
    pub device: String,
    pub port: u8,
    pub netdev: String,
    /// Lower-case `aa:bb:cc:dd:ee:ff`, from `/sys/class/net/<netdev>/address`.
    pub mac: Option<String>,
    /// The netdev's IPv4 addresses, from the port's IPv4-mapped GIDs (the kernel adds one per
    /// address), so no address query is needed.
    pub ipv4: Vec<Ipv4Addr>,
}

impl Rail {
    /// The rail of a RoCE port; None on InfiniBand or when no netdev is bound to the port.
    pub fn of_port(facts: &PortFacts, root: &HostRoot) -> Option<Rail> {
        if facts.link_layer != LinkLayer::Ethernet {
            return None;
        }
        let netdev = facts
            .gids
            .iter()
            .find_map(|g| g.netdev.clone())
            .or_else(|| {
                root.list(&format!(
                    "/sys/class/infiniband/{}/device/net",
                    facts.device
                ))
                .into_iter()
                .next()
            })
            // Soft-RoCE devices have no PCI parent; rxe names its netdev in `parent`.
            .or_else(|| root.read(&format!("/sys/class/infiniband/{}/parent", facts.device)))?;
        let mut ipv4: Vec<Ipv4Addr> = facts
            .gids
            .iter()
            .filter(|g| g.netdev.as_deref().is_none_or(|n| n == netdev))
            .filter_map(|g| g.gid.ipv4())
            .collect();
        ipv4.sort();
        ipv4.dedup();
        let mac = root
            .read(&format!("/sys/class/net/{netdev}/address"))
            .map(|m| m.to_ascii_lowercase());
        Some(Rail {
            device: facts.device.clone(),
            port: facts.port,
            netdev,
            mac,
            ipv4,
        })
    }

    pub fn ipv4_text(&self) -> String {
        if self.ipv4.is_empty() {
            return "no IPv4".into();
        }
        self.ipv4
            .iter()
            .map(Ipv4Addr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Rails of several ports, one per netdev (two ports on one netdev are one rail).
pub fn rails_of(ports: &[&PortFacts], root: &HostRoot) -> Vec<Rail> {
    let mut rails: Vec<Rail> = Vec::new();
    for facts in ports {
        if let Some(rail) = Rail::of_port(facts, root)
            && !rails.iter().any(|r| r.netdev == rail.netdev)
        {
            rails.push(rail);
        }
    }
    rails
}
