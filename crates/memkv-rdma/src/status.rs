//! Work completion status codes as the verbs ABI numbers them. Kept as the raw number so that a
//! value from a newer kernel is reported, not a panic (sideway's `From<u32>` panics on those).

use std::fmt;

/// `enum ibv_wc_status`, raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

const NAMES: [&str; 25] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_TM_ERR",
    "IBV_WC_TM_RNDV_INCOMPLETE",
    "",
];

impl WcStatus {
    pub const SUCCESS: WcStatus = WcStatus(0);
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(5);
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(10);
    pub const RETRY_EXC_ERR: WcStatus = WcStatus(12);
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(13);

    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }

    /// Transport retries ran out: the path to the peer drops packets (or the receiver is not
    /// ready). This is what the congestion window backs off on.
    pub fn is_congestion(self) -> bool {
        self == Self::RETRY_EXC_ERR || self == Self::RNR_RETRY_EXC_ERR
    }

    /// The rdma-core name, or `None` for a code this build does not know.
    pub fn name(self) -> Option<&'static str> {
        NAMES
            .get(self.0 as usize)
            .copied()
            .filter(|n| !n.is_empty())
    }

    /// A bounded label for metrics: known names, or "unknown".
    pub fn metric_label(self) -> &'static str {
        self.name().unwrap_or("unknown")
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unknown completion status {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sideway::ibverbs::completion::WorkCompletionStatus as S;

    #[test]
    fn names_match_the_verbs_numbers() {
        for (status, name) in [
            (S::Success, "IBV_WC_SUCCESS"),
            (S::WorkRequestFlushedError, "IBV_WC_WR_FLUSH_ERR"),
            (S::RemoteAccessError, "IBV_WC_REM_ACCESS_ERR"),
            (S::RetryCounterExceededError, "IBV_WC_RETRY_EXC_ERR"),
            (
                S::ResponderNotReadyRetryCounterExceededError,
                "IBV_WC_RNR_RETRY_EXC_ERR",
            ),
            (
                S::TagMatchingRendezvousIncomplete,
                "IBV_WC_TM_RNDV_INCOMPLETE",
            ),
        ] {
            assert_eq!(WcStatus(status as u32).name(), Some(name));
        }
        assert!(WcStatus::RETRY_EXC_ERR.is_congestion());
        assert!(WcStatus::RNR_RETRY_EXC_ERR.is_congestion());
        assert!(!WcStatus::WR_FLUSH_ERR.is_congestion());
    }

    #[test]
    fn unknown_codes_are_reported_not_panicked_on() {
        let s = WcStatus(999);
        assert_eq!(s.name(), None);
        assert_eq!(s.metric_label(), "unknown");
        assert!(s.to_string().contains("999"));
        assert_eq!(WcStatus(24).name(), None);
    }
}
