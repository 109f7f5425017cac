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

/// Counter: completed operations. Labels: `op`, `transport` (`tcp`, `rdma-rc`, `rdma-dc`),
/// `status`.
pub const OPS_TOTAL: &str = "memkv_ops_total";
/// Histogram (seconds): operation latency. Labels: `op`, `transport`.
pub const OP_DURATION_SECONDS: &str = "memkv_op_duration_seconds";
/// Counter: value bytes clients stored. TCP: request payloads; RDMA: the value a Commit
/// publishes (written one-sided before it). Label: `transport`.
pub const BYTES_IN_TOTAL: &str = "memkv_bytes_in_total";
/// Counter: value bytes clients fetched. TCP: response payloads; RDMA: the value a Lookup
/// pins for the client to read one-sided. Label: `transport`.
pub const BYTES_OUT_TOTAL: &str = "memkv_bytes_out_total";
/// Counter: blocks evicted to make room.
pub const EVICTIONS_TOTAL: &str = "memkv_evictions_total";
/// Counter: blocks whose checksum did not match on read.
pub const CHECKSUM_FAILURES_TOTAL: &str = "memkv_checksum_failures_total";
/// Counter: connections or messages refused for a bad MAC / handshake.
pub const AUTH_FAILURES_TOTAL: &str = "memkv_auth_failures_total";
/// Counter: frames refused (the connection is closed after each). Label: `reason`, one of
/// [`RefusalReason`]'s names.
pub const REFUSED_FRAMES_TOTAL: &str = "memkv_refused_frames_total";
/// Gauge: 1 while a drive serves, 0 once it went offline (I/O errors, vanished) or was
/// removed. Label: `drive` (its path). Drive-backed modes only.
pub const DRIVE_ONLINE: &str = "memkv_drive_online";
/// Counter: reads of values on a drive that failed (each served as a miss). Label: `drive`.
pub const DRIVE_READ_ERRORS_TOTAL: &str = "memkv_drive_read_errors_total";
/// Counter: writes of values to a drive that failed (each failed its put). Label: `drive`.
pub const DRIVE_WRITE_ERRORS_TOTAL: &str = "memkv_drive_write_errors_total";
/// Gauge: bytes of registered memory a drive-backed server stages RDMA values in.
pub const RDMA_STAGING_BYTES: &str = "memkv_rdma_staging_bytes";
/// Gauge: staging bytes held by puts and gets in flight.
pub const RDMA_STAGING_IN_USE_BYTES: &str = "memkv_rdma_staging_in_use_bytes";
/// Counter: RDMA requests answered busy because the staging was full (the client retries or
/// falls back to TCP).
pub const RDMA_STAGING_BUSY_TOTAL: &str = "memkv_rdma_staging_busy_total";
/// Gauge: client connections open now.
pub const CONNECTIONS: &str = "memkv_connections";
/// Counter: client connections accepted since start.
pub const CONNECTIONS_TOTAL: &str = "memkv_connections_total";
/// Counter: connections turned away because `limits.max_connections` were open.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "memkv_connections_refused_total";
pub const HANDSHAKES_PREEMPTED_TOTAL: &str = "memkv_handshakes_preempted_total";
/// Gauge: bytes values can occupy (the arena's granules, or the drives' data extents).
pub const CAPACITY_BYTES: &str = "memkv_capacity_bytes";
/// Gauge: bytes taken by stored values and open reservations (rounded to their allocation).
pub const USED_BYTES: &str = "memkv_used_bytes";
/// Gauge: capacity not used.
pub const FREE_BYTES: &str = "memkv_free_bytes";
/// Gauge: values stored now.
pub const STORED_VALUES: &str = "memkv_stored_values";
/// Gauge: sum of the stored values' lengths.
pub const STORED_VALUE_BYTES: &str = "memkv_stored_value_bytes";
/// Gauge: memory the index takes (entries and hash tables).
pub const INDEX_BYTES: &str = "memkv_index_bytes";

/// Latency buckets from 10 µs to 10 s, roughly 1-2.5-5 per decade.
pub const DURATION_BUCKETS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How a client's values move: in TCP frames, or one-sided over an RDMA RC queue pair or DC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Tcp,
    RdmaRc,
    RdmaDc,
    /// Same-host clients: values copied in and out of the shared arena.
    Shm,
}

