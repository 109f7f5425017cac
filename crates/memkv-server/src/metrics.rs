//! Server metric names and recording helpers, exported in Prometheus text by the admin API
//! (`GET /v1/metrics`).
//!
//! Call [`install`] once early in start-up: until a recorder is installed, the `metrics`
//! macros record nothing. Installing is idempotent and safe when tests start many servers in
//! one process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::admin::ConnectionStatus;

/// Counter: completed operations. Labels: `op`, `transport`, `status`.
pub const OPS_TOTAL: &str = "memkv_ops_total";
/// Histogram (seconds): operation latency. Labels: `op`, `transport`.
pub const OP_DURATION_SECONDS: &str = "memkv_op_duration_seconds";
/// Counter: payload bytes received from clients in TCP frames (RDMA clients' values move
/// one-sided and are not counted). Label: `transport`.
pub const BYTES_IN_TOTAL: &str = "memkv_bytes_in_total";
/// Counter: payload bytes sent to clients. Label: `transport`.
pub const BYTES_OUT_TOTAL: &str = "memkv_bytes_out_total";
/// Counter: blocks evicted to make room.
pub const EVICTIONS_TOTAL: &str = "memkv_evictions_total";
/// Counter: blocks whose checksum did not match on read.
pub const CHECKSUM_FAILURES_TOTAL: &str = "memkv_checksum_failures_total";
/// Counter: connections or messages refused for a bad MAC / handshake.
pub const AUTH_FAILURES_TOTAL: &str = "memkv_auth_failures_total";
/// Gauge: client connections open now.
pub const CONNECTIONS: &str = "memkv_connections";
/// Counter: client connections accepted since start.
pub const CONNECTIONS_TOTAL: &str = "memkv_connections_total";

/// Latency buckets from 10 µs to 10 s, roughly 1-2.5-5 per decade.
pub const DURATION_BUCKETS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How an operation's bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Rdma,
}

impl Transport {
    /// Which transport an operation serves: the RDMA data path's control messages (Connect,
    /// Allocate, Commit, Abort, Lookup, Release) come from clients whose values move by RDMA;
    /// every other operation carries its bytes in TCP frames.
    pub fn of(opcode: memkv_proto::Opcode) -> Transport {
        use memkv_proto::Opcode::*;
        match opcode {
            Connect | Allocate | Commit | Abort | Lookup | Release => Transport::Rdma,
            _ => Transport::Tcp,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Rdma => "rdma",
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
///
/// If another recorder was installed first (by an embedding program), memkv's metrics go to
/// that recorder and the handle returned here renders an empty page; a warning says so.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| match builder().install_recorder() {
        Ok(handle) => {
            describe();
            handle
        }
        Err(error) => {
            tracing::warn!(%error, "a metrics recorder is already installed; /v1/metrics will be empty");
            builder().build_recorder().handle()
        }
    })
}

/// Prometheus text for `GET /v1/metrics`.
pub fn render() -> String {
    let handle = install();
    handle.run_upkeep();
    handle.render()
}

fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(OP_DURATION_SECONDS.to_owned()),
            &DURATION_BUCKETS,
        )
        .expect("DURATION_BUCKETS is not empty")
}

fn describe() {
    metrics::describe_counter!(
        OPS_TOTAL,
        "Completed operations by op, transport and status"
    );
    metrics::describe_histogram!(
        OP_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Operation latency"
    );
    metrics::describe_counter!(
        BYTES_IN_TOTAL,
        metrics::Unit::Bytes,
        "Payload bytes received"
    );
    metrics::describe_counter!(BYTES_OUT_TOTAL, metrics::Unit::Bytes, "Payload bytes sent");
    metrics::describe_counter!(EVICTIONS_TOTAL, "Blocks evicted to make room");
    metrics::describe_counter!(
        CHECKSUM_FAILURES_TOTAL,
        "Blocks that failed checksum verification"
    );
    metrics::describe_counter!(AUTH_FAILURES_TOTAL, "Refused authentication attempts");
    metrics::describe_gauge!(CONNECTIONS, "Open client connections");
    metrics::describe_counter!(CONNECTIONS_TOTAL, "Accepted client connections");
}

