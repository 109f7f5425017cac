//! Client metrics through the `metrics` facade: recorded always, exported by whatever
//! recorder the application installs, or (feature `prometheus`) by `serve_from_env` on
//! `MEMKV_PROMETHEUS_BIND`.

use std::time::Duration;

use crate::Error;

/// Counter: finished requests. Labels: `op`, `outcome` (`ok` or an error kind).
pub const REQUESTS_TOTAL: &str = "memkv_client_requests_total";
/// Histogram (seconds): request latency including connecting. Label: `op`.
pub const REQUEST_SECONDS: &str = "memkv_client_request_duration_seconds";
/// Counter: request payload bytes written.
pub const BYTES_SENT_TOTAL: &str = "memkv_client_bytes_sent_total";
/// Counter: response payload bytes read.
pub const BYTES_RECEIVED_TOTAL: &str = "memkv_client_bytes_received_total";
/// Counter: connections opened (first connects and reconnects).
pub const CONNECTS_TOTAL: &str = "memkv_client_connects_total";

/// The `outcome` label of a request.
pub fn outcome(result: &Result<(), &Error>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::Unreachable { .. }) => "unreachable",
        Err(Error::Unauthorized { .. }) => "unauthorized",
        Err(Error::UnsupportedVersion { .. }) => "unsupported_version",
        Err(Error::Timeout { .. }) => "timeout",
        Err(Error::Server { .. }) => "server_error",
        Err(Error::Protocol { .. }) => "protocol_error",
        Err(Error::Disconnected { .. }) => "disconnected",
        Err(Error::Rdma { .. } | Error::RdmaUnavailable { .. }) => "rdma_error",
        Err(Error::SharedMemory { .. }) => "shared_memory_error",
        Err(
            Error::Config(_)
            | Error::Io { .. }
            | Error::TooLarge { .. }
            | Error::BufferTooSmall { .. },
        ) => "local_error",
    }
}

pub(crate) fn request(op: &'static str, result: Result<(), &Error>, elapsed: Duration) {
    metrics::counter!(REQUESTS_TOTAL, "op" => op, "outcome" => outcome(&result)).increment(1);
    metrics::histogram!(REQUEST_SECONDS, "op" => op).record(elapsed.as_secs_f64());
}

pub(crate) fn bytes(sent: usize, received: usize) {
    metrics::counter!(BYTES_SENT_TOTAL).increment(sent as u64);
    metrics::counter!(BYTES_RECEIVED_TOTAL).increment(received as u64);
}

pub(crate) fn connected() {
    metrics::counter!(CONNECTS_TOTAL).increment(1);
}

#[cfg(feature = "prometheus")]
mod exporter;
#[cfg(feature = "prometheus")]
pub(crate) use exporter::serve_from_env_once;
#[cfg(feature = "prometheus")]
pub use exporter::{PROMETHEUS_BIND_ENV, serve, serve_from_env};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_the_error_kind() {
        assert_eq!(outcome(&Ok(())), "ok");
        let e = Error::Disconnected {
            server: "s:1".into(),
            reason: String::new(),
        };
        assert_eq!(outcome(&Err(&e)), "disconnected");
        assert_eq!(outcome(&Err(&Error::Config(String::new()))), "local_error");
    }
}