impl Transport {
    pub const ALL: [Transport; 4] = [
        Transport::Tcp,
        Transport::RdmaRc,
        Transport::RdmaDc,
        Transport::Shm,
    ];

    /// The RDMA data path's control messages: their values move one-sided, so they are served
    /// over RDMA (RC or DC, whichever the client's Connect set up). Every other operation
    /// carries its bytes in TCP frames.
    pub fn is_rdma_control(opcode: memkv_proto::Opcode) -> bool {
        use memkv_proto::Opcode::*;
        matches!(
            opcode,
            Connect | Allocate | Commit | Abort | Lookup | Release
        )
    }

    pub const fn is_rdma(self) -> bool {
        matches!(self, Self::RdmaRc | Self::RdmaDc)
    }

    /// Values move outside the TCP frames (RDMA, or the shared arena).
    pub const fn is_one_sided(self) -> bool {
        !matches!(self, Self::Tcp)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::RdmaRc => "rdma-rc",
            Self::RdmaDc => "rdma-dc",
            Self::Shm => "shm",
        }
    }
}

/// Why a frame was refused (`memkv_refused_frames_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// Not a well-formed memkv frame: bad magic, version, opcode, flags, truncation, checksum,
    /// a response where a request belongs, an out-of-place handshake frame.
    BadFrame,
    /// Wrong key: a failed handshake proof or a frame MAC that does not verify.
    Auth,
    /// Replayed, reordered or lost frame (sequence number mismatch).
    Sequence,
    /// A key, value, payload or batch over its limit.
    TooLarge,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 4] = [
        RefusalReason::BadFrame,
        RefusalReason::Auth,
        RefusalReason::Sequence,
        RefusalReason::TooLarge,
    ];

    pub fn of(e: &memkv_proto::ProtoError) -> RefusalReason {
        use memkv_proto::ProtoError::*;
        match e {
            BadMac | Unauthorized(_) => RefusalReason::Auth,
            BadSequence { .. } => RefusalReason::Sequence,
            TooLarge { .. } => RefusalReason::TooLarge,
            _ => RefusalReason::BadFrame,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadFrame => "bad_frame",
            Self::Auth => "auth",
            Self::Sequence => "sequence",
            Self::TooLarge => "too_large",
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once) and returns its handle. With
/// `MEMKV_OTEL_ENDPOINT` set, the recorder also feeds the OTLP exporter ([`crate::otel`]).
///
/// If another recorder was installed first (by an embedding program), memkv's metrics go to
/// that recorder and the handle returned here renders an empty page; a warning says so.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        let endpoint = std::env::var(crate::otel::ENDPOINT_ENV)
            .ok()
            .filter(|e| !e.trim().is_empty());
        let exporting = endpoint.and_then(|e| match crate::otel::exporting(&e) {
            Ok(x) => Some(x),
            Err(error) => {
                tracing::error!(%error, "OTLP export is off; /v1/metrics serves as usual");
                None
            }
        });
        let installed = match exporting {
            Some(x) => metrics::set_global_recorder(crate::otel::FanOut::new(recorder, x))
                .map_err(|e| e.to_string()),
            None => metrics::set_global_recorder(recorder).map_err(|e| e.to_string()),
        };
        match installed {
            Ok(()) => {
                describe();
                register();
            }
            Err(error) => {
                tracing::warn!(%error, "a metrics recorder is already installed; /v1/metrics will be empty");
            }
        }
        handle
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
        "Value bytes stored by puts that succeeded (a batch's whole payload)"
    );
    metrics::describe_counter!(
        BYTES_OUT_TOTAL,
        metrics::Unit::Bytes,
        "Value bytes fetched by gets that found them (a batch's whole answer)"
    );
    metrics::describe_counter!(EVICTIONS_TOTAL, "Blocks evicted to make room");
    metrics::describe_counter!(
        CHECKSUM_FAILURES_TOTAL,
        "Blocks that failed checksum verification"
    );
    metrics::describe_counter!(AUTH_FAILURES_TOTAL, "Refused authentication attempts");
    metrics::describe_counter!(
        REFUSED_FRAMES_TOTAL,
        "Frames refused by reason (bad_frame, auth, sequence, too_large)"
    );
    metrics::describe_gauge!(CONNECTIONS, "Open client connections");
    metrics::describe_counter!(CONNECTIONS_TOTAL, "Accepted client connections");
    metrics::describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "Connections refused because limits.max_connections were open"
    );
    metrics::describe_counter!(
        HANDSHAKES_PREEMPTED_TOTAL,
        "Connections closed in their handshake to admit a new one at limits.max_connections"
    );
    metrics::describe_gauge!(
        CAPACITY_BYTES,
        metrics::Unit::Bytes,
        "Bytes values can occupy (arena or drives)"
    );
    metrics::describe_gauge!(
        USED_BYTES,
        metrics::Unit::Bytes,
        "Bytes used by values and open reservations"
    );
    metrics::describe_gauge!(FREE_BYTES, metrics::Unit::Bytes, "Capacity not used");
    metrics::describe_gauge!(
        DRIVE_ONLINE,
        "1 while the drive serves, 0 offline or removed"
    );
    metrics::describe_counter!(
        DRIVE_READ_ERRORS_TOTAL,
        "Reads of values on the drive that failed (served as misses)"
    );
    metrics::describe_counter!(
        DRIVE_WRITE_ERRORS_TOTAL,
        "Writes of values to the drive that failed"
    );
    metrics::describe_gauge!(
        RDMA_STAGING_BYTES,
        metrics::Unit::Bytes,
        "Registered memory a drive-backed server stages RDMA values in"
    );
    metrics::describe_gauge!(
        RDMA_STAGING_IN_USE_BYTES,
        metrics::Unit::Bytes,
        "Staging held by RDMA puts and gets in flight"
    );
    metrics::describe_counter!(
        RDMA_STAGING_BUSY_TOTAL,
        "RDMA requests answered busy because the staging was full"
    );
    metrics::describe_gauge!(STORED_VALUES, "Values stored now");
    metrics::describe_gauge!(
        STORED_VALUE_BYTES,
        metrics::Unit::Bytes,
        "Sum of the stored values' lengths"
    );
    metrics::describe_gauge!(
        INDEX_BYTES,
        metrics::Unit::Bytes,
        "Memory the index takes: an entry per stored value and the hash tables"
    );
}

