//! `net doctor` on TEST DOUBLE hosts (tests/doctor_hosts): each check's good and bad states, the
//! text and JSON compared with tests/fixtures/doctor/*.{txt,json} (`MEMKV_BLESS=1` rewrites
//! them after an intended change; review the diff), and the 8-rail timing.

mod common;
mod doctor_hosts;

use doctor_hosts::*;
use memkv_fabric::FabricConfig;
use memkv_fabric::doctor::arp::sysctl_stanza;
use memkv_fabric::doctor::counters::{CounterSnapshot, NicReading, PortReading, judge};
use memkv_fabric::doctor::doubles::{HostFixture, RocePort};
use memkv_fabric::doctor::{
    CHECKS, DoctorReport, EXIT_DOCTOR_FAILURES, EXIT_DOCTOR_OK, EXIT_DOCTOR_WARNINGS, Finding,
    HostRoot, Rail, Status,
};
use std::path::Path;
use std::time::{Duration, Instant};

fn check_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/doctor")
        .join(name);
    if std::env::var_os("MEMKV_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with MEMKV_BLESS=1 to create)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs from doctor output",
        path.display()
    );
}

fn snapshot(name: &str, report: &DoctorReport) {
    check_snapshot(&format!("{name}.txt"), &report.text());
    check_snapshot(&format!("{name}.json"), &report.json());
    let doc: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(doc["checks"].as_array().unwrap().len(), report.checks.len());
    assert_eq!(doc["exit_code"], report.exit_code());
}

fn find<'a>(r: &'a DoctorReport, check: &str, subject: &str) -> &'a Finding {
    r.checks
        .iter()
        .find(|f| f.check == check && f.subject == subject)
        .unwrap_or_else(|| panic!("no {check} for {subject} in\n{}", r.text()))
}

fn status(r: &DoctorReport, check: &str, subject: &str) -> Status {
    find(r, check, subject).status
}

#[test]
fn every_check_emitted_is_listed_with_its_source() {
    for report in [
        run(roce_good().root(), &options()),
        run(roce_bad().root(), &options()),
        run(infiniband().root(), &options()),
    ] {
        for f in &report.checks {
            assert!(
                CHECKS.iter().any(|(id, _)| *id == f.check),
                "{} not in CHECKS",
                f.check
            );
        }
    }
}

#[test]
fn a_host_configured_as_the_runbook_says_is_all_ok() {
    let h = roce_good();
    let r = run(h.root(), &options());
    assert_eq!(r.worst(), Status::Ok, "{}", r.text());
    assert_eq!(r.exit_code(), EXIT_DOCTOR_OK);
    assert!(
        find(&r, "roce.dscp", "ens1f0np0")
            .read
            .contains("DSCP 26 -> priority 3")
    );
    assert!(
        find(&r, "roce.traffic-class", "ens1f0np0")
            .read
            .contains("traffic class 104")
    );
    assert!(
        find(&r, "gpudirect.topology", "host")
            .read
            .contains("GPU 0000:12:00.0 - NIC 0000:13:00.0 via 0000:10:00.0")
    );
    assert!(
        find(&r, "gpudirect.acs", "0000:11:00.0")
            .read
            .contains("ReqRedir- CmpltRedir-")
    );
    snapshot("roce-good", &r);
}

