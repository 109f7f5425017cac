//! `memkv net doctor`: every host check of the two fabric runbooks, each a pure function from
//! what was read to [`Finding`]s (OK / WARN / FAIL, what was read, the symptom, the fix).
//!
//! Reading goes through a [`HostRoot`] (`/` or a fixture tree) and a [`HostProbe`] (rtnetlink,
//! ethtool, journalctl, or the test double [`doubles::FixtureProbe`]); doctor never writes.

pub mod arp;
pub mod counters;
pub mod doubles;
pub mod finding;
pub mod gpudirect;
pub mod host;
pub mod neigh;
pub mod netlink;
pub mod pci;
pub mod rails;
pub mod report;
pub mod roce;
pub mod stack;

pub use arp::ServerRails;
pub use finding::{Finding, Status};
pub use host::{HostProbe, HostRoot, SystemProbe};
pub use rails::Rail;
pub use report::{DoctorReport, EXIT_DOCTOR_FAILURES, EXIT_DOCTOR_OK, EXIT_DOCTOR_WARNINGS};

use crate::config::FabricConfig;
use crate::dcb::{DcbDetection, DcbReply, DcbSource, interpret_reply};
use crate::discover::PortQuery;
use crate::error::FabricError;
use crate::policy::PortPlan;
use crate::show::{EXIT_DISCOVERY_FAILED, EXIT_NO_MATCHING_PORT, FabricSources, Planned, plan_all};
use crate::sysfs::SysfsReader;
use crate::types::LinkLayer;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;
use thiserror::Error;

/// Every check, with where the runbooks describe it (docs/fabric.md lists the same).
pub const CHECKS: &[(&str, &str)] = &[
    (
        "stack.kernel",
        "RoCE runbook: kernel 5.4 minimum, 6.15 or later preferred",
    ),
    (
        "stack.modules",
        "RoCE runbook: modprobe ib_core ib_uverbs rdma_cm mlx5_core; lsmod",
    ),
    (
        "stack.modules-boot",
        "RoCE runbook: /etc/modules-load.d/rdma.conf",
    ),
    (
        "stack.devices",
        "RoCE runbook: ibv_devinfo reports a device",
    ),
    (
        "stack.port-state",
        "RoCE runbook: PORT_ACTIVE; InfiniBand runbook: ibstat Active / LinkUp",
    ),
    (
        "stack.link-layer",
        "InfiniBand runbook: link layer InfiniBand with a LID, sminfo; RoCE: the GID net show picks",
    ),
    (
        "stack.pkey",
        "InfiniBand runbook: Partitions (pkey_index, membership)",
    ),
    (
        "stack.mtu",
        "InfiniBand runbook: MTU (configured mtu at most the active MTU)",
    ),
    ("stack.ib-subnet", "InfiniBand runbook: Same-subnet only"),
    (
        "roce.lossless",
        "InfiniBand runbook: Which knobs apply (credit flow control; DCB skipped on InfiniBand)",
    ),
    (
        "roce.pfc",
        "RoCE runbook: host QoS, mlnx_qos --pfc 0,0,0,1,0,0,0,0",
    ),
    (
        "roce.dscp",
        "RoCE runbook: host QoS, --trust dscp, --dscp2prio set,26,3",
    ),
    (
        "roce.traffic-class",
        "RoCE runbook: traffic class auto-detected over dcbnl, TC = DSCP << 2",
    ),
    (
        "roce.ecn",
        "RoCE runbook: DCQCN, ecn/roce_rp and roce_np enable/3 read 1",
    ),
    (
        "roce.boot-unit",
        "RoCE runbook: roce-lossless.service; journalctl -t roce-lossless",
    ),
    (
        "counters.watch",
        "RoCE runbook: read the counters under load",
    ),
    (
        "counters.nic",
        "RoCE runbook: ethtool -S prio3_pause rising, discard/drop/out_of_buffer flat, tx_prio3_bytes not tx_prio0_bytes",
    ),
    (
        "counters.rdma",
        "RoCE runbook: hw_counters out_of_buffer, packet_seq_err, local_ack_timeout_err flat",
    ),
    (
        "arp.sysctl",
        "RoCE runbook: ARP flux, arp_ignore=1 arp_announce=2 per rail (max of conf.all and conf.<rail>)",
    ),
    (
        "arp.static-neigh",
        "RoCE runbook: ARP flux, ip neigh show dev <rail> nud permanent",
    ),
    (
        "arp.rail-mac",
        "RoCE runbook: ARP flux, each peer address resolves to the MAC of the interface that owns it",
    ),
    (
        "arp.server",
        "RoCE runbook: ARP flux, the peer's own interfaces (ip -brief link/address), from /v1/status",
    ),
    (
        "gpudirect.topology",
        "RoCE runbook: GPU-Direct RDMA, nvidia-smi topo -m (PIX pairs)",
    ),
    (
        "gpudirect.iommu",
        "RoCE runbook: GPU-Direct RDMA, /proc/cmdline iommu",
    ),
    (
        "gpudirect.acs",
        "RoCE runbook: GPU-Direct RDMA, lspci -vvv ACSCtl (ReqRedir+ CmpltRedir+ DirectTrans-)",
    ),
    (
        "gpudirect.acs-unit",
        "RoCE runbook: disable-pcie-acs.service ran; journal ordering cycle",
    ),
];