/// Records one finished operation. `op` and `status` should come from small fixed sets
/// (opcode names; `ok`, `not_found`, `error`, ...) to keep label cardinality bounded.
pub fn record_op(
    op: &'static str,
    transport: Transport,
    status: &'static str,
    duration: Duration,
    bytes_in: u64,
    bytes_out: u64,
) {
    let transport = transport.as_str();
    metrics::counter!(OPS_TOTAL, "op" => op, "transport" => transport, "status" => status)
        .increment(1);
    metrics::histogram!(OP_DURATION_SECONDS, "op" => op, "transport" => transport)
        .record(duration.as_secs_f64());
    if bytes_in > 0 {
        metrics::counter!(BYTES_IN_TOTAL, "transport" => transport).increment(bytes_in);
    }
    if bytes_out > 0 {
        metrics::counter!(BYTES_OUT_TOTAL, "transport" => transport).increment(bytes_out);
    }
}

pub fn record_evictions(blocks: u64) {
    metrics::counter!(EVICTIONS_TOTAL).increment(blocks);
}

pub fn record_checksum_failures(blocks: u64) {
    metrics::counter!(CHECKSUM_FAILURES_TOTAL).increment(blocks);
}

pub fn record_auth_failure() {
    metrics::counter!(AUTH_FAILURES_TOTAL).increment(1);
}

pub fn connection_opened() {
    metrics::counter!(CONNECTIONS_TOTAL).increment(1);
    metrics::gauge!(CONNECTIONS).increment(1.0);
}

pub fn connection_closed() {
    metrics::gauge!(CONNECTIONS).decrement(1.0);
}

/// Connection counts for `/v1/status`, kept in step with the Prometheus metrics.
#[derive(Debug, Default)]
pub struct ConnectionCounters {
    current: AtomicU64,
    total: AtomicU64,
    auth_failures: AtomicU64,
}

/// Holds one connection open in [`ConnectionCounters`]; dropping it counts the close.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<ConnectionCounters>);

impl ConnectionCounters {
    /// Counts an accepted connection until the guard is dropped.
    pub fn open(self: &Arc<Self>) -> ConnectionGuard {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.current.fetch_add(1, Ordering::Relaxed);
        connection_opened();
        ConnectionGuard(Arc::clone(self))
    }

    pub fn auth_failed(&self) {
        self.auth_failures.fetch_add(1, Ordering::Relaxed);
        record_auth_failure();
    }

    pub fn snapshot(&self) -> ConnectionStatus {
        ConnectionStatus {
            current: self.current.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            auth_failures: self.auth_failures.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Ordering::Relaxed);
        connection_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_control_messages_are_labelled_rdma() {
        use memkv_proto::Opcode;
        for op in [
            Opcode::Allocate,
            Opcode::Commit,
            Opcode::Lookup,
            Opcode::Release,
        ] {
            assert_eq!(Transport::of(op), Transport::Rdma, "{op:?}");
        }
        for op in [
            Opcode::TcpPut,
            Opcode::TcpGet,
            Opcode::BatchGet,
            Opcode::Exists,
        ] {
            assert_eq!(Transport::of(op), Transport::Tcp, "{op:?}");
        }
    }

    #[test]
    fn guards_track_open_connections() {
        let counters = Arc::new(ConnectionCounters::default());
        let first = counters.open();
        let second = counters.open();
        counters.auth_failed();
        drop(first);
        let status = counters.snapshot();
        assert_eq!(
            (status.current, status.total, status.auth_failures),
            (1, 2, 1)
        );
        drop(second);
        assert_eq!(counters.snapshot().current, 0);
    }

    #[test]
    fn buckets_span_ten_microseconds_to_ten_seconds() {
        assert_eq!(DURATION_BUCKETS.first(), Some(&0.000_01));
        assert_eq!(DURATION_BUCKETS.last(), Some(&10.0));
        assert!(DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