#[test]
fn every_runbook_mistake_is_named_with_its_fix() {
    let h = roce_bad();
    let mut opts = options();
    opts.server = Some(bad_server());
    let r = run(h.root(), &opts);
    assert_eq!(r.exit_code(), EXIT_DOCTOR_FAILURES);
    assert_eq!(status(&r, "stack.kernel", "host"), Status::Warn);
    assert_eq!(status(&r, "stack.modules", "host"), Status::Warn);
    assert_eq!(status(&r, "stack.modules-boot", "host"), Status::Warn);
    let pfc = find(&r, "roce.pfc", "ens1f0np0");
    assert_eq!(pfc.status, Status::Fail);
    assert!(
        pfc.fix
            .contains(&"sudo mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0".to_owned()),
        "{:?}",
        pfc.fix
    );
    assert!(
        pfc.symptom
            .as_deref()
            .unwrap()
            .contains("IBV_WC_RETRY_EXC_ERR")
    );
    assert_eq!(status(&r, "roce.dscp", "ens2f0np0"), Status::Fail);
    assert_eq!(status(&r, "roce.traffic-class", "ens2f0np0"), Status::Fail);
    let ecn = find(&r, "roce.ecn", "ens1f0np0");
    assert_eq!(ecn.status, Status::Fail);
    assert!(
        ecn.fix.contains(
            &"echo 1 | sudo tee /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3".to_owned()
        )
    );
    assert_eq!(status(&r, "roce.boot-unit", "host"), Status::Warn);
    let sysctl = find(&r, "arp.sysctl", "ens1f0np0,ens2f0np0");
    assert_eq!(sysctl.status, Status::Warn);
    assert!(
        sysctl
            .fix
            .contains(&"net.ipv4.conf.ens2f0np0.arp_announce = 2".to_owned())
    );
    assert!(
        sysctl.read.contains("share a layer-2 domain"),
        "{}",
        sysctl.read
    );
    assert_eq!(status(&r, "arp.static-neigh", "ens1f0np0"), Status::Warn);
    let wrong: Vec<&Finding> = r
        .checks
        .iter()
        .filter(|f| f.check == "arp.rail-mac")
        .collect();
    assert_eq!(wrong.len(), 2, "{}", r.text());
    assert!(wrong[0].read.starts_with("192.0.2.12, the address of ens2f0np0 (MAC 02:00:00:00:01:02), resolves to 02:00:00:00:01:01, the MAC of ens1f0np0"), "{}", wrong[0].read);
    assert!(
        wrong[0]
            .fix
            .contains(&"sudo ip neigh del 192.0.2.12 dev ens1f0np0".to_owned())
    );
    assert!(
        wrong[1]
            .read
            .contains("192.0.2.21, the address of server 10.0.0.5:9900's ens1f0np0"),
        "{}",
        wrong[1].read
    );
    assert!(
        wrong[1]
            .read
            .contains("the MAC of server 10.0.0.5:9900's ens2f0np0"),
        "{}",
        wrong[1].read
    );
    let acs = find(&r, "gpudirect.acs", "0000:11:00.0");
    assert_eq!(acs.status, Status::Fail);
    assert!(
        acs.read
            .contains("ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-")
    );
    assert!(
        acs.symptom
            .as_deref()
            .unwrap()
            .contains("IBV_WC_REM_OP_ERR (completion status 11)")
    );
    assert!(acs.symptom.as_deref().unwrap().contains("the IOMMU is off"));
    assert!(
        acs.fix
            .contains(&"sudo setpci -s 0000:11:00.0 ECAP_ACS+6.w=0000".to_owned())
    );
    assert_eq!(status(&r, "gpudirect.acs", "0000:21:00.0"), Status::Ok);
    let unit = find(&r, "gpudirect.acs-unit", "host");
    assert_eq!(unit.status, Status::Fail);
    assert!(unit.read.contains("ordering cycle"));
    snapshot("roce-bad", &r);
}

#[test]
fn an_unreachable_server_fails_its_check() {
    let h = roce_good();
    let mut opts = options();
    opts.server = Some(memkv_fabric::doctor::ServerRails {
        server: "10.0.0.5:9900".into(),
        rails: Err("cannot connect: connection refused".into()),
    });
    let r = run(h.root(), &opts);
    assert_eq!(status(&r, "arp.server", "10.0.0.5:9900"), Status::Fail);
}

#[test]
fn infiniband_ports_skip_lossless_checks_and_need_a_lid() {
    let h = infiniband();
    let r = run(h.root(), &options());
    assert_eq!(status(&r, "stack.link-layer", "mlx5_0 port 1"), Status::Ok);
    let no_lid = find(&r, "stack.link-layer", "mlx5_1 port 1");
    assert_eq!(no_lid.status, Status::Fail);
    assert!(no_lid.fix[0].starts_with("sminfo"));
    assert_eq!(
        status(&r, "stack.port-state", "mlx5_1 port 1"),
        Status::Fail
    );
    assert!(
        find(&r, "roce.lossless", "mlx5_0 port 1")
            .read
            .contains("credit-based flow control")
    );
    assert!(!r.checks.iter().any(|f| f.check == "roce.pfc"));
    snapshot("infiniband", &r);
}

