//! `memkv net doctor` on real Soft-RoCE rails inside the VM (testing/rxe-vm): vethA and vethB
//! share one layer-2 domain (they are one veth wire). Outside the VM each test prints why it is
//! skipped and passes. The tests change the guest's ARP sysctls and neighbour table (the guest
//! is thrown away after the run) and put back what guest-main set.

mod common;

use common::*;
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use serde_json::Value;
use std::process::Command;

/// The tests change host-wide state (ARP sysctls, a neighbour entry that breaks traffic between
/// the rails): one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn in_vm(test: &str) -> bool {
    use std::io::Write;
    if std::env::var_os("MEMKV_IN_RXE_VM").is_some() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
    );
    false
}

fn set_sysctl(dev: &str, key: &str, value: u8) {
    std::fs::write(
        format!("/proc/sys/net/ipv4/conf/{dev}/{key}"),
        format!("{value}\n"),
    )
    .unwrap_or_else(|e| panic!("writing {dev}/{key}: {e}"));
}

fn set_arp(devs: &[&str], ignore: u8, announce: u8) {
    for dev in devs {
        set_sysctl(dev, "arp_ignore", ignore);
        set_sysctl(dev, "arp_announce", announce);
    }
}

/// Puts back guest-main's settings (arp_ignore 1, arp_announce 2) and drops the test's entry.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        set_arp(&["all", "default", "vethA", "vethB"], 1, 2);
        for (address, dev) in [("192.0.2.2", "vethA"), ("192.0.2.1", "vethB")] {
            let _ = Command::new("ip")
                .args(["neigh", "del", address, "dev", dev])
                .output();
        }
    }
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn mac(netdev: &str) -> String {
    std::fs::read_to_string(format!("/sys/class/net/{netdev}/address"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Runs doctor with `args` and returns (exit code, JSON report, text of the same run's stderr).
fn doctor(args: &[&str]) -> (i32, Value, String) {
    let mut cmd = memkv("127.0.0.1:1", KEY_HEX);
    cmd.args(["net", "doctor", "--json"]).args(args);
    let o = cmd.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}):\n{out}\n{}",
            stderr(&o)
        )
    });
    (o.status.code().unwrap_or(-1), json, stderr(&o))
}

fn finding<'a>(report: &'a Value, check: &str, subject: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check && f["subject"] == subject)
        .unwrap_or_else(|| panic!("no {check} for {subject}: {report:#}"))
}

fn findings<'a>(report: &'a Value, check: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

