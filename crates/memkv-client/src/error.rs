//! The client's error type. "Not found" is not an error: gets return `Ok(None)`, deletes and
//! existence checks return `false`.

use std::sync::Arc;
use std::time::Duration;

use memkv_proto::{ProtoError, Status};

/// Result alias for client operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an operation failed. Cheap to clone (I/O sources are shared), so one failed batch chunk
/// can report the same error for each of its items. Messages never contain key material.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The server could not be reached (connection refused, no route, reset during connect),
    /// or the client is backing off after such a failure.
    #[error("server {server} is unreachable: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The server refused the handshake, or could not prove it holds our key.
    #[error("server {server} refused authentication: {message}")]
    Unauthorized { server: String, message: String },
    /// The server speaks a protocol version this build cannot use, or refuses ours.
    #[error("server {server}: {message}")]
    UnsupportedVersion { server: String, message: String },
    /// The operation missed its deadline.
    #[error("{op} on server {server} timed out after {after:?}")]
    Timeout {
        server: String,
        op: &'static str,
        after: Duration,
    },
    /// The server answered with an error status.
    #[error("server {server} answered {status}: {message}")]
    Server {
        server: String,
        status: Status,
        message: String,
    },
    /// A frame from the server failed verification (MAC, sequence, checksum, layout); the
    /// connection it arrived on was closed.
    #[error("protocol error from server {server}: {source}")]
    Protocol {
        server: String,
        #[source]
        source: ProtoError,
    },
    /// The connection closed while the request was outstanding.
    #[error("connection to server {server} lost: {reason}")]
    Disconnected { server: String, reason: String },
    /// Bad client configuration; the message names the key or variable.
    #[error("client configuration: {0}")]
    Config(String),
    /// Local I/O (reading a key or config file).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// No RDMA rail could be used on this host (no device, a fabric check failed, ...).
    /// Only `transport: rdma` reports it; `auto` falls back to TCP instead.
    #[error("RDMA unavailable: {reason}")]
    RdmaUnavailable { reason: String },
    /// An RDMA transfer or queue-pair setup with one server failed.
    #[error("RDMA with server {server}: {reason}")]
    Rdma { server: String, reason: String },
    /// The same-host transport with one server failed: it could not be attached (under
    /// `transport: shm`), or a copy through its mapped arena did not hold up.
    #[error("shared memory with server {server}: {reason}")]
    SharedMemory { server: String, reason: String },
    /// A key, value or batch exceeds a protocol limit, or a key is empty (`len` 0); nothing
    /// was sent.
    #[error("{}", too_large(what, *len, *limit))]
    TooLarge {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    /// A value does not fit the caller's buffer (the `get_*_into` operations).
    #[error("a value of {len} bytes does not fit the buffer of {capacity} bytes")]
    BufferTooSmall { len: u64, capacity: u64 },
}

fn too_large(what: &str, len: u64, limit: u64) -> String {
    if len == 0 {
        return format!("an empty {what} is refused: a {what} is 1 to {limit} bytes");
    }
    format!("{what} of {len} bytes exceeds the limit of {limit}")
}

impl Error {
    /// The server this error concerns, when there is one.
    pub fn server(&self) -> Option<&str> {
        match self {
            Error::Unreachable { server, .. }
            | Error::Unauthorized { server, .. }
            | Error::UnsupportedVersion { server, .. }
            | Error::Timeout { server, .. }
            | Error::Server { server, .. }
            | Error::Protocol { server, .. }
            | Error::Disconnected { server, .. }
            | Error::Rdma { server, .. }
            | Error::SharedMemory { server, .. } => Some(server),
            Error::Config(_)
            | Error::Io { .. }
            | Error::TooLarge { .. }
            | Error::BufferTooSmall { .. }
            | Error::RdmaUnavailable { .. } => None,
        }
    }

    /// The server answered Busy: it could not take this value now (a drive-backed server's
    /// RDMA staging is full). Retrying later, or over TCP, can succeed.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            Error::Server {
                status: Status::Busy,
                ..
            }
        )
    }

    /// Maps an error status in a response to an error.
    pub(crate) fn from_status(server: &str, status: Status, payload: &[u8]) -> Error {
        let message = String::from_utf8_lossy(payload).into_owned();
        let server = server.to_owned();
        match status {
            Status::Unauthorized => Error::Unauthorized { server, message },
            Status::UnsupportedVersion => Error::UnsupportedVersion { server, message },
            _ => Error::Server {
                server,
                status,
                message,
            },
        }
    }

    /// Maps a handshake failure.
    pub(crate) fn from_handshake(server: &str, err: ProtoError) -> Error {
        let server = server.to_owned();
        match err {
            ProtoError::Refused { status, message } => match status {
                Status::Unauthorized => Error::Unauthorized { server, message },
                Status::UnsupportedVersion => Error::UnsupportedVersion { server, message },
                // A server at `limits.max_connections` turns the connection away: it cannot be
                // reached now, like one that refuses the TCP connect, and is backed off alike
                // (the kind says the server itself answered: `pool/probe.rs`).
                Status::Busy => Error::Unreachable {
                    server,
                    source: Arc::new(std::io::Error::new(
                        std::io::ErrorKind::ResourceBusy,
                        message,
                    )),
                },
                _ => Error::Server {
                    server,
                    status,
                    message,
                },
            },
            ProtoError::Unauthorized(why) => Error::Unauthorized {
                server,
                message: why.to_owned(),
            },
            e @ ProtoError::UnsupportedVersion { .. } => Error::UnsupportedVersion {
                server,
                message: e.to_string(),
            },
            source => Error::Protocol { server, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_refusals_map_to_named_variants() {
        let e = Error::from_handshake(
            "s:1",
            ProtoError::Refused {
                status: Status::Unauthorized,
                message: "wrong key".into(),
            },
        );
        assert!(matches!(e, Error::Unauthorized { ref message, .. } if message == "wrong key"));
        assert_eq!(e.server(), Some("s:1"));
        let e = Error::from_handshake("s:1", ProtoError::UnsupportedVersion { peer: 2, ours: 1 });
        assert!(matches!(e, Error::UnsupportedVersion { .. }), "{e}");
        let e = Error::from_handshake(
            "s:1",
            ProtoError::Refused {
                status: Status::Busy,
                message: "server is at limits.max_connections (1)".into(),
            },
        );
        assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
        assert!(e.to_string().contains("limits.max_connections (1)"), "{e}");
        let e = Error::from_handshake("s:1", ProtoError::BadMac);
        assert!(matches!(e, Error::Protocol { .. }));
    }

    #[test]
    fn statuses_map_to_named_variants() {
        let e = Error::from_status("s:1", Status::Full, b"store full");
        assert!(e.to_string().contains("Full") && e.to_string().contains("store full"));
        assert!(matches!(
            Error::from_status("s:1", Status::Unauthorized, b""),
            Error::Unauthorized { .. }
        ));
    }
}
