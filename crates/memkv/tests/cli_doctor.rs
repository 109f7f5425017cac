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
    // The settings it read come first (none here), then the library's report.
    let settings = "server settings   : none (/etc/memkv/config.yaml absent, no --config)\n\
                    client settings   : none (MEMKV_CONFIG, MEMKV_RDMA_PKEY_INDEX, \
                    MEMKV_RDMA_TRAFFIC_CLASS, MEMKV_RDMA_SERVICE_LEVEL, MEMKV_RDMA_GID_INDEX unset)\n";
    assert_eq!(
        text,
        format!("{settings}{}", library_report(ok.root()).text())
    );
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

/// TEST DOUBLE: one InfiniBand HCA (mlx5_0 port 1, LID 33055) whose P_Key table is
/// [0xffff, 0x0000]: index 1 is an empty entry (this node is not in that partition).
fn ib_host(name: &str, active_mtu: u32) -> HostFixture {
    let h = HostFixture::create(scratch(name)).unwrap();
    h.kernel("6.15.0-memkv");
    h.modules(&["ib_core", "ib_uverbs", "rdma_cm", "mlx5_core"], true);
    h.ib_port("mlx5_0", Some(33055), 1, None);
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    h.file(&format!("{port}/pkeys/1"), "0x0000\n");
    h.file(
        &format!("{port}/verbs/active_mtu"),
        format!("{active_mtu}\n"),
    );
    h
}

/// `net doctor --json` on a fixture host with these environment variables (and extra args):
/// exit code, JSON report, and everything printed.
fn doctor_json(
    root: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = bare("doctor-settings-state");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(["net", "doctor", "--json", "--fixture-root"])
        .arg(root)
        .args(args);
    let o = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    (o.status.code(), json, format!("{text}{}", stderr(&o)))
}

fn findings<'a>(json: &'a serde_json::Value, check: &str) -> Vec<&'a serde_json::Value> {
    json["checks"]
        .as_array()
        .map(|c| c.iter().filter(|f| f["check"] == check).collect())
        .unwrap_or_default()
}

fn finding<'a>(json: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    findings(json, check)
        .first()
        .copied()
        .unwrap_or(&serde_json::Value::Null)
}

