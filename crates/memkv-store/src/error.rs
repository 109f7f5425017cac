//! The one error type every store operation returns.

use thiserror::Error;

/// Errors returned by [`crate::Store`] operations.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The key (or reservation / pin id) is not present.
    #[error("not found")]
    NotFound,
    /// No space is left and eviction is disabled or found nothing evictable.
    #[error("store is full: {0}")]
    Full(String),
    /// A key, value or configured size exceeds its limit.
    #[error("{what} is too large: {len} bytes (limit {limit})")]
    TooLarge {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    /// The request itself is invalid (bad config, wrong mode, misuse of a reservation).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The checksum given at commit does not match the bytes in the reservation. The message
    /// leaves `actual` out: it goes back to the client, which may not have written those bytes
    /// (a reservation holds whatever its space held before), and must not learn their hash.
    #[error("checksum mismatch: the bytes do not hash to the expected {expected:#018x}")]
    ChecksumMismatch { expected: u64, actual: u64 },
    /// On-disk format written by a newer build.
    #[error("unsupported on-disk format version {found} (this build supports up to {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// On-disk structures are damaged or do not belong together.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// An operating-system I/O error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The reservation or pin existed but its lease ran out before it was used.
    #[error("lease expired for id {0}")]
    LeaseExpired(u64),
    /// A drive change named a drive the store does not have; the message lists its drives.
    #[error("{0}")]
    UnknownDrive(String),
    /// No reservation with this id exists (never issued, already committed or aborted).
    #[error("unknown reservation id {0}")]
    UnknownReservation(u64),
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, StoreError>;