#[test]
fn device_filter_limits_the_ports_and_refuses_unknown_devices() {
    let h = infiniband();
    let mut opts = options();
    opts.device = Some("mlx5_0".into());
    let r = run(h.root(), &opts);
    assert!(
        !r.checks.iter().any(|f| f.subject.starts_with("mlx5_1")),
        "{}",
        r.text()
    );
    opts.device = Some("mlx5_9".into());
    let verbs = memkv_fabric::doubles::FixtureVerbs::new(h.root().join("sys/class/infiniband"));
    let probe = memkv_fabric::doctor::doubles::FixtureProbe::new(h.root());
    let src = memkv_fabric::doctor::DoctorSources {
        root: memkv_fabric::doctor::HostRoot::new(h.root()),
        verbs: &verbs,
        probe: &probe,
    };
    let err = memkv_fabric::doctor::doctor(&src, &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no RDMA device mlx5_9; devices here: mlx5_0, mlx5_1"
    );
    assert_eq!(err.exit_code(), memkv_fabric::EXIT_NO_MATCHING_PORT);
}

#[test]
fn soft_roce_rails_with_default_sysctls_warn_of_arp_flux() {
    let r = run(soft_roce(0, 0).root(), &options());
    let f = find(&r, "arp.sysctl", "vethA,vethB");
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.read
            .contains("vethA's neighbour cache holds vethB's address"),
        "{}",
        f.read
    );
    assert_eq!(f.fix[1], "net.ipv4.conf.vethA.arp_ignore = 1");
    assert_eq!(status(&r, "roce.pfc", "vethA"), Status::Warn);
    assert_eq!(r.exit_code(), EXIT_DOCTOR_WARNINGS);
    snapshot("soft-roce-default-sysctls", &r);
    let r = run(soft_roce(1, 2).root(), &options());
    assert_eq!(status(&r, "arp.sysctl", "vethA,vethB"), Status::Ok);
}

#[test]
fn conf_all_raises_the_effective_value() {
    let h = soft_roce(0, 0);
    h.sysctl("all", "arp_ignore", 1)
        .sysctl("all", "arp_announce", 2);
    let r = run(h.root(), &options());
    assert_eq!(
        status(&r, "arp.sysctl", "vethA,vethB"),
        Status::Ok,
        "{}",
        r.text()
    );
}

/// sysctl splits a key at every dot, so `net.ipv4.conf.ens1f0np0.100.arp_ignore` names no key
/// and the VLAN rail stays unprotected; sysctl.d(5) writes the name's dots as slashes.
#[test]
fn arp_sysctl_fix_escapes_dots_in_vlan_rail_names() {
    let stanza = sysctl_stanza(&["ens1f0np0.100"]);
    assert!(
        stanza.contains("net.ipv4.conf.ens1f0np0/100.arp_ignore = 1"),
        "{stanza}"
    );
    assert!(
        stanza.contains("net.ipv4.conf.ens1f0np0/100.arp_announce = 2"),
        "{stanza}"
    );
    assert!(
        !stanza.contains("net.ipv4.conf.ens1f0np0.100.arp_ignore"),
        "{stanza}"
    );
    assert!(
        stanza.contains("sudo ip neigh flush dev ens1f0np0.100"),
        "{stanza}"
    );
}

/// A port whose IPv4 lives on a VLAN: GID 0 is the link-local GID of ens1f0np0, GID 1 holds
/// 192.0.2.11 on ens1f0np0.100, the GID memkv sends from.
fn vlan_rail_host() -> HostFixture {
    let h = HostFixture::create(scratch("vlan-rail")).unwrap();
    h.roce_port(&RocePort {
        device: "mlx5_0",
        netdev: "ens1f0np0",
        mac: "02:00:00:00:01:01",
        ipv4: None,
        pci: None,
        driver: "mlx5_core",
    });
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    h.file(
        &format!("{port}/gids/1"),
        "0000:0000:0000:0000:0000:ffff:c000:020b\n",
    );
    h.file(&format!("{port}/gid_attrs/types/1"), "RoCE v2\n");
    h.file(&format!("{port}/gid_attrs/ndevs/1"), "ens1f0np0.100\n");
    h.file(
        "/sys/class/net/ens1f0np0.100/address",
        "02:00:00:00:01:01\n",
    );
    h.symlink(
        "/sys/class/net/ens1f0np0.100/lower_ens1f0np0",
        "/sys/class/net/ens1f0np0",
    );
    h
}

