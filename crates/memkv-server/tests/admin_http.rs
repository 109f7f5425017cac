//! Admin API over real loopback sockets, with a test-double StatusSource.

mod support;

use support::fixture;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memkv_server::admin::*;
use memkv_server::config::{ConfigErrorKind, ServerConfig, TlsFiles};
use memkv_server::metrics::{self, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Test double standing in for the server: answers whatever the test sets.
struct FakeSource {
    health: Mutex<HealthInputs>,
    readiness: Mutex<Readiness>,
}

impl FakeSource {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            health: Mutex::new(HealthInputs {
                data_listener_up: true,
                rdma_expected: false,
                rdma_active: false,
                drives_online: 2,
                drives_offline: 0,
            }),
            readiness: Mutex::new(Readiness::Starting),
        })
    }
}

impl StatusSource for FakeSource {
    fn status(&self) -> StatusReport {
        StatusReport {
            version: "0.1.0-test".into(),
            instance: "00112233445566778899aabbccddeeff".into(),
            uptime_secs: 42,
            address: "127.0.0.1:9900".into(),
            memory: MemoryStatus {
                backing: "anonymous".into(),
                arena_bytes: 1 << 30,
                block_size: 2 << 20,
            },
            storage: StorageStatus {
                mode: "file".into(),
                raw_bytes_total: 200,
                usable_bytes_total: 180,
                used_bytes_total: 50,
                free_bytes_total: 130,
                value_bytes_total: 40,
                blocks: 3,
                index_bytes: 4800,
                evictions: 1,
                checksum_failures: 0,
                devices: vec![DeviceStatus {
                    media: "/tmp/d0".into(),
                    raw_bytes: 200,
                    usable_bytes: 180,
                    used_bytes: 50,
                    online: true,
                    state: "online".into(),
                    read_errors: 2,
                    write_errors: 1,
                }],
            },
            connections: ConnectionStatus {
                current: 1,
                total: 7,
                auth_failures: 2,
                by_transport: [("tcp".to_owned(), 1)].into(),
            },
            transports: TransportStatus {
                tcp: true,
                rdma: false,
                shared_memory: false,
            },
            rdma: RdmaStatus {
                active: false,
                reason: Some("rdma.enabled is false".into()),
                devices: vec![],
                staging: None,
            },
            clients: vec![ClientStatus {
                id: 7,
                peer: "127.0.0.1:40000".into(),
                transport: "tcp".into(),
                device: None,
                connected_at_unix: 1_700_000_000,
                connected_secs: 5,
                ops: 12,
                bytes_in: 4096,
                bytes_out: 8192,
            }],
        }
    }

    fn health(&self) -> HealthReport {
        HealthReport::assess(*self.health.lock().unwrap())
    }

    fn readiness(&self) -> Readiness {
        *self.readiness.lock().unwrap()
    }
}

struct Running {
    address: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), AdminError>>,
}

async fn start(source: Arc<FakeSource>, tls: Option<TlsFiles>) -> Running {
    start_within(source, tls, AdminLimits::default()).await
}

async fn start_within(
    source: Arc<FakeSource>,
    tls: Option<TlsFiles>,
    limits: AdminLimits,
) -> Running {
    let listener = bind_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_admin(listener, tls, limits, source, async {
        let _ = stopped.await;
    }));
    Running {
        address,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("admin server stops after the shutdown signal");
        result.unwrap().unwrap();
    }
}

struct Reply {
    code: u16,
    head: String,
    body: String,
}

fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP head and body");
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        code,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

fn request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

/// Minimal HTTP/1.1 GET over a plain TCP stream.
async fn get(address: SocketAddr, path: &str) -> Reply {
    parse_reply(&get_raw(address, path).await)
}

async fn get_raw(address: SocketAddr, path: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request(path).as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    // A TLS listener may reset the connection after a plaintext request; keep what arrived.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("server answers or closes within 10 s");
    raw
}

fn json(reply: &Reply) -> serde_json::Value {
    assert!(
        reply.head.contains("content-type: application/json"),
        "{}",
        reply.head
    );
    serde_json::from_str(&reply.body).unwrap()
}

#[tokio::test]
async fn health_reports_status_and_503_when_unhealthy() {
    let source = FakeSource::new();
    let server = start(source.clone(), None).await;

    let reply = get(server.address, "/v1/health").await;
    assert_eq!(reply.code, 200);
    let body = json(&reply);
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["rdma_active"], false);
    assert_eq!(body["drives_online"], 2);
    assert_eq!(body["drives_offline"], 0);
    assert_eq!(body["drives_total"], 2);

    source.health.lock().unwrap().drives_offline = 1;
    let reply = get(server.address, "/v1/health").await;
    assert_eq!(
        (reply.code, json(&reply)["status"].clone()),
        (200, "degraded".into())
    );

    source.health.lock().unwrap().drives_online = 0;
    let reply = get(server.address, "/v1/health").await;
    assert_eq!(reply.code, 503);
    assert_eq!(json(&reply)["status"], "unhealthy");

    *source.health.lock().unwrap() = HealthInputs {
        data_listener_up: false,
        ..HealthInputs::default()
    };
    assert_eq!(get(server.address, "/v1/health").await.code, 503);
    server.stop().await;
}

