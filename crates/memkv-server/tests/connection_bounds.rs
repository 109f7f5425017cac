//! What a refused or never-read request leaves behind on a real server: a frame refused for
//! its MAC takes nothing from the store, and answers a client does not read stay within its
//! connection's in-flight budget.

use std::time::Duration;

mod support;

use memkv_proto::{AuthKey, Opcode, Status};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::connect;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Tests that measure this process's memory run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

fn config(extra: &str) -> ServerConfig {
    let yaml = format!("network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n{extra}");
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

fn drive_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memkv-review-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn status(server: &Server) -> serde_json::Value {
    let (code, body) = support::http_get(server.admin_addr(), "/v1/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A memory-mode server filled with acknowledged 1 MiB values ("v0", "v1", ...) to within
/// 24 MiB of its usable bytes, with no eviction yet; returns how many it holds.
async fn filled_memory_server() -> (Server, usize) {
    let server = Server::start(config("memory:\n  max_size: 64 MiB\n"))
        .await
        .unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let usable = status(&server).await["storage"]["usable_bytes_total"]
        .as_u64()
        .unwrap();
    let value = vec![0x5a; 1 << 20];
    let mut stored = 0;
    loop {
        let used = status(&server).await["storage"]["used_bytes_total"]
            .as_u64()
            .unwrap();
        if used + (24 << 20) > usable {
            break;
        }
        let k = format!("v{stored}");
        assert_eq!(
            c.call(Opcode::TcpPut, k.as_bytes(), &value).await.0,
            Status::Ok
        );
        stored += 1;
    }
    assert!(stored >= 8, "only {stored} values fit");
    assert_eq!(status(&server).await["storage"]["evictions"], 0);
    (server, stored)
}

/// Which of the `stored` values are gone, and the evictions counted.
async fn lost_values(server: &Server, stored: usize) -> (Vec<String>, serde_json::Value) {
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let mut lost = Vec::new();
    for i in 0..stored {
        let k = format!("v{i}");
        if c.call(Opcode::Exists, k.as_bytes(), &[]).await.0 != Status::Ok {
            lost.push(k);
        }
    }
    (lost, status(server).await["storage"]["evictions"].clone())
}

/// Memory mode reads a TcpPut's value straight into a reservation in the arena, and making
/// that reservation in a full arena evicts values: the frame's MAC is checked first, so a
/// frame refused for it evicts nothing.
#[tokio::test]
async fn a_put_refused_for_its_mac_evicts_nothing() {
    let _serial = SERIAL.lock().await;
    let (server, stored) = filled_memory_server().await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    // 32 MiB under a forged MAC: it does not fit without evicting.
    let big = vec![0xa5; 32 << 20];
    let mut f = c.frame(Opcode::TcpPut, b"forged", &big);
    f[40] ^= 1;
    c.send(&f).await;
    let (h, body) = c.recv().await.expect("a refusal");
    assert_eq!(
        h.status,
        Status::Unauthorized,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (lost, evictions) = lost_values(&server, stored).await;
    assert!(
        lost.is_empty() && evictions == 0,
        "a frame refused for its MAC evicted {evictions} acknowledged values: {lost:?} are gone"
    );
    server.shutdown().await.unwrap();
}

/// `limits.per_connection_inflight_bytes` bounds what one connection has in flight. In a
/// drive-backed mode every request runs on a blocking thread and the reader goes on at once,
/// and a get's answer holds its value, read off the drives, until it is sent: a get takes
/// budget for its value, so a client that pipelines gets and never reads the answers holds
/// about its budget of the server's memory, not one value per get.
#[tokio::test]
async fn unread_get_answers_stay_within_the_connections_inflight_budget() {
    let _serial = SERIAL.lock().await;
    let dir = drive_dir("inflight");
    let extra = format!(
        "limits:\n  max_value_size: 1 MiB\n  per_connection_inflight_bytes: 1 MiB\nstorage:\n  mode: file\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 64 MiB\n",
        dir.join("d0").display()
    );
    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let value = vec![0x33; 1 << 20];
    assert_eq!(c.call(Opcode::TcpPut, b"big", &value).await.0, Status::Ok);

    let before = rss_bytes();
    let gets = 512;
    let mut wire = Vec::new();
    for _ in 0..gets {
        wire.extend(c.frame(Opcode::TcpGet, b"big", &[]));
    }
    c.send(&wire).await;
    // Give the blocking reads time to run; keep the highest reading.
    let mut peak = before;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_bytes());
    }
    let grown = peak.saturating_sub(before);
    // The budget is 1 MiB; socket buffers hold a few more. 128 MiB is generous.
    assert!(
        grown < 128 << 20,
        "one connection whose {gets} TcpGet answers were never read grew the server by {} MiB \
         (per_connection_inflight_bytes: 1 MiB)",
        grown >> 20
    );
    drop(c);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