#[test]
fn rail_includes_the_address_of_the_gid_memkv_sends_from() {
    let h = vlan_rail_host();
    let plans = common::plans_at(
        &h.root().join("sys/class/infiniband"),
        &FabricConfig::default(),
    );
    let plan = &plans[0];
    assert_eq!(plan.netdev(), Some("ens1f0np0.100"));
    let root = HostRoot::new(h.root());
    let rail = Rail::of_port(&plan.facts, &root).expect("a RoCE rail");
    assert_eq!(rail.netdev, "ens1f0np0.100");
    assert!(
        rail.ipv4.contains(&"192.0.2.11".parse().unwrap()),
        "rail {} has {:?}; memkv sends from 192.0.2.11 on {:?}",
        rail.netdev,
        rail.ipv4,
        plan.netdev()
    );
    assert_eq!(Rail::of_plan(plan, &root).as_ref(), Some(&rail));
}

/// ARP is judged on the VLAN netdev that owns the address; PFC, DSCP and ECN on the port below
/// it, where `mlnx_qos` configures them.
#[test]
fn a_vlan_rail_is_judged_by_its_address_and_its_lower_port() {
    let h = vlan_rail_host();
    h.dcb("ens1f0np0", "pfc 0,0,0,1,0,0,0,0\ndscp2prio 26,3\n");
    h.ecn("ens1f0np0", 3, 1, 1);
    let r = run(h.root(), &options());
    let arp = find(&r, "arp.sysctl", "host");
    assert!(
        arp.read
            .contains("one RoCE rail with IPv4 (ens1f0np0.100 192.0.2.11)"),
        "{}",
        arp.read
    );
    assert_eq!(status(&r, "roce.pfc", "ens1f0np0"), Status::Ok);
    assert_eq!(status(&r, "roce.ecn", "ens1f0np0"), Status::Ok);
    assert!(
        !r.checks
            .iter()
            .any(|f| f.check.starts_with("roce.") && f.subject == "ens1f0np0.100"),
        "{}",
        r.text()
    );
}

/// A VLAN device has no DCB of its own: the lossless priority memkv sends on is detected on
/// its lower port, where PFC is configured (it used to be asked of the VLAN device, fail, and
/// fall back to priority 3).
#[test]
fn a_vlan_rails_priority_is_detected_on_its_lower_port() {
    let h = vlan_rail_host();
    h.dcb("ens1f0np0", "pfc 0,0,0,0,0,1,0,0\ndscp2prio 34,5\n");
    h.ecn("ens1f0np0", 5, 1, 1);
    let r = run(h.root(), &options());
    let pfc = find(&r, "roce.pfc", "ens1f0np0");
    assert_eq!(pfc.status, Status::Ok, "{}", r.text());
    assert!(pfc.read.contains("priority 5"), "{}", pfc.read);
}

/// On RoCE `rdma.service_level` is the priority memkv's packets carry, so PFC on the detected
/// priority 3 does not make priority 5 lossless.
#[test]
fn roce_pfc_checks_the_configured_service_level_not_the_detected_one() {
    let h = roce_good();
    let mut opts = options();
    opts.config = FabricConfig {
        service_level: Some(5),
        ..FabricConfig::default()
    };
    let r = run(h.root(), &opts);
    let f = find(&r, "roce.pfc", "ens1f0np0");
    assert_eq!(f.status, Status::Fail, "{}", r.text());
    assert!(f.read.contains("PFC off on priority 5"), "{}", f.read);
    assert!(
        f.fix
            .iter()
            .any(|l| l.contains("remove rdma.service_level")),
        "{:?}",
        f.fix
    );
    assert!(
        find(&r, "roce.ecn", "ens1f0np0").read.contains("enable/5"),
        "{}",
        r.text()
    );
    opts.config.service_level = Some(3);
    let r = run(h.root(), &opts);
    assert_eq!(
        status(&r, "roce.pfc", "ens1f0np0"),
        Status::Ok,
        "{}",
        r.text()
    );
}

