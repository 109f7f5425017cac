//! `memkv bench` end to end through the built binary, against its own in-process server.

use std::process::Command;

fn memkv() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
    for (name, _) in std::env::vars() {
        if name.starts_with("MEMKV_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

#[test]
fn a_local_bench_prints_one_json_result_per_size() {
    let out = memkv()
        .args([
            "bench", "--local", "--count", "200", "--sizes", "4K", "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(doc["op"], "put");
    assert_eq!(doc["transport"], "tcp");
    assert_eq!(doc["local"], true);
    assert_eq!(doc["batch"], 1);
    let results = doc["results"].as_array().expect("results array");
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert_eq!(r["size"], 4096);
    assert_eq!(r["ops"], 200);
    assert_eq!(r["bytes"], 200 * 4096);
    assert!(r["gib_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    let latency = &r["latency_us"];
    let (p50, p99, p999, max) = (
        latency["p50"].as_f64().unwrap(),
        latency["p99"].as_f64().unwrap(),
        latency["p999"].as_f64().unwrap(),
        latency["max"].as_f64().unwrap(),
    );
    assert!(
        0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "{latency}"
    );
}

#[test]
fn a_local_get_bench_reads_back_what_it_stored() {
    let out = memkv()
        .args([
            "bench", "--local", "--op", "get", "--batch", "8", "--count", "64", "--sizes",
            "1K,64K", "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["latency_per"], "batch");
    let sizes: Vec<u64> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1024, 65536]);
    assert!(
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["ops"] == 64 && r["calls"] == 8)
    );
}

#[test]
fn transport_rdma_without_a_device_fails_with_the_clients_reason() {
    if std::env::var_os("MEMKV_IN_RXE_VM").is_some() {
        return; // This host has RDMA devices; the VM benchmark covers that case.
    }
    let out = memkv()
        .args([
            "bench",
            "--local",
            "--transport",
            "rdma",
            "--count",
            "1",
            "--sizes",
            "4K",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Exit 8: not available here (no RDMA device on this host).
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert!(stderr.to_lowercase().contains("rdma"), "{stderr}");
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let out = memkv()
        .args([
            "--servers",
            "127.0.0.1:1",
            "--auth-key",
            &"ab".repeat(32),
            "bench",
            "--count",
            "1",
            "--sizes",
            "4K",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"));
}

#[test]
fn an_offered_rate_paces_the_calls() {
    // 100 calls offered at 400/s: the last is due 0.2475 s after the start (4 tasks, each
    // call 10 ms after its task's last, tasks 2.5 ms apart), so the run cannot end sooner.
    let out = memkv()
        .args([
            "bench", "--local", "--op", "mixed", "--rate", "400", "--count", "100", "--sizes",
            "4K", "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["stop"]
            .as_str()
            .unwrap()
            .contains("at 400 items/s offered"),
        "{doc}"
    );
    let r = &doc["results"][0];
    assert_eq!(r["ops"], 100);
    assert!(r["seconds"].as_f64().unwrap() >= 0.247, "{r}");
}

/// A rate whose interval between calls no `Duration` can hold (1e-300/s) is refused with the
/// accepted range, not a panic.
#[test]
fn a_rate_below_the_floor_is_refused_with_the_range() {
    let out = memkv()
        .args([
            "bench",
            "--local",
            "--rate",
            "1e-300",
            "--count",
            "1",
            "--sizes",
            "4K",
            "--threads",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("from 0.001 to 10000000"), "{stderr}");
}

/// `--local` fixes only the server and its key: the other client settings apply, here
/// MEMKV_NUM_CONNECTIONS.
#[test]
fn a_local_bench_honours_the_client_settings() {
    let out = memkv()
        .env("MEMKV_NUM_CONNECTIONS", "2")
        .args([
            "bench",
            "--local",
            "--json",
            "--count",
            "1",
            "--sizes",
            "4K",
            "--threads",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["connections"], 2, "{doc}");
}
