//! Protocol errors. Each maps to a wire [`Status`] so a peer learns why it was refused.

use crate::status::Status;

/// Why a frame, message or handshake step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The first four bytes are not memkv's magic.
    #[error("bad frame magic {found:02x?}: not a memkv peer")]
    BadMagic {
        /// The bytes that arrived.
        found: [u8; 4],
    },
    /// The peer speaks a newer protocol than this build.
    #[error(
        "unsupported protocol version {peer}: this build speaks versions up to {ours}; upgrade servers first"
    )]
    UnsupportedVersion {
        /// The peer's version.
        peer: u8,
        /// The newest version this build speaks.
        ours: u8,
    },
    /// An opcode this build does not know.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A status code this build does not know.
    #[error("unknown status code {0}")]
    UnknownStatus(u16),
    /// Flag bits this version does not define.
    #[error("unknown header flags {0:#06x}")]
    UnknownFlags(u16),
    /// A length over its limit.
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large (key, value, frame payload, batch).
        what: &'static str,
        /// The length that arrived.
        len: u64,
        /// The limit it exceeds.
        limit: u64,
    },
    /// A batch with more items than the limit allows.
    #[error("batch of {count} items exceeds the limit of {limit} items")]
    TooManyItems {
        /// Items the batch claims.
        count: u64,
        /// The most items a batch may hold.
        limit: u64,
    },
    /// The input ended early.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Structurally invalid content.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The frame's MAC does not verify: altered, forged or keyed differently.
    #[error("frame authentication failed (MAC mismatch)")]
    BadMac,
    /// A frame arrived out of sequence: replayed, reordered or dropped. Answered with
    /// [`Status::Unauthorized`]: a sequence error is indistinguishable from a replay.
    #[error(
        "frame sequence {got} where {expected} was expected (replayed, reordered or lost frame)"
    )]
    BadSequence {
        /// The next sequence number the receiver expected.
        expected: u64,
        /// The one that arrived.
        got: u64,
    },
    /// The payload does not match the header's checksum.
    #[error(
        "payload checksum mismatch: header says {expected:#018x}, payload hashes to {actual:#018x}"
    )]
    ChecksumMismatch {
        /// The checksum in the header.
        expected: u64,
        /// The checksum of the bytes received.
        actual: u64,
    },
    /// The handshake failed: wrong key or a peer that does not follow the protocol.
    #[error("authentication failed: {0}")]
    Unauthorized(&'static str),
    /// A handshake frame arrived where it does not belong.
    #[error("handshake: unexpected {got:?} while {state}")]
    UnexpectedFrame {
        /// The opcode that arrived.
        got: crate::Opcode,
        /// What the state machine was waiting for.
        state: &'static str,
    },
    /// The peer refused us with a status and message.
    #[error("peer refused: {status}: {message}")]
    Refused {
        /// The peer's status.
        status: Status,
        /// The peer's explanation.
        message: String,
    },
}

impl ProtoError {
    /// The status a server sends back for this error.
    pub fn status(&self) -> Status {
        match self {
            ProtoError::UnsupportedVersion { .. } => Status::UnsupportedVersion,
            ProtoError::TooLarge { .. } | ProtoError::TooManyItems { .. } => Status::TooLarge,
            ProtoError::ChecksumMismatch { .. } => Status::ChecksumMismatch,
            ProtoError::BadMac | ProtoError::BadSequence { .. } | ProtoError::Unauthorized(_) => {
                Status::Unauthorized
            }
            ProtoError::Refused { status, .. } => *status,
            _ => Status::BadRequest,
        }
    }
}