#[test]
fn shared_switch_pairs_are_found_and_cross_switch_pairs_are_not() {
    let r = run(roce_good().root(), &options());
    let topo = &find(&r, "gpudirect.topology", "host").read;
    assert!(topo.contains("2 NVIDIA GPUs, 2 RDMA NICs"), "{topo}");
    assert!(
        !topo.contains("GPU 0000:12:00.0 - NIC 0000:23:00.0"),
        "{topo}"
    );
}

#[test]
fn unreadable_extended_config_space_asks_for_root() {
    let h = roce_good();
    h.file(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:10:00.0/config",
        [0u8; 64],
    );
    let r = run(h.root(), &options());
    let f = find(&r, "gpudirect.acs", "0000:10:00.0");
    assert_eq!(f.status, Status::Warn);
    assert!(f.read.contains("only 64 bytes"), "{}", f.read);
}

#[test]
fn acs_one_shot_installed_but_not_run_warns() {
    let h = roce_good();
    h.journal("Jan 01 00:00:01 host kernel: nothing about it\n");
    let r = run(h.root(), &options());
    assert_eq!(status(&r, "gpudirect.acs-unit", "host"), Status::Warn);
}

/// The runbook's unit file, verbatim: systemd prints its Description when it reports the job
/// in the "description" status format.
const ACS_UNIT_FILE: &str = "[Unit]\n\
Description=Disable PCIe ACS Redirect on GPU/RDMA-NIC fabric for GPUDirect RDMA P2P\n\
After=sysinit.target\n\n[Service]\nType=oneshot\nExecStart=/usr/local/sbin/disable-pcie-acs.sh\n\
RemainAfterExit=yes\n\n[Install]\nWantedBy=multi-user.target\n";

/// RoCE runbook, ACS one-shot: "confirm the job actually ran: `sudo journalctl -u
/// disable-pcie-acs.service -b`. The output must show Starting and Finished lines for the
/// current boot". systemd with StatusUnitFormat=description (e.g. Ubuntu 22.04's systemd 249)
/// logs "Starting <Description>..." / "Finished <Description>." without the unit name; the
/// job is judged by the unit's journal, so a job that ran is OK.
#[test]
fn acs_one_shot_that_ran_is_ok_when_systemd_logs_only_its_description() {
    let h = roce_good();
    h.file(
        "/etc/systemd/system/disable-pcie-acs.service",
        ACS_UNIT_FILE,
    );
    let lines = "Jan 01 00:00:01 host systemd[1]: Starting Disable PCIe ACS Redirect on GPU/RDMA-NIC fabric for GPUDirect RDMA P2P...\n\
         Jan 01 00:00:01 host disable-pcie-acs[312]: ACS cleared on 0000:10:00.0 (was 001d)\n\
         Jan 01 00:00:01 host systemd[1]: Finished Disable PCIe ACS Redirect on GPU/RDMA-NIC fabric for GPUDirect RDMA P2P.\n";
    // The boot journal has the lines (none names the unit); `journalctl -u` selects them.
    h.journal(lines);
    h.unit_journal("disable-pcie-acs.service", lines);
    let report = run(h.root(), &options());
    let f = find(&report, "gpudirect.acs-unit", "host");
    assert_eq!(f.status, Status::Ok, "{}", report.text());
    assert!(
        f.read.contains("journalctl -u disable-pcie-acs.service -b"),
        "{}",
        f.read
    );
    assert_eq!(report.exit_code(), 0, "{}", report.text());

    // The unit's journal with Starting but no Finished: it did not complete.
    h.unit_journal(
        "disable-pcie-acs.service",
        "Jan 01 00:00:01 host systemd[1]: Starting Disable PCIe ACS Redirect on GPU/RDMA-NIC fabric for GPUDirect RDMA P2P...\n",
    );
    let report = run(h.root(), &options());
    assert_eq!(status(&report, "gpudirect.acs-unit", "host"), Status::Warn);

    // A job that failed says so, with its line.
    h.unit_journal(
        "disable-pcie-acs.service",
        "Jan 01 00:00:01 host systemd[1]: disable-pcie-acs.service: Failed with result 'exit-code'.\n\
         Jan 01 00:00:01 host systemd[1]: Failed to start Disable PCIe ACS Redirect on GPU/RDMA-NIC fabric for GPUDirect RDMA P2P.\n",
    );
    let report = run(h.root(), &options());
    let f = find(&report, "gpudirect.acs-unit", "host");
    assert_eq!(f.status, Status::Warn, "{}", report.text());
    assert!(f.read.contains("failed this boot"), "{}", f.read);
}