/// The transports an operation can be served over, for registering its series at start.
fn transports_of(op: memkv_proto::Opcode) -> &'static [Transport] {
    if op == memkv_proto::Opcode::Connect {
        &[Transport::Tcp, Transport::RdmaRc, Transport::RdmaDc]
    } else if Transport::is_rdma_control(op) {
        &[Transport::RdmaRc, Transport::RdmaDc, Transport::Shm]
    } else {
        &[Transport::Tcp]
    }
}

/// Creates every series at zero, so a scrape right after start lists each metric (and each
/// op x transport a client can use) before the first operation.
fn register() {
    use memkv_proto::Opcode;
    let handshake = [
        Opcode::Hello,
        Opcode::Challenge,
        Opcode::Proof,
        Opcode::Ready,
    ];
    for op in Opcode::ALL.into_iter().filter(|o| !handshake.contains(o)) {
        for transport in transports_of(op) {
            let (op, transport) = (op.name(), transport.as_str());
            let ok = memkv_proto::Status::Ok.name();
            metrics::counter!(OPS_TOTAL, "op" => op, "transport" => transport, "status" => ok)
                .increment(0);
            // Registers the histogram; it renders with zero counts until the first sample.
            let _ = metrics::histogram!(OP_DURATION_SECONDS, "op" => op, "transport" => transport);
        }
    }
    for transport in Transport::ALL {
        metrics::counter!(BYTES_IN_TOTAL, "transport" => transport.as_str()).increment(0);
        metrics::counter!(BYTES_OUT_TOTAL, "transport" => transport.as_str()).increment(0);
    }
    for reason in RefusalReason::ALL {
        metrics::counter!(REFUSED_FRAMES_TOTAL, "reason" => reason.as_str()).increment(0);
    }
    for counter in [
        EVICTIONS_TOTAL,
        CHECKSUM_FAILURES_TOTAL,
        AUTH_FAILURES_TOTAL,
        CONNECTIONS_TOTAL,
        CONNECTIONS_REFUSED_TOTAL,
        HANDSHAKES_PREEMPTED_TOTAL,
    ] {
        metrics::counter!(counter).increment(0);
    }
    for gauge in [
        CONNECTIONS,
        CAPACITY_BYTES,
        USED_BYTES,
        FREE_BYTES,
        STORED_VALUES,
        STORED_VALUE_BYTES,
        INDEX_BYTES,
    ] {
        metrics::gauge!(gauge).increment(0.0);
    }
}

