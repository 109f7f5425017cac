//! TEST DOUBLE hosts for `net doctor`, written by `HostFixture` into scratch directories: each
//! models one good or bad state of the runbooks' checks. None of it was copied from a machine.
#![allow(dead_code)]

use memkv_fabric::FabricConfig;
use memkv_fabric::doctor::doubles::{FixtureProbe, HostFixture, RocePort};
use memkv_fabric::doctor::pci::config_with_acs;
use memkv_fabric::doctor::{
    DoctorOptions, DoctorReport, DoctorSources, HostRoot, Rail, ServerRails, doctor,
};
use memkv_fabric::doubles::FixtureVerbs;
use std::cell::Cell;
use std::path::{Path, PathBuf};

pub const NVIDIA: u16 = 0x10de;
pub const MELLANOX: u16 = 0x15b3;
pub const INTEL: u16 = 0x8086;
pub const CLASS_3D: u32 = 0x030200;
pub const CLASS_ETHERNET: u32 = 0x020000;
pub const CLASS_BRIDGE: u32 = 0x060400;
/// SrcValid+ UpstreamFwd+: what the runbook's one-shot leaves (no redirect).
pub const ACS_CLEAR: u16 = 0x0011;
/// SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ DirectTrans-: the runbook's problem state.
pub const ACS_REDIRECT: u16 = 0x001d;

/// A fresh scratch directory for one fixture host, under cargo's scratch folder for this test
/// target (`target/tmp`). It is named by the test (libtest names each test's thread after it)
/// and the number of hosts that test made before, not by the process, so a rerun replaces the
/// last run's trees instead of adding to them (`HostFixture::create` empties it first).
pub fn scratch(name: &str) -> PathBuf {
    thread_local!(static MADE: Cell<u32> = const { Cell::new(0) });
    let n = MADE.with(|made| made.replace(made.get() + 1));
    let test = std::thread::current()
        .name()
        .unwrap_or("main")
        .replace("::", "-");
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-{test}-{name}-{n}", env!("CARGO_CRATE_NAME")))
}
/// Runs doctor on a fixture tree.
pub fn run(root: &Path, opts: &DoctorOptions) -> DoctorReport {
    let verbs = FixtureVerbs::new(root.join("sys/class/infiniband"));
    let probe = FixtureProbe::new(root);
    let src = DoctorSources {
        root: HostRoot::new(root),
        verbs: &verbs,
        probe: &probe,
    };
    doctor(&src, opts).expect("doctor on a fixture host")
}

pub fn options() -> DoctorOptions {
    DoctorOptions {
        config: FabricConfig::default(),
        ..DoctorOptions::default()
    }
}

/// A PCIe switch under root port `00:<n>.0`: upstream port, one downstream port per endpoint.
/// Returns the downstream ports' parents lists for the endpoints.
pub fn switch(h: &HostFixture, n: u8, acs: u16) -> [Vec<String>; 2] {
    let root_port = format!("0000:00:{n:02x}.0");
    let bus = n * 0x10;
    let upstream = format!("0000:{bus:02x}:00.0");
    let down_a = format!("0000:{:02x}:00.0", bus + 1);
    let down_b = format!("0000:{:02x}:01.0", bus + 1);
    let cfg = config_with_acs(acs);
    h.pci(
        &[],
        &root_port,
        INTEL,
        CLASS_BRIDGE,
        &config_with_acs(ACS_CLEAR),
    );
    h.pci(&[&root_port], &upstream, 0x1000, CLASS_BRIDGE, &cfg);
    h.pci(
        &[&root_port, &upstream],
        &down_a,
        0x1000,
        CLASS_BRIDGE,
        &cfg,
    );
    h.pci(
        &[&root_port, &upstream],
        &down_b,
        0x1000,
        CLASS_BRIDGE,
        &cfg,
    );
    [
        vec![root_port.clone(), upstream.clone(), down_a],
        vec![root_port, upstream, down_b],
    ]
}