fn nic(netdev: &str, stats: &[(&str, u64)]) -> NicReading {
    NicReading {
        netdev: netdev.into(),
        ethtool: Ok(Some(
            stats.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        )),
        sysfs: vec![("rx_dropped".into(), 0)],
    }
}

fn port(hw: &[(&str, u64)]) -> PortReading {
    PortReading {
        device: "mlx5_0".into(),
        port: 1,
        hw: Some(hw.iter().map(|(n, v)| (n.to_string(), *v)).collect()),
        port_counters: vec![],
    }
}

fn snapshot_of(nics: Vec<NicReading>, ports: Vec<PortReading>) -> CounterSnapshot {
    CounterSnapshot { nics, ports }
}

#[test]
fn watched_counters_follow_the_runbook_polarity() {
    let before = snapshot_of(
        vec![nic(
            "ens1f0np0",
            &[
                ("rx_prio3_pause", 10),
                ("tx_prio3_bytes", 100),
                ("tx_prio0_bytes", 5),
                ("rx_discards_phy", 0),
            ],
        )],
        vec![port(&[
            ("out_of_buffer", 0),
            ("packet_seq_err", 0),
            ("local_ack_timeout_err", 0),
            ("sent_pkts", 0),
        ])],
    );
    // Pause rising on priority 3 and bytes on priority 3: good.
    let good = snapshot_of(
        vec![nic(
            "ens1f0np0",
            &[
                ("rx_prio3_pause", 90),
                ("tx_prio3_bytes", 9000),
                ("tx_prio0_bytes", 5),
                ("rx_discards_phy", 0),
            ],
        )],
        vec![port(&[
            ("out_of_buffer", 0),
            ("packet_seq_err", 0),
            ("local_ack_timeout_err", 0),
            ("sent_pkts", 500),
        ])],
    );
    let f = judge(&before, &good, 5, &|_| 3);
    assert!(f.iter().all(|f| f.status == Status::Ok), "{f:#?}");
    assert!(
        f[0].read
            .contains("rx_prio3_pause +80 (good: the fabric pauses instead of dropping)"),
        "{}",
        f[0].read
    );
    // Drops, sequence errors, and RDMA bytes on priority 0: three failures.
    let bad = snapshot_of(
        vec![nic(
            "ens1f0np0",
            &[
                ("rx_prio3_pause", 10),
                ("tx_prio3_bytes", 100),
                ("tx_prio0_bytes", 9000),
                ("rx_discards_phy", 7),
            ],
        )],
        vec![port(&[
            ("out_of_buffer", 0),
            ("packet_seq_err", 4),
            ("local_ack_timeout_err", 2),
            ("sent_pkts", 500),
        ])],
    );
    let f = judge(&before, &bad, 5, &|_| 3);
    assert_eq!(f[0].status, Status::Fail);
    assert!(
        f[0].read.contains("rising rx_discards_phy +7"),
        "{}",
        f[0].read
    );
    assert_eq!(f[1].status, Status::Fail);
    assert!(
        f[1].read
            .contains("local_ack_timeout_err +2, packet_seq_err +4"),
        "{}",
        f[1].read
    );
    // No drops, but RDMA moved while only priority 0 carried bytes: not classified.
    let unclassified = snapshot_of(
        vec![nic(
            "ens1f0np0",
            &[
                ("rx_prio3_pause", 10),
                ("tx_prio3_bytes", 100),
                ("tx_prio0_bytes", 9000),
                ("rx_discards_phy", 0),
            ],
        )],
        vec![port(&[
            ("out_of_buffer", 0),
            ("packet_seq_err", 0),
            ("local_ack_timeout_err", 0),
            ("sent_pkts", 500),
        ])],
    );
    let f = judge(&before, &unclassified, 5, &|_| 3);
    assert_eq!(f[0].status, Status::Fail);
    assert!(f[0].symptom.as_deref().unwrap().contains("not classified"));
}