/// The store's size now, as the capacity gauges.
pub fn record_capacity(stats: &memkv_store::StoreStats) {
    metrics::gauge!(CAPACITY_BYTES).set(stats.usable_bytes as f64);
    metrics::gauge!(USED_BYTES).set(stats.used_bytes as f64);
    metrics::gauge!(FREE_BYTES).set(stats.usable_bytes.saturating_sub(stats.used_bytes) as f64);
    metrics::gauge!(STORED_VALUES).set(stats.blocks as f64);
    metrics::gauge!(STORED_VALUE_BYTES).set(stats.value_bytes as f64);
    metrics::gauge!(INDEX_BYTES).set(stats.index_bytes as f64);
}

/// Each drive's state and error counts (drive-backed modes). The store keeps the counts, so
/// they are copied as they are, not added to.
pub fn record_drives(drives: &[memkv_store::DeviceStats]) {
    for d in drives {
        let drive = d.path.display().to_string();
        metrics::gauge!(DRIVE_ONLINE, "drive" => drive.clone()).set(if d.online {
            1.0
        } else {
            0.0
        });
        metrics::counter!(DRIVE_READ_ERRORS_TOTAL, "drive" => drive.clone())
            .absolute(d.read_errors);
        metrics::counter!(DRIVE_WRITE_ERRORS_TOTAL, "drive" => drive).absolute(d.write_errors);
    }
}

/// The RDMA staging of a drive-backed server: its size, what is held and how often it was full.
pub fn record_staging(report: &crate::staging::StagingReport) {
    let chunk = report.usage.chunk_size as f64;
    metrics::gauge!(RDMA_STAGING_BYTES).set(chunk * report.usage.chunks_total as f64);
    metrics::gauge!(RDMA_STAGING_IN_USE_BYTES).set(chunk * report.usage.chunks_in_use as f64);
    metrics::counter!(RDMA_STAGING_BUSY_TOTAL).absolute(report.busy_total);
}

pub fn record_refusal(reason: RefusalReason) {
    metrics::counter!(REFUSED_FRAMES_TOTAL, "reason" => reason.as_str()).increment(1);
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
    crate::otel::record_operation(op, transport, status, duration, bytes_in, bytes_out);
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

pub fn connection_refused() {
    metrics::counter!(CONNECTIONS_REFUSED_TOTAL).increment(1);
}

pub fn handshake_preempted() {
    metrics::counter!(HANDSHAKES_PREEMPTED_TOTAL).increment(1);
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
            by_transport: Default::default(),
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
    fn rdma_control_messages_are_recognised() {
        use memkv_proto::Opcode;
        for op in [
            Opcode::Connect,
            Opcode::Allocate,
            Opcode::Commit,
            Opcode::Lookup,
            Opcode::Release,
        ] {
            assert!(Transport::is_rdma_control(op), "{op:?}");
        }
        for op in [
            Opcode::TcpPut,
            Opcode::TcpGet,
            Opcode::BatchGet,
            Opcode::Exists,
        ] {
            assert!(!Transport::is_rdma_control(op), "{op:?}");
        }
        assert_eq!(
            Transport::ALL.map(Transport::as_str),
            ["tcp", "rdma-rc", "rdma-dc", "shm"]
        );
    }

    #[test]
    fn refusals_are_classified_by_reason() {
        use memkv_proto::ProtoError;
        let cases = [
            (ProtoError::BadMac, "auth"),
            (ProtoError::Unauthorized("wrong proof"), "auth"),
            (
                ProtoError::BadSequence {
                    expected: 2,
                    got: 1,
                },
                "sequence",
            ),
            (
                ProtoError::TooLarge {
                    what: "value",
                    len: 9,
                    limit: 8,
                },
                "too_large",
            ),
            (ProtoError::BadMagic { found: [0; 4] }, "bad_frame"),
            (ProtoError::UnknownOpcode(0xee), "bad_frame"),
        ];
        for (e, reason) in cases {
            assert_eq!(RefusalReason::of(&e).as_str(), reason, "{e}");
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
