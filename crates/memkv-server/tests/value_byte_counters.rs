//! The value byte counters (`memkv_bytes_in_total`, `memkv_bytes_out_total`, and each
//! client's `bytes_in` / `bytes_out` in `/v1/status`) count value bytes stored and fetched:
//! not refused puts, misses, or requests that move no value. Each test starts its own server;
//! metric deltas are taken while holding `SERIAL`, so the other tests of this binary cannot
//! move the process-global counters in between.

mod support;

use memkv_proto::{AuthKey, Opcode, Status};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::http_get;
use support::raw::connect;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Metric deltas are only meaningful while no other test of this binary records operations.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config() -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\n  prefault: false\nrdma:\n  enabled: false\n"
    );
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

/// The value of the series whose line starts with `series` (name and labels, in order).
fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{series} missing from:\n{scrape}"))
}

async fn scrape(server: &Server, series: &str) -> f64 {
    let (code, body) = http_get(server.admin_addr(), "/v1/metrics").await;
    assert_eq!(code, 200, "{body}");
    value(&body, series)
}

/// `clients[0]` of `/v1/status`: (ops, bytes_in, bytes_out).
async fn first_client(server: &Server) -> (u64, u64, u64) {
    let (_, body) = http_get(server.admin_addr(), "/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let c = &status["clients"][0];
    (
        c["ops"].as_u64().unwrap(),
        c["bytes_in"].as_u64().unwrap(),
        c["bytes_out"].as_u64().unwrap(),
    )
}

const TCP_IN: &str = "memkv_bytes_in_total{transport=\"tcp\"}";
const TCP_OUT: &str = "memkv_bytes_out_total{transport=\"tcp\"}";

/// A put refused (here for its checksum) stores nothing and counts nothing (it counted its
/// whole payload).
#[tokio::test]
async fn a_refused_put_counts_no_bytes_in() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let before = scrape(&server, TCP_IN).await;
    let (h, _) = c
        .call_with_checksum(Opcode::TcpPut, b"refused", &[7u8; 65536], 0xdead_beef)
        .await;
    assert_eq!(h.status, Status::ChecksumMismatch);
    let (_, body) = http_get(server.admin_addr(), "/v1/status").await;
    assert!(body.contains("\"blocks\":0"), "nothing was stored: {body}");
    let added = scrape(&server, TCP_IN).await - before;
    let (_, client_in, _) = first_client(&server).await;
    assert_eq!(
        (added, client_in),
        (0.0, 0),
        "a refused put counted as value bytes stored (metric delta, client bytes_in)"
    );
    server.shutdown().await.unwrap();
}

/// A miss fetches nothing and counts nothing (its answer's error message was counted).
#[tokio::test]
async fn a_miss_counts_no_bytes_out() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let before = scrape(&server, TCP_OUT).await;
    for i in 0..10u8 {
        let (status, _) = c.call(Opcode::TcpGet, &[b'm', i], &[]).await;
        assert_eq!(status, Status::NotFound);
    }
    let added = scrape(&server, TCP_OUT).await - before;
    let (_, _, client_out) = first_client(&server).await;
    assert_eq!(
        (added, client_out),
        (0.0, 0),
        "10 misses counted as value bytes fetched (metric delta, client bytes_out)"
    );
    server.shutdown().await.unwrap();
}

/// A batch get is a read: its list of keys is not value bytes stored (a read-only workload
/// showed write traffic).
#[tokio::test]
async fn a_batch_get_counts_no_bytes_in() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let keys: Vec<Vec<u8>> = (0..64u32)
        .map(|i| format!("a-rather-long-key-name-for-batch-read-{i:04}").into_bytes())
        .collect();
    let payload = memkv_proto::batch::encode_keys(&keys);
    let before = scrape(&server, TCP_IN).await;
    let (status, _) = c.call(Opcode::BatchGet, &[], &payload).await;
    assert_eq!(status, Status::Ok);
    let added = scrape(&server, TCP_IN).await - before;
    let (_, client_in, _) = first_client(&server).await;
    assert_eq!(
        (added, client_in),
        (0.0, 0),
        "a BatchGet of {} key bytes counted as value bytes stored (metric delta, client bytes_in)",
        payload.len()
    );
    server.shutdown().await.unwrap();
}

/// A batch get counts the values it found, not its answer's framing (a count and a 14-byte
/// header per key, found or not).
#[tokio::test]
async fn a_batch_get_counts_only_the_values_it_found() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    for i in 0..4u32 {
        let (status, _) = c
            .call(Opcode::TcpPut, format!("k{i}").as_bytes(), &[9u8; 1000])
            .await;
        assert_eq!(status, Status::Ok);
    }
    let keys: Vec<Vec<u8>> = (0..8u32).map(|i| format!("k{i}").into_bytes()).collect();
    let before = scrape(&server, TCP_OUT).await;
    let (status, _) = c
        .call(
            Opcode::BatchGet,
            &[],
            &memkv_proto::batch::encode_keys(&keys),
        )
        .await;
    assert_eq!(status, Status::Ok);
    let added = scrape(&server, TCP_OUT).await - before;
    let (_, _, client_out) = first_client(&server).await;
    assert_eq!(
        (added, client_out),
        (4000.0, 4000),
        "four 1000-byte values found of eight asked for (metric delta, client bytes_out)"
    );
    server.shutdown().await.unwrap();
}

/// A batch put counts the values it stored: not its items' headers and keys, nor an item
/// refused for its checksum (it counted its whole payload).
#[tokio::test]
async fn a_batch_put_counts_only_the_values_it_stored() {
    use memkv_proto::batch::{PutItem, encode_put_request};
    use memkv_proto::checksum;
    use memkv_proto::coverage::Coverage;
    let _serial = SERIAL.lock().await;
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let value = [5u8; 1000];
    let keys: Vec<String> = (0..4).map(|i| format!("batch-put-{i}")).collect();
    let items: Vec<PutItem<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| PutItem {
            key: k.as_bytes(),
            value: &value,
            // The last item's checksum is wrong: it is refused, the others stored.
            checksum: checksum::of(&value) ^ u64::from(i == 3),
        })
        .collect();
    let payload = encode_put_request(&items);
    let before = scrape(&server, TCP_IN).await;
    let (h, _) = c
        .call_with_checksum(
            Opcode::BatchPut,
            &[],
            &payload,
            Coverage::PutRequestItems.checksum(&payload),
        )
        .await;
    assert_eq!(h.status, Status::Ok);
    let added = scrape(&server, TCP_IN).await - before;
    let (_, client_in, _) = first_client(&server).await;
    assert_eq!(
        (added, client_in),
        (3000.0, 3000),
        "three 1000-byte values stored of four sent (metric delta, client bytes_in)"
    );
    server.shutdown().await.unwrap();
}