fn hw_port(out_of_buffer: u64, xmit: u64) -> PortReading {
    PortReading {
        device: "mlx5_0".into(),
        port: 1,
        hw: Some(vec![
            ("out_of_buffer".into(), out_of_buffer),
            ("packet_seq_err".into(), 0),
        ]),
        port_counters: vec![("port_xmit_data".into(), xmit)],
    }
}

fn rdma_finding(before: PortReading, after: PortReading) -> Finding {
    let f = judge(
        &snapshot_of(vec![], vec![before]),
        &snapshot_of(vec![], vec![after]),
        10,
        &|_| 3,
    );
    f.into_iter()
        .find(|f| f.check == "counters.rdma")
        .expect("counters.rdma finding")
}

/// mlx5 hw_counters are 32-bit and wrap: 0xffff_fff0 -> 0x10 is 32 more drops, not a flat
/// counter.
#[test]
fn wrapped_32_bit_loss_counter_is_not_reported_flat() {
    let f = rdma_finding(hw_port(0xffff_fff0, 1_000), hw_port(0x10, 9_000));
    assert_eq!(f.status, Status::Fail, "{}", f.read);
    assert!(f.read.contains("rising out_of_buffer +32"), "{}", f.read);
}

/// A loss counter zeroed during the watch proves nothing either way: a warning that says so,
/// not four billion drops and not "flat".
#[test]
fn reset_loss_counter_warns_that_the_watch_proves_nothing() {
    let f = rdma_finding(hw_port(7, 1_000), hw_port(0, 9_000));
    assert_eq!(f.status, Status::Warn, "{}", f.read);
    assert!(
        f.read.contains("reset during the watch") && f.read.contains("out_of_buffer 7 -> 0"),
        "{}",
        f.read
    );
    assert!(!f.read.contains("flat: out_of_buffer"), "{}", f.read);
}

fn nic_reading(ethtool: Result<Option<&[(&str, u64)]>, String>, rx_dropped: u64) -> NicReading {
    NicReading {
        netdev: "ens1f0np0".into(),
        ethtool: ethtool.map(|e| e.map(|e| e.iter().map(|(n, v)| (n.to_string(), *v)).collect())),
        sysfs: vec![("rx_dropped".into(), rx_dropped)],
    }
}

fn nic_finding(before: NicReading, after: NicReading) -> Finding {
    let f = judge(
        &snapshot_of(vec![before], vec![]),
        &snapshot_of(vec![after], vec![]),
        10,
        &|_| 3,
    );
    f.into_iter()
        .find(|f| f.check == "counters.nic")
        .expect("counters.nic finding")
}

/// sysfs `rx_dropped` counts frames the kernel stack drops (an LLDP frame nobody listens for),
/// which RoCE traffic never reaches: with ethtool counters flat, a rising `rx_dropped` does not
/// fail the rail.
#[test]
fn stack_level_rx_dropped_does_not_fail_a_lossless_rail() {
    let before: &[(&str, u64)] = &[
        ("rx_prio3_pause", 10),
        ("rx_discards_phy", 0),
        ("tx_prio3_bytes", 100),
        ("tx_prio0_bytes", 0),
    ];
    let after: &[(&str, u64)] = &[
        ("rx_prio3_pause", 90),
        ("rx_discards_phy", 0),
        ("tx_prio3_bytes", 9000),
        ("tx_prio0_bytes", 0),
    ];
    let f = nic_finding(
        nic_reading(Ok(Some(before)), 0),
        nic_reading(Ok(Some(after)), 1),
    );
    assert_eq!(f.status, Status::Ok, "{}", f.read);
    assert!(f.read.contains("drop counters flat"), "{}", f.read);
}

