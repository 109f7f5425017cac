//! Named errors of the data plane: each says which call or which limit, never just "failed".

use memkv_fabric::FabricError;
use thiserror::Error;

use crate::dc::unavailable::DcUnavailable;
use crate::status::WcStatus;

/// Why a data plane call did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RdmaError {
    /// The fabric refused the port or the peer (empty P_Key entry, MTU above active, port
    /// down, subnet mismatch, ...). The message is the fabric's own.
    #[error("{0}")]
    Fabric(#[from] FabricError),

    #[error("verbs call {call} failed on {device}: {reason} (errno {errno})")]
    Verbs {
        call: &'static str,
        device: String,
        errno: i32,
        reason: String,
    },

    /// A work request completed with an error; the queue pair is now in the error state.
    #[error(
        "{op} on queue pair {qp_num} completed with {status} (vendor error {vendor_err:#x}); \
         the queue pair is broken"
    )]
    QueuePairError {
        qp_num: u32,
        op: &'static str,
        status: WcStatus,
        vendor_err: u32,
    },

    /// The queue pair broke earlier (error completion, timeout or abort) and takes no new work.
    #[error("queue pair {qp_num} is broken ({reason}); connect a new one")]
    QueuePairBroken { qp_num: u32, reason: String },

    /// No completion arrived in time. The queue pair was moved to the error state so that the
    /// NIC stops touching the memory of the operation.
    #[error("{op} on queue pair {qp_num} got no completion within {deadline_ms} ms")]
    Timeout {
        qp_num: u32,
        op: &'static str,
        deadline_ms: u64,
    },

    #[error("local range {offset}+{len} is outside the {region_len}-byte registered region")]
    OutOfBounds {
        offset: usize,
        len: usize,
        region_len: usize,
    },

    #[error("{what} of {requested} exceeds the limit {limit}")]
    TooLarge {
        what: &'static str,
        requested: u64,
        limit: u64,
    },

    #[error("queue pair {qp_num} is not connected; call connect with the peer's endpoint first")]
    NotConnected { qp_num: u32 },

    #[error("queue pair {qp_num} is already connected")]
    AlreadyConnected { qp_num: u32 },

    #[error("the peer's endpoint is unusable: {reason}")]
    BadPeerEndpoint { reason: String },

    /// Dynamically Connected transport cannot run on the device; the reason names it.
    #[error("DC transport unavailable: {0}")]
    DcUnavailable(#[from] DcUnavailable),

    #[error("invalid argument {name} = {value}: {limit}")]
    InvalidArgument {
        name: &'static str,
        value: String,
        limit: &'static str,
    },
}

impl RdmaError {
    pub(crate) fn verbs(call: &'static str, device: &str, err: &std::io::Error) -> Self {
        RdmaError::Verbs {
            call,
            device: device.to_owned(),
            errno: err.raw_os_error().unwrap_or(0),
            reason: err.to_string(),
        }
    }

    pub(crate) fn verbs_errno(call: &'static str, device: &str, errno: i32) -> Self {
        Self::verbs(call, device, &std::io::Error::from_raw_os_error(errno))
    }
}
