//! `memkv net doctor` end to end on TEST DOUBLE hosts (memkv-fabric's `HostFixture` trees, read
//! through the hidden `--fixture-root`): the binary prints the library's report, text or JSON,
//! and exits 0 / 10 / 11 by the worst status.

mod common;

use common::*;
use memkv_fabric::doctor::doubles::{FixtureProbe, HostFixture, RocePort};
use memkv_fabric::doctor::{DoctorOptions, DoctorSources, HostRoot, doctor};
use memkv_fabric::doubles::FixtureVerbs;
use std::path::Path;

/// Two Soft-RoCE rails as in testing/rxe-vm, with the given ARP sysctls on both rails.
fn soft_roce_host(name: &str, ignore: u8, announce: u8) -> HostFixture {
    let h = HostFixture::create(scratch(name)).unwrap();
    h.kernel("6.15.0-memkv");
    h.modules(&["ib_core", "ib_uverbs", "rdma_cm", "rdma_rxe"], true);
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
        // Lossless as far as a fixture can be, so only the ARP checks vary.
        h.dcb(nd, "pfc 0,0,0,1,0,0,0,0\ndscp2prio 26,3\n");
        h.ecn(nd, 3, 1, 1);
    }
    h.arp_sysctls(&["vethA", "vethB"], ignore, announce);
    h.file("/etc/systemd/system/roce-lossless.service", "[Unit]\n");
    h
}

fn library_report(root: &Path) -> memkv_fabric::doctor::DoctorReport {
    let verbs = FixtureVerbs::new(root.join("sys/class/infiniband"));
    let probe = FixtureProbe::new(root);
    let src = DoctorSources {
        root: HostRoot::new(root),
        verbs: &verbs,
        probe: &probe,
    };
    doctor(&src, &DoctorOptions::default()).unwrap()
}

fn doctor_cli(root: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = memkv("127.0.0.1:1", KEY_HEX);
    cmd.args(["net", "doctor", "--fixture-root"])
        .arg(root)
        .args(args);
    cmd.output().unwrap()
}

#[test]
fn exit_codes_follow_the_worst_check() {
    let ok = soft_roce_host("ok", 1, 2);
    let o = doctor_cli(ok.root(), &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert_eq!(text, library_report(ok.root()).text());
    assert!(text.ends_with(" OK, 0 WARN, 0 FAIL\n"), "{text}");

    let warn = soft_roce_host("warn", 0, 0);
    let o = doctor_cli(warn.root(), &[]);
    assert_eq!(
        o.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("WARN  arp.sysctl             vethA,vethB: ")
    );

    let fail = soft_roce_host("fail", 1, 2);
    fail.neighbours("192.0.2.2 dev vethA lladdr 02:00:00:00:00:0a PERMANENT\n");
    let o = doctor_cli(fail.root(), &["--json"]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["exit_code"], 11);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        library_report(fail.root()).json()
    );
}

#[test]
fn bad_arguments_are_named() {
    let h = soft_roce_host("args", 1, 2);
    let o = doctor_cli(h.root(), &["--device", "mlx5_7"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(
        stderr(&o).contains("no RDMA device mlx5_7; devices here: rxe0, rxe1"),
        "{}",
        stderr(&o)
    );
    let o = doctor_cli(h.root(), &["--watch", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = doctor_cli(h.root(), &["--server", "no-port-here"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("FAIL  arp.server             no-port-here: cannot read the server's rails: server \"no-port-here\" is not host:port"), "{text}");
}

#[test]
fn device_and_watch_narrow_and_extend_the_checks() {
    let h = soft_roce_host("device", 1, 2);
    let o = doctor_cli(h.root(), &["--device", "rxe1", "--watch", "1"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("rxe0"), "{text}");
    assert!(
        text.contains("OK    counters.rdma          rxe1 port 1: over 1 s: no RDMA traffic moved"),
        "{text}"
    );
    assert!(
        text.contains("counters.nic           vethB: over 1 s: drop counters flat"),
        "{text}"
    );
}