#[tokio::test]
async fn ready_follows_the_server_lifecycle() {
    let source = FakeSource::new();
    let server = start(source.clone(), None).await;
    let reply = get(server.address, "/v1/ready").await;
    assert_eq!((reply.code, reply.body.as_str()), (503, "starting"));
    *source.readiness.lock().unwrap() = Readiness::Ready;
    let reply = get(server.address, "/v1/ready").await;
    assert_eq!((reply.code, reply.body.as_str()), (200, "ok"));
    *source.readiness.lock().unwrap() = Readiness::Draining;
    let reply = get(server.address, "/v1/ready").await;
    assert_eq!((reply.code, reply.body.as_str()), (503, "draining"));
    server.stop().await;
}

#[tokio::test]
async fn status_has_the_documented_shape() {
    let server = start(FakeSource::new(), None).await;
    let reply = get(server.address, "/v1/status").await;
    assert_eq!(reply.code, 200);
    let body = json(&reply);
    for key in [
        "version",
        "instance",
        "uptime_secs",
        "address",
        "memory",
        "storage",
        "connections",
        "transports",
        "rdma",
    ] {
        assert!(body.get(key).is_some(), "missing {key} in {body}");
    }
    assert_eq!(body["memory"]["backing"], "anonymous");
    assert_eq!(body["storage"]["raw_bytes_total"], 200);
    assert_eq!(body["storage"]["usable_bytes_total"], 180);
    assert_eq!(body["storage"]["used_bytes_total"], 50);
    assert_eq!(body["storage"]["devices"][0]["media"], "/tmp/d0");
    assert_eq!(body["storage"]["devices"][0]["online"], true);
    assert_eq!(body["storage"]["devices"][0]["read_errors"], 2);
    assert_eq!(body["storage"]["devices"][0]["write_errors"], 1);
    assert_eq!(body["connections"]["auth_failures"], 2);
    assert_eq!(body["transports"]["tcp"], true);
    assert_eq!(body["rdma"]["reason"], "rdma.enabled is false");
    let typed: StatusReport = serde_json::from_value(body).unwrap();
    assert_eq!(typed, FakeSource::new().status());

    assert_eq!(get(server.address, "/v1/nope").await.code, 404);
    server.stop().await;
}

#[tokio::test]
async fn metrics_render_recorded_operations() {
    let server = start(FakeSource::new(), None).await;
    metrics::record_op(
        "admin_test_put",
        Transport::Tcp,
        "ok",
        Duration::from_micros(150),
        4096,
        0,
    );
    metrics::record_op(
        "admin_test_put",
        Transport::Tcp,
        "ok",
        Duration::from_millis(3),
        4096,
        0,
    );
    metrics::connection_opened();
    let reply = get(server.address, "/v1/metrics").await;
    assert_eq!(reply.code, 200);
    assert!(
        reply.head.contains("content-type: text/plain"),
        "{}",
        reply.head
    );
    let ops_line = reply
        .body
        .lines()
        .find(|l| l.starts_with(metrics::OPS_TOTAL) && l.contains("op=\"admin_test_put\""))
        .unwrap_or_else(|| panic!("no ops counter in:\n{}", reply.body));
    assert!(
        ops_line.contains("transport=\"tcp\"") && ops_line.contains("status=\"ok\""),
        "{ops_line}"
    );
    assert!(ops_line.ends_with(" 2"), "{ops_line}");
    let bucket = format!("{}_bucket", metrics::OP_DURATION_SECONDS);
    let buckets: Vec<&str> = reply
        .body
        .lines()
        .filter(|l| l.starts_with(&bucket) && l.contains("admin_test_put"))
        .collect();
    assert!(
        buckets
            .iter()
            .any(|l| l.contains("le=\"0.00001\"") && l.ends_with(" 0")),
        "{buckets:?}"
    );
    assert!(
        buckets
            .iter()
            .any(|l| l.contains("le=\"0.005\"") && l.ends_with(" 2")),
        "{buckets:?}"
    );
    assert!(
        reply
            .body
            .contains("memkv_bytes_in_total{transport=\"tcp\"}"),
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains("# TYPE memkv_connections gauge"),
        "{}",
        reply.body
    );
    server.stop().await;
}

#[tokio::test]
async fn bind_error_names_the_address() {
    let taken = bind_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let address = taken.local_addr().unwrap();
    let error = bind_admin(address).await.unwrap_err().to_string();
    assert!(error.contains(&address.to_string()), "{error}");
}

fn fixture_tls() -> TlsFiles {
    TlsFiles {
        cert: fixture("test-only-cert.pem"),
        key: fixture("test-only-key.pem"),
    }
}