/// Without ethtool the sysfs drop counters are all there is, and they cannot tell stack drops
/// from fabric drops: at most a warning.
#[test]
fn without_ethtool_rising_sysfs_drops_only_warn() {
    for ethtool in [Ok(None), Err("no such device".to_owned())] {
        let f = nic_finding(nic_reading(ethtool.clone(), 0), nic_reading(ethtool, 5));
        assert_eq!(f.status, Status::Warn, "{}", f.read);
        assert!(f.read.contains("rising rx_dropped +5"), "{}", f.read);
        assert!(f.read.contains("sysfs statistics only"), "{}", f.read);
    }
}

#[test]
fn watch_reads_fixture_counters_and_ethtool() {
    let h = eight_rails();
    let mut opts = options();
    opts.watch = Some(Duration::from_millis(10));
    let r = run(h.root(), &opts);
    let f = find(&r, "counters.nic", "ens1f0np0");
    assert_eq!(f.status, Status::Ok);
    assert!(f.read.contains("no pause on priority 3"), "{}", f.read);
    let f = find(&r, "counters.rdma", "mlx5_0 port 1");
    assert!(f.read.contains("no RDMA traffic moved"), "{}", f.read);
}

/// Not a timed assertion: prints how long doctor takes on 8 rails, 8 GPUs and their bridges.
#[test]
fn eight_rail_host_timing() {
    let h = eight_rails();
    let opts = options();
    let _ = run(h.root(), &opts); // warm the page cache
    let runs = 20;
    let started = Instant::now();
    let mut checks = 0;
    for _ in 0..runs {
        checks = run(h.root(), &opts).checks.len();
    }
    let each = started.elapsed() / runs;
    eprintln!(
        "net doctor on 8 rails, 8 GPUs, 32 bridges (fixture): {checks} checks in {:.2} ms per run",
        each.as_secs_f64() * 1e3
    );
}

#[test]
fn docs_list_every_check() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/fabric.md"))
            .unwrap();
    for (id, _) in CHECKS {
        assert!(
            docs.contains(&format!("| `{id}` |")),
            "docs/fabric.md lacks {id}"
        );
    }
}

#[test]
fn a_host_without_rdma_fails_the_device_check() {
    let h = memkv_fabric::doctor::doubles::HostFixture::create(scratch("empty")).unwrap();
    h.kernel("6.15.2-memkv");
    let r = run(h.root(), &options());
    let f = find(&r, "stack.devices", "host");
    assert_eq!(f.status, Status::Fail);
    assert!(f.read.starts_with("no RDMA devices"), "{}", f.read);
    assert_eq!(status(&r, "stack.modules", "host"), Status::Fail);
}

#[test]
fn pkey_mtu_and_subnet_verdicts_follow_net_show_policy() {
    let h = infiniband();
    h.file("/sys/class/infiniband/mlx5_0/ports/1/pkeys/1", "0x0000\n");
    h.file(
        "/sys/class/infiniband/mlx5_1/ports/1/gids/0",
        "fec0:0000:0000:0001:0002:c903:0001:0204\n",
    );
    let mut opts = options();
    opts.config.pkey_index = Some(1);
    opts.config.mtu = Some(memkv_fabric::types::Mtu::Mtu4096);
    h.file(
        "/sys/class/infiniband/mlx5_0/ports/1/verbs/active_mtu",
        "2048\n",
    );
    let r = run(h.root(), &opts);
    let pkey = find(&r, "stack.pkey", "mlx5_0 port 1");
    assert_eq!(pkey.status, Status::Fail);
    assert!(
        pkey.read
            .contains("P_Key table entry 1 of mlx5_0 port 1 is empty"),
        "{}",
        pkey.read
    );
    let mtu = find(&r, "stack.mtu", "mlx5_0 port 1");
    assert_eq!(mtu.status, Status::Fail);
    assert!(
        mtu.read.contains("exceeds the active MTU 2048"),
        "{}",
        mtu.read
    );
    assert_eq!(status(&r, "stack.ib-subnet", "host"), Status::Warn);
}
