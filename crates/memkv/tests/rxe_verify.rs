//! `memkv net verify` against a server serving RDMA, inside the Soft-RoCE VM
//! (testing/rxe-vm); outside it the test prints why it is skipped and passes.

mod common;

use common::*;
use memkv_server::Server;
use memkv_server::config::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_reports_rc_and_verifies_a_block() {
    use std::io::Write;
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "net_verify_reports_rc_and_verifies_a_block: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
        );
        return;
    }
    let devices: Vec<String> = std::env::var("MEMKV_RXE_DEVICES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nrdma:\n  device: {}\n",
        devices[0]
    );
    let server = Server::start(ServerConfig::from_yaml_str(&yaml, "rxe verify").unwrap())
        .await
        .unwrap();
    let addr = server.data_addr().to_string();
    let rail = devices.last().unwrap().clone();
    let (a, r) = (addr.clone(), rail.clone());
    let o = tokio::task::spawn_blocking(move || {
        let mut cmd = memkv(&a, KEY_HEX);
        // A client-side traffic class override (DSCP 10): the rail reports the class its
        // queue pairs send in, and the block still moves.
        cmd.env("MEMKV_RDMA_TRAFFIC_CLASS", "40");
        cmd.args([
            "net",
            "verify",
            "--server",
            &a,
            "--device",
            &r,
            "--auth-key",
            KEY_HEX,
            "--require-rdma",
        ]);
        cmd.output().unwrap()
    })
    .await
    .unwrap();
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
    let o = tokio::task::spawn_blocking(move || {
        let mut cmd = memkv(&addr, WRONG_KEY_HEX);
        cmd.args([
            "net",
            "verify",
            "--server",
            &addr,
            "--device",
            &rail,
            "--auth-key",
            WRONG_KEY_HEX,
        ]);
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("refused authentication"),
        "{}",
        stderr(&o)
    );
    server.shutdown().await.unwrap();
}
