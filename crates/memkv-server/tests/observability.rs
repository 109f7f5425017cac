//! What operators see of a real server from its first moment: health, every metric, clients
//! in `/v1/status`, refused frames by reason.

use std::time::Duration;

mod support;

use memkv_proto::{AuthKey, Opcode, Status};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use memkv_server::metrics;
use support::http_get;
use support::raw::connect;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn config() -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\n  prefault: false\nrdma:\n  enabled: false\n"
    );
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

/// The value of the series whose line starts with `series` (name and labels, in order).
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn health_is_right_from_the_admin_apis_first_answer() {
    for _ in 0..20 {
        let server = Server::start(config()).await.unwrap();
        let (code, body) = http_get(server.admin_addr(), "/v1/health").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("\"healthy\""), "{body}");
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn every_metric_is_listed_before_the_first_operation() {
    let server = Server::start(config()).await.unwrap();
    let (code, scrape) = http_get(server.admin_addr(), "/v1/metrics").await;
    assert_eq!(code, 200);
    for name in [
        metrics::OPS_TOTAL,
        metrics::OP_DURATION_SECONDS,
        metrics::BYTES_IN_TOTAL,
        metrics::BYTES_OUT_TOTAL,
        metrics::EVICTIONS_TOTAL,
        metrics::CHECKSUM_FAILURES_TOTAL,
        metrics::AUTH_FAILURES_TOTAL,
        metrics::REFUSED_FRAMES_TOTAL,
        metrics::CONNECTIONS,
        metrics::CONNECTIONS_TOTAL,
        metrics::CAPACITY_BYTES,
        metrics::USED_BYTES,
        metrics::FREE_BYTES,
        metrics::STORED_VALUES,
        metrics::STORED_VALUE_BYTES,
    ] {
        assert!(
            scrape.contains(&format!("# TYPE {name} ")),
            "{name} missing from:\n{scrape}"
        );
    }
    for series in [
        "memkv_ops_total{op=\"TcpGet\",transport=\"tcp\",status=\"Ok\"}",
        "memkv_ops_total{op=\"Lookup\",transport=\"rdma-rc\",status=\"Ok\"}",
        "memkv_ops_total{op=\"Commit\",transport=\"rdma-dc\",status=\"Ok\"}",
        "memkv_bytes_in_total{transport=\"rdma-rc\"}",
        "memkv_bytes_out_total{transport=\"rdma-dc\"}",
        "memkv_refused_frames_total{reason=\"bad_frame\"}",
        "memkv_refused_frames_total{reason=\"auth\"}",
        "memkv_refused_frames_total{reason=\"sequence\"}",
        "memkv_refused_frames_total{reason=\"too_large\"}",
        "memkv_op_duration_seconds_bucket{op=\"TcpPut\",transport=\"tcp\",le=\"0.001\"}",
    ] {
        assert!(
            value(&scrape, series).is_some(),
            "{series} missing from:\n{scrape}"
        );
    }
    // The capacity gauges describe this server's 64 MiB arena from the start.
    let capacity = value(&scrape, "memkv_capacity_bytes ").unwrap();
    assert!(capacity > 32.0 * 1048576.0, "{capacity}");
    let free = value(&scrape, "memkv_free_bytes ").unwrap();
    assert!(free > 0.0 && free <= capacity, "{free} of {capacity}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn status_lists_each_client_with_its_ops_and_bytes() {
    let server = Server::start(config()).await.unwrap();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();
    let mut a = connect(server.data_addr(), key.clone()).await.unwrap();
    let mut b = connect(server.data_addr(), key).await.unwrap();
    let a_port = a.stream.local_addr().unwrap().port();
    for i in 0..3u8 {
        assert_eq!(
            a.call(Opcode::TcpPut, &[b'v', i], &[i; 1000]).await.0,
            Status::Ok
        );
    }
    assert_eq!(
        b.call(Opcode::TcpGet, &[b'v', 0], &[]).await,
        (Status::Ok, vec![0; 1000])
    );
    let (_, body) = http_get(server.admin_addr(), "/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let clients = status["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 2, "{body}");
    let first = &clients[0];
    assert_eq!(first["peer"], format!("127.0.0.1:{a_port}"));
    assert_eq!(first["transport"], "tcp");
    assert_eq!(first["device"], serde_json::Value::Null);
    assert_eq!(
        (first["ops"].as_u64(), first["bytes_in"].as_u64()),
        (Some(3), Some(3000))
    );
    let second = &clients[1];
    assert_eq!(
        (second["ops"].as_u64(), second["bytes_out"].as_u64()),
        (Some(1), Some(1000))
    );
    assert_eq!(status["connections"]["by_transport"]["tcp"], 2);
    assert_eq!(status["storage"]["blocks"], 3);
    assert_eq!(status["storage"]["value_bytes_total"], 3000);
    // Three entries at least, and tables of at most a few KiB beside them.
    let index = status["storage"]["index_bytes"].as_u64().unwrap();
    assert!((3 * 40..64 << 10).contains(&index), "index_bytes {index}");
    drop(a);
    // The entry goes with the connection.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, body) = http_get(server.admin_addr(), "/v1/status").await;
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        if status["clients"].as_array().unwrap().len() == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(b);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn refused_frames_are_counted_by_reason() {
    let server = Server::start(config()).await.unwrap();
    let addr = server.data_addr();
    let admin = server.admin_addr();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();
    let reason = |r: &str| format!("memkv_refused_frames_total{{reason=\"{r}\"}}");
    let before = http_get(admin, "/v1/metrics").await.1;

    // Wrong key.
    assert!(connect(addr, AuthKey::from_bytes([9; 32])).await.is_err());
    // Replay.
    let mut c = connect(addr, key.clone()).await.unwrap();
    let f = c.frame(Opcode::Ping, &[], b"x");
    c.send(&f).await;
    c.recv().await.unwrap();
    c.send(&f).await;
    assert_eq!(c.recv().await.unwrap().0.status, Status::Unauthorized);
    // Too large.
    let mut c = connect(addr, key.clone()).await.unwrap();
    let mut f = c.frame(Opcode::TcpPut, b"k", b"v");
    f[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    c.send(&f).await;
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.stream.read_to_end(&mut sink)).await;
    // Not a memkv frame at all.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xAB; 200]).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;

    let after = http_get(admin, "/v1/metrics").await.1;
    for r in ["auth", "sequence", "too_large", "bad_frame"] {
        let (b, a) = (
            value(&before, &reason(r)).unwrap_or(0.0),
            value(&after, &reason(r)).unwrap_or(0.0),
        );
        // Other tests in this process may refuse frames too; ours add at least one each.
        assert!(a >= b + 1.0, "{r}: {b} -> {a}");
    }
    server.shutdown().await.unwrap();
}

/// A connection turned away at `limits.max_connections` is counted (it was counted nowhere).
#[tokio::test]
async fn connections_refused_at_the_limit_are_counted() {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nlimits:\n  max_connections: 1\n"
    );
    let server = Server::start(ServerConfig::from_yaml_str(&yaml, "test").unwrap())
        .await
        .unwrap();
    let refused = |scrape: &str| value(scrape, "memkv_connections_refused_total").unwrap_or(0.0);
    let before = refused(&http_get(server.admin_addr(), "/v1/metrics").await.1);
    let _held = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let second = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap()).await;
    assert!(
        second.is_err(),
        "a second connection is refused at the limit"
    );
    let after = refused(&http_get(server.admin_addr(), "/v1/metrics").await.1);
    assert!(after >= before + 1.0, "{before} -> {after}");
    server.shutdown().await.unwrap();
}
