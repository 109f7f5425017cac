//! Rails: the RoCE netdevs under RDMA ports, with the IPv4 addresses and MAC that ARP resolves.
//! Shared by doctor and by the server, which reports its rails in `/v1/status`.

use super::host::HostRoot;
use crate::gid::{GidChoice, choose_gid};
use crate::policy::PortPlan;
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
    /// address), so no address query is needed. They include the address memkv sends from.
    pub ipv4: Vec<Ipv4Addr>,
}

impl Rail {
    /// The rail of a RoCE port, from the GID memkv picks without `rdma.gid_index`; None on
    /// InfiniBand or when no netdev is bound to the port. [`Rail::of_plan`] honours the index.
    pub fn of_port(facts: &PortFacts, root: &HostRoot) -> Option<Rail> {
        Self::of_gid(facts, choose_gid(facts, None).ok().as_ref(), root)
    }

    /// The rail of a planned RoCE port: the netdev and addresses of the GID the plan sends from.
    pub fn of_plan(plan: &PortPlan, root: &HostRoot) -> Option<Rail> {
        let gid = plan.gid.as_ref().and_then(|g| g.as_ref().ok());
        Self::of_gid(&plan.facts, gid, root)
    }

    /// Peers resolve the address of the GID memkv sends from, so that GID names the rail: on a
    /// VLAN it is the VLAN netdev, not the netdev of the port's first (link-local) GIDs.
    fn of_gid(facts: &PortFacts, gid: Option<&GidChoice>, root: &HostRoot) -> Option<Rail> {
        if facts.link_layer != LinkLayer::Ethernet {
            return None;
        }
        let netdev = gid
            .and_then(|g| g.netdev.clone())
            .or_else(|| facts.gids.iter().find_map(|g| g.netdev.clone()))
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
            .chain(gid.and_then(|g| g.gid.ipv4()))
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

    /// The netdev whose DCB, ECN and `ethtool -S` counters carry this rail's traffic
    /// ([`crate::dcb::dcb_netdev`]).
    pub fn lossless_netdev(&self, root: &HostRoot) -> String {
        crate::dcb::dcb_netdev(&root.path(crate::dcb::SYSFS_NET), &self.netdev)
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

/// Rails of several planned ports, one per netdev (two ports on one netdev are one rail).
pub fn rails_of(plans: &[PortPlan], root: &HostRoot) -> Vec<Rail> {
    let mut rails: Vec<Rail> = Vec::new();
    for plan in plans {
        if let Some(rail) = Rail::of_plan(plan, root)
            && !rails.iter().any(|r| r.netdev == rail.netdev)
        {
            rails.push(rail);
        }
    }
    rails
}
