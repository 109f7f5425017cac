//! `memkv net verify` against servers inside the Soft-RoCE VM (testing/rxe-vm): VERIFIED only
//! when the block crossed an RDMA rail both ways, NOT VERIFIED when it moved another way.
//! Outside the VM each test prints why it is skipped and passes.

mod common;

use std::process::Output;

use common::*;
use memkv_server::Server;
use memkv_server::config::ServerConfig;

/// One test at a time: the rxe packet counters read below must count only its own traffic.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A memory-mode server on `device` at 127.0.0.1, with `rdma_extra` under `rdma:`. Its shared
/// memory stays on (the default): a client on this host under `auto` would take it.
async fn start(device: &str, rdma_extra: &str) -> Server {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nrdma:\n  device: {device}\n{rdma_extra}"
    );
    Server::start(ServerConfig::from_yaml_str(&yaml, "rxe verify").unwrap())
        .await
        .unwrap()
}

async fn verify(addr: &str, key: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = memkv(addr, key);
    cmd.args(["net", "verify", "--server", addr, "--auth-key", key]);
    cmd.args(extra);
    for (name, value) in env {
        cmd.env(name, value);
    }
    run(cmd, None).await
}

/// Packets `device`'s port sent and received so far (rxe `hw_counters`).
fn packets(device: &str) -> (u64, u64) {
    let read = |name: &str| {
        let path = format!("/sys/class/infiniband/{device}/ports/1/hw_counters/{name}");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    (read("sent_pkts"), read("rcvd_pkts"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_reports_rc_and_verifies_a_block() {
    let Some(devices) = rxe_devices_or_skip("net_verify_reports_rc_and_verifies_a_block") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let server = start(&devices[0], "").await;
    let addr = server.data_addr().to_string();
    let rail = devices.last().unwrap().clone();
    // A client-side traffic class override (DSCP 10): the rail reports the class its queue
    // pairs send in, and the block still moves.
    let o = verify(
        &addr,
        KEY_HEX,
        &["--device", &rail, "--require-rdma"],
        &[("MEMKV_RDMA_TRAFFIC_CLASS", "40")],
    )
    .await;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains(&format!(
            "transport         : RC over {rail} (no DC on this side: device {rail} is not an mlx5 device"
        )),
        "{out}"
    );
    assert!(
        out.contains("; traffic class 40 (DSCP 10), service level 0)"),
        "{out}"
    );
    assert!(out.contains("VERIFIED 1048576 bytes over RC"), "{out}");
    let o = verify(&addr, WRONG_KEY_HEX, &["--device", &rail], &[]).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("refused authentication"),
        "{}",
        stderr(&o)
    );
    server.shutdown().await.unwrap();
}

/// The runbook's command as written: `--device` and no `--require-rdma`, against a server on
/// this host that offers shared memory. VERIFIED must mean the block crossed the rail: the
/// client's port sent and received at least the block's worth of packets. (Verify used to
/// take the shared-memory path here and print VERIFIED with no packet on the wire.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_without_require_rdma_verifies_only_a_block_that_crossed_the_rail() {
    let Some(devices) = rxe_devices_or_skip(
        "net_verify_without_require_rdma_verifies_only_a_block_that_crossed_the_rail",
    ) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let server = start(&devices[0], "").await;
    let addr = server.data_addr().to_string();
    let rail = devices.last().unwrap().clone();
    let (sent, rcvd) = packets(&rail);
    let o = verify(&addr, KEY_HEX, &["--device", &rail], &[]).await;
    let (sent_after, rcvd_after) = packets(&rail);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("VERIFIED 1048576 bytes over RC"), "{out}");
    // 1 MiB in packets of at most 4096 bytes: 256 out for the WRITE, 256 in for the READ.
    let least = (1u64 << 20) / 4096;
    assert!(
        sent_after - sent >= least && rcvd_after - rcvd >= least,
        "VERIFIED, yet {rail} sent {} and received {} packets:\n{out}",
        sent_after - sent,
        rcvd_after - rcvd
    );
    assert!(
        out.contains(&format!("write             : RDMA over {rail} ("))
            && out.contains(&format!("read              : RDMA over {rail} (")),
        "{out}"
    );
    server.shutdown().await.unwrap();
}

/// A server that refuses RDMA (rxe's P_Key table has one entry, so index 1 keeps it on TCP):
/// the block still makes its round trip, over TCP, and that is NOT VERIFIED, naming the way
/// and the server's reason, with exit 8. Without `--device` (the rail comes from
/// MEMKV_RDMA_DEVICES) as with it: verify used to print VERIFIED over TCP without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_of_a_block_that_moved_over_tcp_is_not_verified() {
    let Some(devices) =
        rxe_devices_or_skip("net_verify_of_a_block_that_moved_over_tcp_is_not_verified")
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let server = start(&devices[0], "  pkey_index: 1\n").await;
    let addr = server.data_addr().to_string();
    let rail = devices.last().unwrap().clone();
    let device_flag = ["--device", rail.as_str()];
    let device_env = [("MEMKV_RDMA_DEVICES", rail.as_str())];
    for (flags, env) in [(&[][..], &device_env[..]), (&device_flag[..], &[][..])] {
        let o = verify(&addr, KEY_HEX, flags, env).await;
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(8), "{flags:?}: {out}{err}");
        assert!(!out.contains("VERIFIED"), "{flags:?}: {out}");
        assert!(
            out.contains("write             : not RDMA (")
                && out.contains("read              : not RDMA ("),
            "{flags:?}: {out}"
        );
        assert!(
            err.contains(
                "net verify: NOT VERIFIED: neither the write nor the read moved over RDMA: "
            ) && err.contains("went over TCP after RDMA failed: RDMA with server ")
                && err.contains("index 1"),
            "{flags:?}: {err}"
        );
    }
    server.shutdown().await.unwrap();
}