/// GPU and NIC `i` behind switch `i`; the NIC is RDMA device `mlx5_<i>` on `ens<i+1>f0np0`.
pub fn gpu_and_roce_nic(h: &HostFixture, i: u8, acs: u16, ipv4: &str, mac: &str) -> String {
    let [gpu_path, nic_path] = switch(h, i + 1, acs);
    let bus = (i + 1) * 0x10;
    let gpu = format!("0000:{:02x}:00.0", bus + 2);
    let nic = format!("0000:{:02x}:00.0", bus + 3);
    let gpu_parents: Vec<&str> = gpu_path.iter().map(String::as_str).collect();
    let nic_parents: Vec<&str> = nic_path.iter().map(String::as_str).collect();
    h.pci(&gpu_parents, &gpu, NVIDIA, CLASS_3D, &[0u8; 64]);
    h.pci(&nic_parents, &nic, MELLANOX, CLASS_ETHERNET, &[0u8; 64]);
    let device = format!("mlx5_{i}");
    let netdev = format!("ens{}f0np0", i + 1);
    h.roce_port(&RocePort {
        device: &device,
        netdev: &netdev,
        mac,
        ipv4: Some(ipv4),
        pci: Some(&nic),
        driver: "mlx5_core",
    });
    netdev
}

pub const MLX5_MODULES: [&str; 5] = ["ib_core", "ib_uverbs", "rdma_cm", "mlx5_core", "mlx5_ib"];

/// Two ConnectX RoCE rails, each with a GPU behind the same PCIe switch, configured as the
/// runbook says: every check OK.
pub fn roce_good() -> HostFixture {
    let h = HostFixture::create(scratch("roce-good")).unwrap();
    h.kernel("6.15.2-memkv");
    h.modules(&MLX5_MODULES, true);
    let a = gpu_and_roce_nic(&h, 0, ACS_CLEAR, "192.0.2.11", "02:00:00:00:01:01");
    let b = gpu_and_roce_nic(&h, 1, ACS_CLEAR, "198.51.100.11", "02:00:00:00:01:02");
    for nd in [&a, &b] {
        h.dcb(nd, "pfc 0,0,0,1,0,0,0,0\ndscp2prio 26,3\n");
        h.ecn(nd, 3, 1, 1);
    }
    h.arp_sysctls(&[&a, &b], 1, 2);
    h.neighbours(
        "192.0.2.21 dev ens1f0np0 lladdr 02:00:00:00:02:01 REACHABLE\n\
         198.51.100.21 dev ens2f0np0 lladdr 02:00:00:00:02:02 STALE\n\
         10.0.0.1 dev eno1 lladdr 02:00:00:00:00:fe PERMANENT\n",
    );
    h.file("/sys/class/iommu/dmar0/.keep", "");
    h.file(
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt\n",
    );
    h.file("/etc/systemd/system/roce-lossless.service", "[Unit]\n");
    h.file("/etc/systemd/system/disable-pcie-acs.service", "[Unit]\n");
    h.journal(
        "Jan 01 00:00:01 host systemd[1]: Starting disable-pcie-acs.service - Disable PCIe ACS Redirect...\n\
         Jan 01 00:00:01 host disable-pcie-acs[312]: ACS cleared on 0000:10:00.0 (was 001d)\n\
         Jan 01 00:00:01 host systemd[1]: Finished disable-pcie-acs.service - Disable PCIe ACS Redirect.\n",
    );
    h
}

/// The same host with every runbook mistake: old kernel, modules not at boot, PFC off on one
/// rail and no DSCP entry on the other, ECN off, default ARP sysctls, a permanent entry
/// pointing one rail's address at the other rail's MAC, ACS redirect with the IOMMU off, the
/// ACS one-shot dropped for an ordering cycle, no roce-lossless unit.
pub fn roce_bad() -> HostFixture {
    let h = HostFixture::create(scratch("roce-bad")).unwrap();
    h.kernel("5.15.0-91-generic");
    h.modules(&["ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib"], false);
    let a = gpu_and_roce_nic(&h, 0, ACS_REDIRECT, "192.0.2.11", "02:00:00:00:01:01");
    let b = gpu_and_roce_nic(&h, 1, ACS_CLEAR, "192.0.2.12", "02:00:00:00:01:02");
    h.dcb(&a, "pfc 0,0,0,0,0,0,0,0\ndscp2prio 26,3\n");
    h.dcb(&b, "pfc 0,0,0,1,0,0,0,0\n");
    h.ecn(&a, 3, 0, 1);
    h.ecn(&b, 3, 1, 1);
    h.arp_sysctls(&[&a, &b], 0, 0);
    h.neighbours(
        "192.0.2.12 dev ens1f0np0 lladdr 02:00:00:00:01:01 PERMANENT\n\
         192.0.2.21 dev ens1f0np0 lladdr 02:00:00:00:02:02 REACHABLE\n\
         192.0.2.22 dev ens2f0np0 lladdr 02:00:00:00:02:02 REACHABLE\n",
    );
    h.file(
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n",
    );
    h.file("/etc/systemd/system/disable-pcie-acs.service", "[Unit]\n");
    h.journal(
        "Jan 01 00:00:01 host systemd[1]: sysinit.target: Job disable-pcie-acs.service/start deleted to break ordering cycle starting with sysinit.target/start\n",
    );
    h
}