/// Where doctor reads from.
pub struct DoctorSources<'a> {
    pub root: HostRoot,
    pub verbs: &'a dyn PortQuery,
    pub probe: &'a dyn HostProbe,
}

/// Command-line choices.
#[derive(Debug, Clone, Default)]
pub struct DoctorOptions {
    /// Only this RDMA device (its ports, rails and PCI function).
    pub device: Option<String>,
    /// Read counters twice, this far apart.
    pub watch: Option<Duration>,
    /// The server's rails, fetched by the caller from `/v1/status`.
    pub server: Option<ServerRails>,
    /// The fabric knobs memkv would run with (as `net show` takes them): the server's
    /// `rdma.*` settings on a server node, else the client's.
    pub config: FabricConfig,
    /// The client's knobs (`MEMKV_CONFIG`, `MEMKV_RDMA_*`) when they are read beside a
    /// server's `config`: where their P_Key index or MTU differ from `config`'s, the
    /// `stack.pkey` and `stack.mtu` checks run for them too, and where their service level,
    /// traffic class or GID index differ, the `roce.*` rail checks, on subjects marked
    /// `(client)`.
    pub client_config: Option<FabricConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DoctorError {
    #[error("no RDMA device {device}; devices here: {available}")]
    NoSuchDevice { device: String, available: String },
    #[error(transparent)]
    Fabric(#[from] FabricError),
}

impl DoctorError {
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::NoSuchDevice { .. } => EXIT_NO_MATCHING_PORT,
            Self::Fabric(_) => EXIT_DISCOVERY_FAILED,
        }
    }
}

/// DCB answers from the probe, each netdev asked once (planning and the checks share them).
struct ProbeDcb<'a> {
    probe: &'a dyn HostProbe,
    root: &'a HostRoot,
    replies: RefCell<HashMap<String, Result<DcbReply, String>>>,
}

impl ProbeDcb<'_> {
    fn reply(&self, netdev: &str) -> Result<DcbReply, String> {
        self.replies
            .borrow_mut()
            .entry(netdev.to_owned())
            .or_insert_with(|| self.probe.dcb(netdev))
            .clone()
    }
}

impl DcbSource for ProbeDcb<'_> {
    fn detect(&self, netdev: &str) -> DcbDetection {
        let port = crate::dcb::dcb_netdev(&self.root.path(crate::dcb::SYSFS_NET), netdev);
        match self.reply(&port) {
            Ok(reply) => interpret_reply(&port, reply),
            Err(reason) => DcbDetection::Failed { reason },
        }
    }
}

