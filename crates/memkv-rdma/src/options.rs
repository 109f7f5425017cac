//! Settings of a queue pair (RC) or of a DC initiator pool: deadlines, retries, queue depth.
//! Pure.

use std::time::Duration;

/// Per queue pair settings. The defaults suit a data-centre fabric and Soft-RoCE alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpOptions {
    /// An operation whose work requests have not all completed by then ends with
    /// [`RdmaError::Timeout`](crate::RdmaError::Timeout) and breaks the pair.
    pub op_deadline: Duration,
    /// Local ACK timeout exponent: 4.096 us * 2^n per try (14: about 67 ms).
    pub ack_timeout: u8,
    /// Transport retries before IBV_WC_RETRY_EXC_ERR (at most 7).
    pub retry_count: u8,
    /// Receiver-not-ready retries (7: infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this side asks peers to wait (12: 0.64 ms).
    pub min_rnr_timer: u8,
    /// Send queue (and CQ) depth; raised to the congestion window's maximum if below it.
    pub send_queue_depth: u32,
}

impl Default for QpOptions {
    fn default() -> Self {
        Self {
            op_deadline: Duration::from_secs(30),
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            send_queue_depth: 256,
        }
    }
}
