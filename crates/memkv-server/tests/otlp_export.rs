//! OTLP export as an operator meets it: an endpoint the exporter cannot use is refused at
//! start.
//!
//! OTLP state is process-wide (the recorder and the exporters are installed once), so each
//! test runs its body in a child process of this test binary (re-executed with
//! `OTLP_EXPORT_CHILD` set and the environment the case needs).

use std::process::Command;

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