/// The server `roce_bad` talks to: two rails whose addresses this host's cache mixes up.
pub fn bad_server() -> ServerRails {
    ServerRails {
        server: "10.0.0.5:9900".into(),
        rails: Ok(vec![
            Rail {
                device: "mlx5_0".into(),
                port: 1,
                netdev: "ens1f0np0".into(),
                mac: Some("02:00:00:00:02:01".into()),
                ipv4: vec!["192.0.2.21".parse().unwrap()],
            },
            Rail {
                device: "mlx5_1".into(),
                port: 1,
                netdev: "ens2f0np0".into(),
                mac: Some("02:00:00:00:02:02".into()),
                ipv4: vec!["192.0.2.22".parse().unwrap()],
            },
        ]),
    }
}

/// Two InfiniBand ports: one with a LID, one the subnet manager has not reached; no GPUs.
pub fn infiniband() -> HostFixture {
    let h = HostFixture::create(scratch("ib")).unwrap();
    h.kernel("6.15.2-memkv");
    h.modules(&MLX5_MODULES, true);
    h.pci(&[], "0000:00:01.0", INTEL, CLASS_BRIDGE, &[0u8; 64]);
    h.pci(
        &["0000:00:01.0"],
        "0000:01:00.0",
        MELLANOX,
        0x020700,
        &[0u8; 64],
    );
    h.pci(
        &["0000:00:01.0"],
        "0000:01:00.1",
        MELLANOX,
        0x020700,
        &[0u8; 64],
    );
    h.ib_port("mlx5_0", Some(0x811f), 1, Some("0000:01:00.0"));
    h.ib_port("mlx5_1", None, 1, Some("0000:01:00.1"));
    h
}

/// Soft-RoCE as in testing/rxe-vm: two veth rails on one layer-2 domain, no DCB, no ethtool.
pub fn soft_roce(ignore: u8, announce: u8) -> HostFixture {
    let h = HostFixture::create(scratch("rxe")).unwrap();
    h.kernel("6.1.0-18-amd64");
    h.modules(&["ib_core", "ib_uverbs", "rdma_cm", "rdma_rxe"], false);
    for (dev, nd, ip, mac) in [
        ("rxe0", "vethA", "192.0.2.1", "02:00:00:00:00:0a"),
        ("rxe1", "vethB", "192.0.2.2", "02:00:00:00:00:0b"),
    ] {
        h.roce_port(&RocePort {
            device: dev,
            netdev: nd,
            mac,
            ipv4: Some(ip),
            pci: None,
            driver: "rdma_rxe",
        });
        h.file(
            &format!("/sys/class/infiniband/{dev}/ports/1/verbs/active_mtu"),
            "1024\n",
        );
    }
    h.arp_sysctls(&["vethA", "vethB"], ignore, announce);
    h.neighbours("192.0.2.2 dev vethA lladdr 02:00:00:00:00:0b REACHABLE\n");
    h
}

/// Eight rails, eight GPUs, each pair behind its own PCIe switch: the performance host.
pub fn eight_rails() -> HostFixture {
    let h = HostFixture::create(scratch("eight")).unwrap();
    h.kernel("6.15.2-memkv");
    h.modules(&MLX5_MODULES, true);
    let mut rails = Vec::new();
    for i in 0..8u8 {
        let nd = gpu_and_roce_nic(
            &h,
            i,
            ACS_CLEAR,
            &format!("192.0.{}.11", 2 + i),
            &format!("02:00:00:00:01:{:02x}", i + 1),
        );
        h.dcb(&nd, "pfc 0,0,0,1,0,0,0,0\ndscp2prio 26,3\n");
        h.ecn(&nd, 3, 1, 1);
        h.ethtool(&nd, "NIC statistics:\n     rx_prio3_pause: 10\n     tx_prio3_bytes: 100\n     tx_prio0_bytes: 0\n     rx_discards_phy: 0\n");
        rails.push(nd);
    }
    let names: Vec<&str> = rails.iter().map(String::as_str).collect();
    h.arp_sysctls(&names, 1, 2);
    h.file("/sys/class/iommu/dmar0/.keep", "");
    h
}
