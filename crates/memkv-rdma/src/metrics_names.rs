//! Metric names and labels the data plane exports through the `metrics` facade.

/// Gauge: the congestion window towards a peer, in work requests.
pub const CWND_GAUGE: &str = "memkv_rdma_cwnd";
/// Counter: work requests posted, by operation (`write`, `read`).
pub const WR_TOTAL: &str = "memkv_rdma_wr_total";
/// Counter: work completions with an error status, by status name.
pub const WC_ERRORS_TOTAL: &str = "memkv_rdma_wc_errors_total";

pub const PEER_LABEL: &str = "peer";
pub const OP_LABEL: &str = "op";
pub const STATUS_LABEL: &str = "status";

/// Registers descriptions of the data plane's metrics with the installed recorder (an
/// exporter shows them as HELP text). Call once after installing the recorder.
pub fn describe() {
    metrics::describe_gauge!(
        CWND_GAUGE,
        "congestion window towards a peer: most RDMA work requests outstanding to it"
    );
    metrics::describe_counter!(WR_TOTAL, "RDMA work requests posted, by operation");
    metrics::describe_counter!(
        WC_ERRORS_TOTAL,
        "RDMA work completions with an error status, by status"
    );
}
