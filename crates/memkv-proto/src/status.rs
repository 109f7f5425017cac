//! Stable numeric status codes carried in every response header.

/// The outcome of a request. The numeric values are part of the wire format and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// The request succeeded.
    Ok = 0,
    /// The key (or reservation, or pin) does not exist.
    NotFound = 1,
    /// The key exists and the operation does not overwrite.
    AlreadyExists = 2,
    /// The store is full and eviction is disabled or found nothing to evict.
    Full = 3,
    /// A key, value, batch or frame exceeds a limit.
    TooLarge = 4,
    /// The request is malformed.
    BadRequest = 5,
    /// Authentication failed.
    Unauthorized = 6,
    /// The peer speaks a newer protocol version than this build.
    UnsupportedVersion = 7,
    /// The operation did not complete before its deadline.
    Timeout = 8,
    /// The server failed in a way that is not the client's fault.
    Internal = 9,
    /// The payload does not match its checksum.
    ChecksumMismatch = 10,
    /// The server is out of per-connection or global capacity right now; retry later.
    Busy = 11,
    /// The server does not offer this operation (for example RDMA Connect when RDMA is down).
    Unsupported = 12,
    /// A reservation or pin lease expired before it was used.
    LeaseExpired = 13,
    /// The server is shutting down and accepts no new work.
    ShuttingDown = 14,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 15] = [
        Status::Ok,
        Status::NotFound,
        Status::AlreadyExists,
        Status::Full,
        Status::TooLarge,
        Status::BadRequest,
        Status::Unauthorized,
        Status::UnsupportedVersion,
        Status::Timeout,
        Status::Internal,
        Status::ChecksumMismatch,
        Status::Busy,
        Status::Unsupported,
        Status::LeaseExpired,
        Status::ShuttingDown,
    ];

    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Decodes a wire code; `None` for a code this build does not know.
    pub fn from_code(code: u16) -> Option<Status> {
        Status::ALL.get(usize::from(code)).copied()
    }

    /// A stable, human-readable name (the variant name).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "Ok",
            Status::NotFound => "NotFound",
            Status::AlreadyExists => "AlreadyExists",
            Status::Full => "Full",
            Status::TooLarge => "TooLarge",
            Status::BadRequest => "BadRequest",
            Status::Unauthorized => "Unauthorized",
            Status::UnsupportedVersion => "UnsupportedVersion",
            Status::Timeout => "Timeout",
            Status::Internal => "Internal",
            Status::ChecksumMismatch => "ChecksumMismatch",
            Status::Busy => "Busy",
            Status::Unsupported => "Unsupported",
            Status::LeaseExpired => "LeaseExpired",
            Status::ShuttingDown => "ShuttingDown",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(usize::from(s.code()), i);
            assert_eq!(Status::from_code(s.code()), Some(*s));
        }
        assert_eq!(Status::from_code(Status::ALL.len() as u16), None);
        assert_eq!(Status::from_code(u16::MAX), None);
    }
}