#[test]
fn arp_flux_is_found_on_two_rails_of_one_layer_2_domain() {
    if !in_vm("arp_flux_is_found_on_two_rails_of_one_layer_2_domain") {
        return;
    }
    let _serial = SERIAL.blocking_lock();
    let _restore = Restore;
    // The kernel defaults: every rail answers ARP for every local address.
    set_arp(&["all", "default", "vethA", "vethB"], 0, 0);
    let (code, report, err) = doctor(&[]);
    let f = finding(&report, "arp.sysctl", "vethA,vethB");
    assert_eq!(f["status"], "WARN", "{f:#}");
    let fix: Vec<&str> = f["fix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    for line in [
        "net.ipv4.conf.vethA.arp_ignore = 1",
        "net.ipv4.conf.vethA.arp_announce = 2",
        "net.ipv4.conf.vethB.arp_ignore = 1",
        "net.ipv4.conf.vethB.arp_announce = 2",
    ] {
        assert!(fix.contains(&line), "{fix:?}");
    }
    assert!(code == 10 || code == 11, "exit {code}: {err}");

    // The runbook's per-rail stanza, with conf.all left at 0: effective values are the max.
    set_arp(&["vethA", "vethB"], 1, 2);
    let (_, report, _) = doctor(&[]);
    let f = finding(&report, "arp.sysctl", "vethA,vethB");
    assert_eq!(f["status"], "OK", "{f:#}");
    assert!(
        f["read"]
            .as_str()
            .unwrap()
            .contains("vethA arp_ignore 1 (all 0, vethA 1)"),
        "{f:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rail_address_on_the_other_rails_mac_fails_naming_both() {
    if !in_vm("a_rail_address_on_the_other_rails_mac_fails_naming_both") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let _restore = Restore;
    let mac_a = mac("vethA");
    let mac_b = mac("vethB");
    // vethB's address pinned to vethA's MAC: `ip neigh flush` would leave it in place.
    ip(&[
        "neigh",
        "replace",
        "192.0.2.2",
        "dev",
        "vethA",
        "lladdr",
        &mac_a,
        "nud",
        "permanent",
    ]);
    let (code, report, err) = doctor(&[]);
    assert_eq!(code, 11, "{err}");
    let wrong = findings(&report, "arp.rail-mac");
    let f = wrong
        .iter()
        .find(|f| f["status"] == "FAIL")
        .unwrap_or_else(|| panic!("{report:#}"));
    let read = f["read"].as_str().unwrap();
    assert!(
        read.contains(&format!("192.0.2.2, the address of vethB (MAC {mac_b}), resolves to {mac_a}, the MAC of vethA (PERMANENT entry on vethA)")),
        "{read}"
    );
    assert_eq!(f["fix"][0], "sudo ip neigh del 192.0.2.2 dev vethA");
    assert_eq!(
        finding(&report, "arp.static-neigh", "vethA")["status"],
        "WARN"
    );

    // Through a server's /v1/status: the server serves on rxe0, so its rail is vethA. Looking
    // only at this host's rxe1 (rail vethB), only the server's report says who owns 192.0.2.1.
    ip(&["neigh", "del", "192.0.2.2", "dev", "vethA"]);
    ip(&[
        "neigh",
        "replace",
        "192.0.2.1",
        "dev",
        "vethB",
        "lladdr",
        &mac_b,
        "nud",
        "permanent",
    ]);
    let server = start_rdma_server().await;
    let addr = server.data_addr().to_string();
    let a = addr.clone();
    let (code, report, err) =
        tokio::task::spawn_blocking(move || doctor(&["--device", "rxe1", "--server", &a]))
            .await
            .unwrap();
    assert_eq!(code, 11, "{err}");
    let f = finding(&report, "arp.server", &addr);
    assert_eq!(f["status"], "OK", "{f:#}");
    assert_eq!(f["read"], format!("rails: rxe0 vethA 192.0.2.1 {mac_a}"));
    let f = findings(&report, "arp.rail-mac")
        .into_iter()
        .find(|f| f["status"] == "FAIL")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(
        f["read"],
        format!(
            "192.0.2.1, the address of server {addr}'s vethA (MAC {mac_a}), resolves to {mac_b}, the MAC of vethB (PERMANENT entry on vethB)"
        )
    );
    server.shutdown().await.unwrap();
}

/// A server on rxe0 with its admin API at data port + 1 (where `--server` looks).
async fn start_rdma_server() -> Server {
    for _ in 0..50 {
        let data = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = data.local_addr().unwrap().port();
        if port == u16::MAX || std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
            continue;
        }
        drop(data);
        let yaml = format!(
            "network:\n  address: 127.0.0.1:{port}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nrdma:\n  device: rxe0\n"
        );
        if let Ok(server) =
            Server::start(ServerConfig::from_yaml_str(&yaml, "rxe doctor").unwrap()).await
        {
            return server;
        }
    }
    panic!("no free pair of adjacent loopback ports");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reads_rxe_hw_counters_while_traffic_runs() {
    if !in_vm("watch_reads_rxe_hw_counters_while_traffic_runs") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let server = start_rdma_server().await;
    let addr = server.data_addr().to_string();
    // RDMA traffic from rxe1 to the server on rxe0 for as long as the watch lasts.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a, s) = (addr.clone(), stop.clone());
    let traffic = tokio::task::spawn_blocking(move || {
        let mut rounds = 0;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let mut cmd = memkv(&a, KEY_HEX);
            cmd.args([
                "net",
                "verify",
                "--server",
                &a,
                "--device",
                "rxe1",
                "--auth-key",
                KEY_HEX,
                "--size",
                "65536",
                "--require-rdma",
            ]);
            let o = cmd.output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            rounds += 1;
        }
        rounds
    });
    let (_, report, err) = tokio::task::spawn_blocking(|| doctor(&["--watch", "4"]))
        .await
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = traffic.await.unwrap();
    assert!(rounds > 0);
    assert_eq!(report["watch_seconds"], 4, "{err}");
    for device in ["rxe0", "rxe1"] {
        let f = finding(&report, "counters.rdma", &format!("{device} port 1"));
        let read = f["read"].as_str().unwrap();
        assert!(read.starts_with("over 4 s: "), "{read}");
        assert!(
            read.contains("sent_pkts +") && read.contains("rcvd_pkts +"),
            "{f:#}"
        );
    }
    for netdev in ["vethA", "vethB"] {
        let f = finding(&report, "counters.nic", netdev);
        assert!(
            f["read"].as_str().unwrap().starts_with("over 4 s: "),
            "{f:#}"
        );
    }
    server.shutdown().await.unwrap();
}
