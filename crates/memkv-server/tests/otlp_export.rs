//! OTLP export as an operator meets it: a collector that is down is logged, an endpoint the
//! exporter cannot use is refused at start.
//!
//! OTLP state is process-wide (the recorder and the exporters are installed once), so each
//! test runs its body in a child process of this test binary (re-executed with
//! `OTLP_EXPORT_CHILD` set and the environment the case needs).

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set in the child process that runs one test's body.
const CHILD: &str = "OTLP_EXPORT_CHILD";

/// Runs the test `name` of this binary again, alone, in a child process with `env`; asserts
/// that it passed.
fn run_in_child(name: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("MEMKV_") || k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env(CHILD, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{name} failed in its child process:\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// A `tracing` subscriber that keeps every event (level, target and fields).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={v:?}", f.name()));
            }
        }
        let mut fields = Fields(event.metadata().target().to_owned());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A loopback port nothing listens on (bound, then closed): a collector that is down.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// docs/operations.md, OpenTelemetry: "a collector that is down costs a logged export error
/// per interval". The SDK reports export failures only through its `internal-logs` feature,
/// which the workspace leaves off, so the server logs them itself; without that an operator
/// whose `MEMKV_OTEL_ENDPOINT` names a wrong port or a dead collector gets no metrics and no
/// error.
#[test]
fn a_collector_that_is_down_is_logged_as_an_export_error() {
    if !in_child() {
        let endpoint = format!("http://127.0.0.1:{}", closed_port());
        run_in_child(
            "a_collector_that_is_down_is_logged_as_an_export_error",
            &[
                ("MEMKV_OTEL_ENDPOINT", &endpoint),
                ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ("OTEL_TRACES_SAMPLER", "always_on"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        );
        return;
    }
    let endpoint = std::env::var("MEMKV_OTEL_ENDPOINT").unwrap();
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    // What `Server::start` does first: the recorder, with the OTLP fan-out for the endpoint.
    memkv_server::metrics::install();
    memkv_server::metrics::record_op(
        "TcpPut",
        memkv_server::metrics::Transport::Tcp,
        "Ok",
        Duration::from_micros(50),
        4096,
        0,
    );
    // Exports run every 200 ms; give them 100 intervals to say that they fail.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = capture.0.lock().unwrap().clone();
        if let Some((_, warning)) = events
            .iter()
            .find(|(level, _)| *level <= tracing::Level::WARN)
        {
            assert!(
                warning.contains(&endpoint),
                "the warning does not name the collector {endpoint}: {warning}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no warning or error logged while every OTLP export to a closed port failed for 20 s ({} events below WARN, the last: {:?})",
            events.len(),
            events
                .iter()
                .rev()
                .find(|(_, e)| e.contains("127.0.0.1"))
                .map(|(_, e)| e)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// docs/operations.md, OpenTelemetry: the exporter's HTTP client is built without TLS, and "an
/// endpoint the exporter cannot use ... is logged as an error at start and the server runs
/// without OTLP export": `https://` and other schemes are refused, not taken and then failed
/// at every export.
#[test]
fn an_otel_endpoint_the_exporter_cannot_use_is_refused_at_start() {
    if !in_child() {
        run_in_child(
            "an_otel_endpoint_the_exporter_cannot_use_is_refused_at_start",
            &[],
        );
        return;
    }
    for endpoint in ["https://127.0.0.1:4318", "ftp://collector:4318"] {
        assert!(
            memkv_server::otel::exporting(endpoint).is_err(),
            "MEMKV_OTEL_ENDPOINT={endpoint} was accepted, though the exporter speaks plain HTTP only"
        );
    }
}