/// InfiniBand runbook, Partitions: clients take pkey_index from MEMKV_RDMA_PKEY_INDEX or the
/// pkey_index field in MEMKV_CONFIG, and memkv refuses RDMA on an empty entry.
#[test]
fn doctor_checks_the_clients_pkey_index_from_the_variable_or_memkv_config() {
    let h = ib_host("pkey-client", 4096);
    let (code, json, all) = doctor_json(h.root(), &[("MEMKV_RDMA_PKEY_INDEX", "1")], &[]);
    assert_eq!(finding(&json, "stack.pkey")["status"], "FAIL", "{all}");
    assert_eq!(code, Some(11), "{all}");

    let cfg = h.root().join("client.yaml");
    std::fs::write(&cfg, "pkey_index: 1\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    let (code, json, all) = doctor_json(h.root(), &[("MEMKV_CONFIG", cfg)], &[]);
    let pkey = finding(&json, "stack.pkey");
    assert_eq!(pkey["status"], "FAIL", "{pkey}\n{all}");
    assert!(pkey["read"].as_str().unwrap_or("").contains('1'), "{pkey}");
    assert_eq!(code, Some(11), "{all}");
    assert!(
        all.contains(&format!("client settings   : MEMKV_CONFIG {cfg}")),
        "{all}"
    );

    // The variable wins over the file, as in the client.
    let (code, json, all) = doctor_json(
        h.root(),
        &[("MEMKV_CONFIG", cfg), ("MEMKV_RDMA_PKEY_INDEX", "0")],
        &[],
    );
    assert_eq!(finding(&json, "stack.pkey")["status"], "OK", "{all}");
    assert_eq!(code, Some(0), "{all}");
}

/// InfiniBand runbook, MTU: memkv refuses a configured mtu above the port's active MTU, naming
/// both; doctor's stack.mtu FAILs on it (here the client's `mtu:` in MEMKV_CONFIG).
#[test]
fn doctor_fails_stack_mtu_when_the_configured_mtu_exceeds_the_active_mtu() {
    let h = ib_host("mtu-client", 1024);
    let cfg = h.root().join("client.yaml");
    std::fs::write(&cfg, "mtu: 4096\n").unwrap();
    let (code, json, all) = doctor_json(h.root(), &[("MEMKV_CONFIG", cfg.to_str().unwrap())], &[]);
    let mtu = finding(&json, "stack.mtu");
    assert_eq!(mtu["status"], "FAIL", "{mtu}\n{all}");
    let read = mtu["read"].as_str().unwrap_or("");
    assert!(read.contains("4096") && read.contains("1024"), "{mtu}");
    assert_eq!(code, Some(11), "{all}");

    // The server's rdma.mtu, through --config.
    let server = h.root().join("server.yaml");
    std::fs::write(&server, "rdma:\n  mtu: 2048\n").unwrap();
    let (code, json, all) = doctor_json(h.root(), &[], &["--config", server.to_str().unwrap()]);
    assert_eq!(finding(&json, "stack.mtu")["status"], "FAIL", "{all}");
    assert_eq!(code, Some(11), "{all}");
}

/// InfiniBand runbook, Partitions: the server is configured with `rdma: pkey_index: 1` in
/// /etc/memkv/config.yaml (memkv start's default config), and doctor checks that setting,
/// saying which file it read; the client's settings, when they differ, are checked beside it.
#[test]
fn doctor_checks_the_servers_rdma_settings_from_its_config_file() {
    let h = ib_host("server-config", 4096);
    h.file(
        "/etc/memkv/config.yaml",
        format!(
            "network:\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nrdma:\n  device: mlx5_0\n  pkey_index: 1\n"
        ),
    );
    let (code, json, all) = doctor_json(h.root(), &[], &[]);
    let pkey = finding(&json, "stack.pkey");
    assert_eq!(pkey["status"], "FAIL", "{pkey}\n{all}");
    assert_eq!(code, Some(11), "{all}");
    assert!(
        all.contains("server settings   : ")
            && all.contains("etc/memkv/config.yaml (rdma.pkey_index 1"),
        "{all}"
    );

    // An explicit --config wins over the default file.
    let good = h.root().join("good.yaml");
    std::fs::write(&good, "rdma:\n  pkey_index: 0\n").unwrap();
    let (code, json, all) = doctor_json(h.root(), &[], &["--config", good.to_str().unwrap()]);
    assert_eq!(finding(&json, "stack.pkey")["status"], "OK", "{all}");
    assert_eq!(code, Some(0), "{all}");

    // A client on the same node with another index: both are checked, the client's marked.
    let (code, json, all) = doctor_json(
        h.root(),
        &[("MEMKV_RDMA_PKEY_INDEX", "1")],
        &["--config", good.to_str().unwrap()],
    );
    let pkeys = findings(&json, "stack.pkey");
    assert_eq!(pkeys.len(), 2, "{all}");
    assert_eq!(pkeys[0]["status"], "OK", "{all}");
    assert_eq!(pkeys[1]["status"], "FAIL", "{all}");
    assert!(
        pkeys[1]["subject"]
            .as_str()
            .unwrap_or("")
            .ends_with("(client)"),
        "{all}"
    );
    assert_eq!(code, Some(11), "{all}");
}

#[test]
fn doctor_names_a_server_config_it_cannot_read() {
    let h = ib_host("server-config-missing", 4096);
    let missing = h.root().join("nope.yaml");
    let (code, _, all) = doctor_json(h.root(), &[], &["--config", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{all}");
    assert!(all.contains("nope.yaml"), "{all}");
}

/// RoCE runbook, "You do not hardcode a DSCP value": a client-only node reads the client's
/// traffic class override (MEMKV_RDMA_TRAFFIC_CLASS over MEMKV_CONFIG's traffic_class), says
/// where it came from, judges it against the rail's lossless class, and names the client's key
/// in the fix.
#[test]
fn doctor_checks_the_clients_traffic_class_on_a_client_only_node() {
    let h = soft_roce_host("tclass-client", 1, 2);
    let (code, json, all) = doctor_json(h.root(), &[("MEMKV_RDMA_TRAFFIC_CLASS", "40")], &[]);
    assert!(
        all.contains("client settings   : MEMKV_RDMA_TRAFFIC_CLASS (pkey_index default 0, ")
            && all.contains(", traffic_class 40)"),
        "{all}"
    );
    let tc = finding(&json, "roce.traffic-class");
    assert_eq!(tc["status"], "FAIL", "{all}");
    assert!(
        tc["fix"].to_string().contains("MEMKV_RDMA_TRAFFIC_CLASS"),
        "{tc}"
    );
    assert_eq!(code, Some(11), "{all}");

    // The detected class, set explicitly in MEMKV_CONFIG, passes; the variable still wins.
    let cfg = h.root().join("client.yaml");
    std::fs::write(
        &cfg,
        "traffic_class: 104\nservice_level: 3\ngid_index: auto\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let (code, json, all) = doctor_json(h.root(), &[("MEMKV_CONFIG", cfg)], &[]);
    assert_eq!(
        finding(&json, "roce.traffic-class")["status"],
        "OK",
        "{all}"
    );
    assert!(all.contains("service_level 3, traffic_class 104)"), "{all}");
    assert_eq!(code, Some(0), "{all}");
    let (_, json, all) = doctor_json(
        h.root(),
        &[("MEMKV_CONFIG", cfg), ("MEMKV_RDMA_TRAFFIC_CLASS", "40")],
        &[],
    );
    assert_eq!(
        finding(&json, "roce.traffic-class")["status"],
        "FAIL",
        "{all}"
    );

    // A bad value is refused as the client would refuse it, naming the variable and limit.
    let (code, _, all) = doctor_json(h.root(), &[("MEMKV_RDMA_SERVICE_LEVEL", "16")], &[]);
    assert_eq!(code, Some(1), "{all}");
    assert!(
        all.contains("MEMKV_RDMA_SERVICE_LEVEL: 16 is out of range 0..=15"),
        "{all}"
    );
}