/// Runs every check. Reads only; with `watch`, sleeps between the two counter readings.
pub fn doctor(src: &DoctorSources<'_>, opts: &DoctorOptions) -> Result<DoctorReport, DoctorError> {
    let root = &src.root;
    let dcb = ProbeDcb {
        probe: src.probe,
        root,
        replies: RefCell::new(HashMap::new()),
    };
    let sources = FabricSources {
        sysfs: SysfsReader::new(root.path("/sys/class/infiniband")),
        verbs: src.verbs,
        dcb: &dcb,
    };
    let (mut plans, no_devices) = match plan_all(&sources, &opts.config)? {
        Planned::Ports(plans) => (plans, None),
        Planned::NoDevices { reason } => (Vec::new(), Some(reason)),
    };
    if let Some(device) = &opts.device {
        let available = available_devices(&plans);
        plans.retain(|p| &p.facts.device == device);
        if plans.is_empty() {
            return Err(DoctorError::NoSuchDevice {
                device: device.clone(),
                available,
            });
        }
    }
    let pci_devices = pci::devices(root);
    let mut checks = Vec::new();

    // RDMA stack.
    checks.push(stack::kernel(root));
    let mellanox_pci = pci_devices.iter().any(pci::PciDevice::is_mellanox_nic);
    checks.extend(stack::modules(root, &plans, mellanox_pci));
    checks.push(stack::devices(&plans, no_devices.as_deref()));
    for plan in &plans {
        checks.extend(stack::port(plan));
    }
    if let Some(client) = &opts.client_config
        && (client.pkey_index, client.mtu) != (opts.config.pkey_index, opts.config.mtu)
        && let Planned::Ports(client_plans) = plan_all(&sources, client)?
    {
        for plan in client_plans
            .iter()
            .filter(|p| opts.device.as_ref().is_none_or(|d| &p.facts.device == d))
        {
            checks.extend(stack::port_settings(plan, " (client)"));
        }
    }
    checks.extend(stack::subnets(&plans));

    // RoCE losslessness per rail; InfiniBand ports say why they are skipped.
    let rails = rails::rails_of(&plans, root);
    let journal = read_journal_if_needed(root, src.probe);
    let mut dcb_capable = roce_rails(&plans, &rails, root, &dcb, "", &mut checks);
    // A client's queue pairs send with its own knobs (it starts every one-sided transfer):
    // where they differ from the server's, its rails are judged too.
    if let Some(client) = &opts.client_config
        && roce_knobs(client) != roce_knobs(&opts.config)
        && let Planned::Ports(mut client_plans) = plan_all(&sources, client)?
    {
        client_plans.retain(|p| opts.device.as_ref().is_none_or(|d| &p.facts.device == d));
        let client_rails = rails::rails_of(&client_plans, root);
        dcb_capable |= roce_rails(
            &client_plans,
            &client_rails,
            root,
            &dcb,
            " (client)",
            &mut checks,
        );
    }
    if dcb_capable {
        checks.push(roce::boot_unit(root, journal.as_ref()));
    }

    // Counters, before and after.
    checks.extend(watch_counters(root, src.probe, &plans, &rails, opts.watch));

    // ARP flux.
    let neighbours = src.probe.neighbours();
    checks.push(arp::sysctls(root, &rails, &neighbours));
    checks.extend(arp::static_entries(&rails, &neighbours));
    if let Some(server) = &opts.server {
        checks.push(arp::server_report(server));
    }
    checks.extend(arp::rail_macs(&rails, &neighbours, opts.server.as_ref()));

    // GPUDirect and ACS.
    let nic_bdfs: Vec<String> = plans
        .iter()
        .filter_map(|p| pci::rdma_device_bdf(root, &p.facts.device))
        .collect();
    let topology = gpudirect::topology(&pci_devices, &nic_bdfs, opts.device.is_none());
    checks.push(gpudirect::topology_finding(&topology));
    if !topology.gpus.is_empty() {
        let (iommu_on, iommu) = gpudirect::iommu(root);
        checks.push(iommu);
        let acs = gpudirect::acs(root, &topology, iommu_on);
        let acs_problem = acs.iter().any(|f| f.status == Status::Fail);
        checks.extend(acs);
        // As the runbook confirms it ran: `journalctl -u disable-pcie-acs.service -b`.
        let unit_journal = root
            .exists(gpudirect::ACS_UNIT)
            .then(|| src.probe.unit_journal(gpudirect::ACS_UNIT_NAME));
        checks.push(gpudirect::acs_unit(
            root,
            journal.as_ref(),
            unit_journal.as_ref(),
            acs_problem,
        ));
    }

    Ok(DoctorReport {
        checks,
        watch_seconds: opts.watch.map(|w| w.as_secs()),
    })
}

