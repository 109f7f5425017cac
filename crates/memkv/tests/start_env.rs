//! `memkv start` and its environment: the auth key from MEMKV_AUTH_KEY, and metrics and traces
//! exported over OTLP to MEMKV_OTEL_ENDPOINT (a receiver in the test decodes what arrives).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs `memkv start` on a config without `auth_key`; returns the child and its data address
/// (from the "memkv serving" log line).
fn start(dir: &Path, env: &[(&str, &str)]) -> (Child, String) {
    start_with(dir, "", env)
}

/// [`start`] with more `network` settings (indented lines).
fn start_with(dir: &Path, network: &str, env: &[(&str, &str)]) -> (Child, String) {
    let config = dir.join("config.yaml");
    let log = dir.join("server.log");
    std::fs::write(
        &config,
        format!("network:\n  address: 127.0.0.1:0\n{network}memory:\n  max_size: 64 MiB\n  prefault: false\nrdma:\n  enabled: false\n"),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
    for (name, _) in std::env::vars() {
        if name.starts_with("MEMKV_") || name.starts_with("OTEL_") {
            cmd.env_remove(name);
        }
    }
    let mut server = cmd
        .arg("start")
        .arg("--config")
        .arg(&config)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(rest) = text.split("memkv serving data=").nth(1) {
            let data = rest.split_whitespace().next().unwrap().to_owned();
            return (server, data);
        }
        if let Some(status) = server.try_wait().unwrap() {
            panic!("server exited {status}:\n{text}");
        }
        assert!(Instant::now() < deadline, "server did not start:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stores the five bytes `value` under `key` through `memkv put`, signed with the right key.
async fn put_value(data: &str, key: &str) {
    let mut put = memkv(data, KEY_HEX);
    put.args(["put", key, "-"]);
    let o = run(put, Some(b"value".to_vec())).await;
    assert!(o.status.success(), "{}", stderr(&o));
}

fn stop(mut server: Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(server.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_serves_on_the_configured_number_of_threads() {
    let dir = scratch("threads");
    let (server, data) = start_with(&dir, "  threads: 1\n", &[("MEMKV_AUTH_KEY", KEY_HEX)]);
    put_value(&data, "threads/key").await;
    let mut get = memkv(&data, KEY_HEX);
    get.args(["get", "threads/key"]);
    let o = run(get, None).await;
    assert_eq!(o.stdout, b"value", "{}", stderr(&o));
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(
        log.contains("serving connections on 1 runtime threads"),
        "{log}"
    );
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_takes_its_key_from_memkv_auth_key() {
    let dir = scratch("env-key");
    let (server, data) = start(&dir, &[("MEMKV_AUTH_KEY", KEY_HEX)]);
    put_value(&data, "env/key").await;
    let mut wrong = memkv(&data, WRONG_KEY_HEX);
    wrong.args(["exists", "env/key"]);
    assert_eq!(run(wrong, None).await.status.code(), Some(4));
    // The key file is neither read nor created when the environment gives the key.
    assert!(!dir.join("state/memkv/auth_key").exists());
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("auth key from MEMKV_AUTH_KEY"), "{log}");
    assert!(!log.contains(KEY_HEX), "the key must never be logged");
    stop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Metric names (and each gauge's last value) from the OTLP export requests received.
#[derive(Default)]
struct Received {
    names: BTreeSet<String>,
    service_names: BTreeSet<String>,
    gauges: std::collections::BTreeMap<String, f64>,
    /// Span name and its `memkv.transport` attribute.
    spans: BTreeSet<(String, String)>,
}

fn decode_traces(body: &[u8], into: &mut Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP traces request");
    for rs in request.resource_spans {
        for ss in rs.scope_spans {
            for span in ss.spans {
                let transport = span
                    .attributes
                    .iter()
                    .find(|a| a.key == "memkv.transport")
                    .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                        Value::StringValue(s) => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                into.spans.insert((span.name, transport));
            }
        }
    }
}

fn decode(body: &[u8], into: &mut Received) {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP metrics request");
    for rm in request.resource_metrics {
        for attr in rm.resource.iter().flat_map(|r| &r.attributes) {
            if attr.key == "service.name" {
                if let Some(Value::StringValue(s)) =
                    attr.value.as_ref().and_then(|v| v.value.clone())
                {
                    into.service_names.insert(s);
                }
            }
        }
        for sm in rm.scope_metrics {
            for m in sm.metrics {
                if let Some(Data::Gauge(g)) = &m.data {
                    for p in &g.data_points {
                        let v = match p.value {
                            Some(number_data_point::Value::AsDouble(d)) => d,
                            Some(number_data_point::Value::AsInt(i)) => i as f64,
                            None => continue,
                        };
                        into.gauges.insert(m.name.clone(), v);
                    }
                }
                into.names.insert(m.name);
            }
        }
    }
}

/// A minimal OTLP/HTTP receiver: answers every POST 200 and decodes its protobuf body.
async fn receive(
    listener: tokio::net::TcpListener,
    received: std::sync::Arc<std::sync::Mutex<Received>>,
) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let received = received.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            loop {
                // Headers.
                let end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    let mut chunk = [0u8; 8192];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let traces = head.starts_with("post /v1/traces ");
                assert!(traces || head.starts_with("post /v1/metrics "), "{head}");
                assert!(
                    head.contains("content-type: application/x-protobuf"),
                    "{head}"
                );
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .expect("a Content-Length");
                while buf.len() < end + len {
                    let mut chunk = [0u8; 65536];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = &buf[end..end + len];
                if traces {
                    decode_traces(body, &mut received.lock().unwrap());
                } else {
                    decode(body, &mut received.lock().unwrap());
                }
                buf.drain(..end + len);
                let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                if s.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_exports_its_metrics_and_traces_over_otlp_to_memkv_otel_endpoint() {
    let dir = scratch("otel");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received = std::sync::Arc::new(std::sync::Mutex::new(Received::default()));
    let receiver = tokio::spawn(receive(listener, received.clone()));
    let (server, data) = start(
        &dir,
        &[
            ("MEMKV_AUTH_KEY", KEY_HEX),
            ("MEMKV_OTEL_ENDPOINT", &endpoint),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    );
    let mut put = memkv(&data, KEY_HEX);
    put.args(["put", "otel/key", "-"]);
    let o = run(put, Some(vec![7; 4096])).await;
    assert!(o.status.success(), "{}", stderr(&o));

    let wanted = [
        "memkv_ops_total",
        "memkv_op_duration_seconds",
        "memkv_bytes_in_total",
        "memkv_refused_frames_total",
        "memkv_connections",
        "memkv_capacity_bytes",
        "memkv_stored_values",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        {
            let r = received.lock().unwrap();
            let stored = r.gauges.get("memkv_stored_values").copied().unwrap_or(0.0);
            // The CLI's put goes through the shared arena on this host (Commit over shm), or
            // over TCP where the server does not share it.
            let traced = r.spans.contains(&("TcpPut".to_owned(), "tcp".to_owned()))
                || r.spans.contains(&("Commit".to_owned(), "shm".to_owned()));
            if wanted.iter().all(|n| r.names.contains(*n)) && stored >= 1.0 && traced {
                assert!(r.service_names.contains("memkv"), "{:?}", r.service_names);
                assert!(r.gauges["memkv_capacity_bytes"] > 0.0);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after 30 s the receiver has {:?} (gauges {:?}, spans {:?}); the server log:\n{}",
                r.names,
                r.gauges,
                r.spans,
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(server);
    receiver.abort();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_drive_that_cannot_open_stops_the_start_naming_it_once() {
    let dir = scratch("drive-refused");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "network:\n  address: 127.0.0.1:0\nstorage:\n  mode: direct\n  drives:\n    - media: /dev/null\nrdma:\n  enabled: false\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .args(["start", "--config"])
        .arg(&config)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("MEMKV_AUTH_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text
        .lines()
        .find(|l| l.starts_with("memkv: "))
        .unwrap_or_else(|| panic!("no error line in:\n{text}"));
    assert_eq!(
        line,
        "memkv: storage: i/o error: storage.drives[0] (/dev/null): /dev/null is a character \
         device: a direct-mode drive is a block device or a regular file"
    );
}
