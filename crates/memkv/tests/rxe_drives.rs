//! RDMA against drive-backed servers (file and direct mode) inside the Soft-RoCE VM
//! (testing/rxe-vm): values pass through the server's registered staging. `memkv net verify
//! --require-rdma`, `memkv bench --transport rdma`, client puts and gets bit-exact over RDMA,
//! and a batch larger than the staging, whose overflow the server answers Busy and the client
//! moves over TCP while staying on RDMA. Outside the VM each test prints why it is skipped.
//!
//! Drive files live in the VM's exchange share (`/run/rxe-vm`, 9p): the guest's root is a
//! tmpfs overlay, which refuses O_DIRECT.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use memkv_client::{Client, ClientConfig, Transport};
use memkv_proto::AuthKey;
use memkv_server::Server;
use memkv_server::config::ServerConfig;

/// Staging of 8 chunks of 1 MiB: a batch of twelve 1 MiB values cannot all be staged at once.
const STAGING_CHUNKS: usize = 8;
const CHUNK: usize = 1 << 20;

/// A fresh folder for drive files on a filesystem that takes O_DIRECT.
fn drive_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from("/run/rxe-vm").join(format!("drives-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn start_drive_server(mode: &str, device: &str, dir: &std::path::Path) -> Server {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n\
         memory:\n  block_size: 1 MiB\n\
         storage:\n  mode: {mode}\n  block_size: 1 MiB\n  drives:\n\
         \x20   - media: {d0}\n      size: 32 MiB\n\
         \x20   - media: {d1}\n      size: 32 MiB\n\
         limits:\n  max_value_size: 4 MiB\n  per_connection_inflight_bytes: 64 MiB\n\
         rdma:\n  device: {device}\n  staging_size: {STAGING_CHUNKS} MiB\n",
        d0 = dir.join("d0").display(),
        d1 = dir.join("d1").display(),
    );
    let config = ServerConfig::from_yaml_str(&yaml, "rxe drives").unwrap();
    Server::start(config).await.unwrap()
}

async fn rdma_client(server: &Server, rail: &str, transport: Transport) -> Client {
    let mut config = ClientConfig::new(
        vec![server.data_addr().to_string()],
        AuthKey::from_hex(KEY_HEX).unwrap(),
    );
    config.transport = transport;
    config.rdma_devices = vec![rail.to_owned()];
    config.timeout = Duration::from_secs(60);
    Client::connect(config).await.unwrap()
}

async fn status(server: &Server) -> serde_json::Value {
    let admin = server.admin_addr();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(admin).unwrap();
        write!(
            s,
            "GET /v1/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let body = answer.split("\r\n\r\n").nth(1).unwrap().to_owned();
        serde_json::from_str(&body).unwrap()
    })
    .await
    .unwrap()
}

fn value(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 9) ^ seed) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_puts_and_gets_on_file_and_direct_mode_servers() {
    let Some(devices) = rxe_devices_or_skip("rdma_puts_and_gets_on_file_and_direct_mode_servers")
    else {
        return;
    };
    let rail = devices.last().unwrap().clone();
    for mode in ["file", "direct"] {
        let dir = drive_dir(mode);
        let server = start_drive_server(mode, &devices[0], &dir).await;
        let report = status(&server).await;
        assert_eq!(report["rdma"]["active"], true, "{mode}: {report}");
        let staging = &report["rdma"]["staging"];
        assert_eq!(
            staging["bytes_total"],
            (STAGING_CHUNKS * CHUNK) as u64,
            "{staging}"
        );

        // Single values, strict RDMA, bit-exact, and the same bytes over TCP.
        let client = rdma_client(&server, &rail, Transport::Rdma).await;
        let tcp = rdma_client(&server, &rail, Transport::Tcp).await;
        for (i, size) in [1usize, 4096, CHUNK + 13, 4 * CHUNK]
            .into_iter()
            .enumerate()
        {
            let v = value(size, i);
            let key = format!("{mode}/{size}");
            client.put(key.as_bytes(), &v).await.expect("RDMA put");
            let got = client.get(key.as_bytes()).await.expect("RDMA get");
            assert!(
                got.as_deref() == Some(&v[..]),
                "{mode} {size}: RDMA get differs"
            );
            let got = tcp.get(key.as_bytes()).await.unwrap();
            assert!(
                got.as_deref() == Some(&v[..]),
                "{mode} {size}: TCP get differs"
            );
        }
        assert_eq!(client.transport(), "rdma");
        assert_eq!(client.get(b"missing").await.unwrap(), None);

        // A batch larger than the staging: the items that find it full go over TCP, the
        // client stays on RDMA, every value arrives.
        let auto = rdma_client(&server, &rail, Transport::Auto).await;
        let values: Vec<(String, Vec<u8>)> = (0..12)
            .map(|i| (format!("{mode}/batch/{i}"), value(CHUNK, 100 + i)))
            .collect();
        for r in auto.put_batch(&values).await {
            r.expect("batch put");
        }
        let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
        for (got, (key, v)) in auto.get_batch(&keys).await.into_iter().zip(&values) {
            let got = got.expect("batch get");
            assert!(got.as_deref() == Some(&v[..]), "{key} differs");
        }
        assert_eq!(
            auto.transport(),
            "rdma",
            "{:?}",
            auto.rdma_fallback_reason()
        );
        let report = status(&server).await;
        let staging = &report["rdma"]["staging"];
        assert!(staging["busy_total"].as_u64().unwrap() > 0, "{staging}");
        assert_eq!(
            staging["puts_open"], 0,
            "every staged put was committed: {staging}"
        );
        let rdma_clients = report["clients"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["transport"] == "rdma-rc")
            .count();
        assert!(rdma_clients >= 1, "{report}");

        drop((client, tcp, auto));
        server.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_and_bench_over_rdma_against_a_direct_mode_server() {
    let Some(devices) =
        rxe_devices_or_skip("net_verify_and_bench_over_rdma_against_a_direct_mode_server")
    else {
        return;
    };
    let rail = devices.last().unwrap().clone();
    let dir = drive_dir("verify");
    let server = start_drive_server("direct", &devices[0], &dir).await;
    let addr = server.data_addr().to_string();

    let mut cmd = memkv(&addr, KEY_HEX);
    cmd.args([
        "net",
        "verify",
        "--server",
        &addr,
        "--device",
        &rail,
        "--auth-key",
        KEY_HEX,
        "--require-rdma",
    ]);
    let o = run(cmd, None).await;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("VERIFIED 1048576 bytes over RC"), "{out}");

    for op in ["put", "get"] {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args([
            "bench",
            "--transport",
            "rdma",
            "--rails",
            &rail,
            "--op",
            op,
            "--sizes",
            "64K,1M",
            "--threads",
            "2",
            "--count",
            "16",
            "--keys",
            "8",
        ]);
        let o = run(cmd, None).await;
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "bench {op}: {out}{}", stderr(&o));
        // The report goes to the test's output: the VM run shows what RDMA moved.
        println!("bench --op {op} --transport rdma, direct mode:\n{out}");
    }
    let report = status(&server).await;
    assert_eq!(report["rdma"]["staging"]["puts_open"], 0, "{report}");
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