/// HTTPS GET with a blocking rustls client that trusts only the test-only certificate.
fn https_get(address: SocketAddr, path: &str) -> Reply {
    use std::io::{Read, Write};

    let mut stream = support::tls_stream(address);
    stream.write_all(request(path).as_bytes()).unwrap();
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        // Servers may close without close_notify; the reply is complete by then.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => panic!("HTTPS read failed: {e}"),
    }
    parse_reply(&raw)
}

#[tokio::test]
async fn https_serves_with_pem_files() {
    let source = FakeSource::new();
    *source.readiness.lock().unwrap() = Readiness::Ready;
    let server = start(source, Some(fixture_tls())).await;
    let address = server.address;
    let reply = tokio::task::spawn_blocking(move || https_get(address, "/v1/ready"))
        .await
        .unwrap();
    assert_eq!((reply.code, reply.body.as_str()), (200, "ok"));
    let plain = get_raw(server.address, "/v1/ready").await;
    assert!(
        !plain.starts_with(b"HTTP/1.1 200"),
        "plain HTTP must not be served on the HTTPS port"
    );
    server.stop().await;
}

#[tokio::test]
async fn tls_file_errors_name_the_file() {
    let missing = TlsFiles {
        cert: fixture("absent-cert.pem"),
        key: fixture("test-only-key.pem"),
    };
    let error = load_tls(&missing).unwrap_err().to_string();
    assert!(error.contains("absent-cert.pem"), "{error}");

    let swapped = TlsFiles {
        cert: fixture("test-only-key.pem"),
        key: fixture("test-only-cert.pem"),
    };
    let error = load_tls(&swapped).unwrap_err().to_string();
    assert!(
        error.contains("test-only-key.pem") && error.contains("CERTIFICATE"),
        "{error}"
    );

    let listener = bind_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let error = serve_admin(
        listener,
        Some(missing),
        AdminLimits::default(),
        FakeSource::new(),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, AdminError::TlsFile { .. }), "{error}");
}

#[test]
fn half_set_tls_pair_is_refused_by_config() {
    let cert = fixture("test-only-cert.pem");
    let text = format!("network:\n  tls_cert: {}\n", cert.display());
    let error = ServerConfig::from_yaml_str(&text, "admin.yaml").unwrap_err();
    assert_eq!(error.kind, ConfigErrorKind::InvalidValue);
    assert_eq!(error.key.as_deref(), Some("network.tls_cert"));
    assert_eq!(error.line, Some(2));
}

/// Reads until the server closes `stream` (EOF or a reset); panics if it is still open after
/// `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) {
    let mut sink = Vec::new();
    tokio::time::timeout(within, stream.read_to_end(&mut sink))
        .await
        .expect("the server closes the connection")
        .ok();
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_and_the_admitted_ones_still_answer() {
    let limits = AdminLimits {
        max_connections: 4,
        ..AdminLimits::default()
    };
    let server = start_within(FakeSource::new(), None, limits).await;
    let mut admitted = Vec::new();
    for _ in 0..4 {
        let stream = TcpStream::connect(server.address).await.unwrap();
        admitted.push(stream);
    }
    // Accepting is asynchronous: wait until the fifth is turned away, not just queued.
    let mut fifth = TcpStream::connect(server.address).await.unwrap();
    closed_within(&mut fifth, Duration::from_secs(5)).await;

    let mut first = admitted.remove(0);
    first
        .write_all(request("/v1/health").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    first.read_to_end(&mut raw).await.unwrap();
    assert_eq!(parse_reply(&raw).code, 200);

    // That connection closed, so its place is free again.
    let reply = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let raw = get_raw(server.address, "/v1/health").await;
            if !raw.is_empty() {
                return parse_reply(&raw);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a place frees up once an admitted connection closes");
    assert_eq!(reply.code, 200);
    drop(admitted);
    server.stop().await;
}

#[tokio::test]
async fn a_request_head_sent_a_byte_at_a_time_is_cut_off() {
    let limits = AdminLimits {
        header_timeout: Duration::from_millis(300),
        ..AdminLimits::default()
    };
    let server = start_within(FakeSource::new(), None, limits).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream
        .write_all(b"GET /v1/health HTTP/1.1\r\n")
        .await
        .unwrap();
    let drip = async {
        // Each header line resets an idle timeout, never the header timeout.
        for i in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let line = format!("X-Slow-{i}: y\r\n");
            if stream.write_all(line.as_bytes()).await.is_err() {
                return true;
            }
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(4), drip).await;
    assert!(
        matches!(cut, Ok(true)),
        "a head still arriving after 4 s of a 300 ms header timeout was not cut off"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let limits = AdminLimits {
        idle_timeout: Duration::from_millis(300),
        ..AdminLimits::default()
    };
    let server = start_within(FakeSource::new(), None, limits).await;
    // Idle from the start, and idle after a keep-alive request was answered.
    let mut silent = TcpStream::connect(server.address).await.unwrap();
    closed_within(&mut silent, Duration::from_secs(3)).await;
    let mut kept = TcpStream::connect(server.address).await.unwrap();
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 64];
    let n = kept.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    closed_within(&mut kept, Duration::from_secs(3)).await;
    server.stop().await;
}