/// The knobs the RoCE checks depend on.
fn roce_knobs(c: &FabricConfig) -> (Option<u8>, Option<u8>, Option<u32>) {
    (c.service_level, c.traffic_class, c.gid_index)
}

/// PFC, DSCP, traffic class and ECN of each RoCE rail of `plans`, each netdev once; `label`
/// follows each subject. InfiniBand ports say why they are skipped, once (for the unlabelled,
/// primary settings). Whether any rail answered DCB.
fn roce_rails(
    plans: &[PortPlan],
    rails: &[Rail],
    root: &HostRoot,
    dcb: &ProbeDcb<'_>,
    label: &str,
    checks: &mut Vec<Finding>,
) -> bool {
    let mut dcb_capable = false;
    let mut seen_netdevs = Vec::new();
    for plan in plans {
        if plan.facts.link_layer == LinkLayer::InfiniBand {
            if label.is_empty() {
                checks.push(roce::skipped_on_infiniband(plan));
            }
            continue;
        }
        let Some(rail) = rails
            .iter()
            .find(|r| r.device == plan.facts.device && r.port == plan.facts.port)
        else {
            continue;
        };
        let netdev = rail.lossless_netdev(root);
        if seen_netdevs.contains(&netdev) {
            continue;
        }
        let reply = dcb.reply(&netdev);
        dcb_capable |= matches!(reply, Ok(DcbReply::Ieee(_)));
        checks.extend(
            roce::rail(plan, &netdev, &reply, root)
                .into_iter()
                .map(|mut f| {
                    f.subject.push_str(label);
                    f
                }),
        );
        seen_netdevs.push(netdev);
    }
    dcb_capable
}

fn available_devices(plans: &[PortPlan]) -> String {
    let mut names: Vec<&str> = plans.iter().map(|p| p.facts.device.as_str()).collect();
    names.dedup();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The journal is read (once) only where a runbook unit is installed.
fn read_journal_if_needed(
    root: &HostRoot,
    probe: &dyn HostProbe,
) -> Option<Result<Vec<String>, String>> {
    let installed = root.exists(gpudirect::ACS_UNIT)
        || root.exists("/etc/systemd/system/roce-lossless.service");
    installed.then(|| probe.boot_journal(&["ordering cycle", "disable-pcie-acs", "roce-lossless"]))
}

fn watch_counters(
    root: &HostRoot,
    probe: &dyn HostProbe,
    plans: &[PortPlan],
    rails: &[Rail],
    watch: Option<Duration>,
) -> Vec<Finding> {
    let Some(watch) = watch else {
        return vec![counters::not_watched()];
    };
    let mut netdevs: Vec<String> = Vec::new();
    for rail in rails {
        let netdev = rail.lossless_netdev(root);
        if !netdevs.contains(&netdev) {
            netdevs.push(netdev);
        }
    }
    let ports: Vec<(String, u8)> = plans
        .iter()
        .map(|p| (p.facts.device.clone(), p.facts.port))
        .collect();
    let before = counters::read_snapshot(root, probe, &netdevs, &ports);
    std::thread::sleep(watch);
    let after = counters::read_snapshot(root, probe, &netdevs, &ports);
    let priority_of = |netdev: &str| {
        rails
            .iter()
            .find(|r| r.lossless_netdev(root) == netdev)
            .and_then(|r| {
                plans
                    .iter()
                    .find(|p| p.facts.device == r.device && p.facts.port == r.port)
            })
            .map_or(crate::dcb::select::PREFERRED_PRIORITY, roce::memkv_priority)
    };
    counters::judge(&before, &after, watch.as_secs(), &priority_of)
}
