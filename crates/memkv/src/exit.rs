//! Exit codes, so scripts can tell outcomes apart. Documented in `memkv --help` and
//! docs/cli.md.

use memkv_client::Error;

pub const OK: i32 = 0;
/// Any failure without a more specific code.
pub const FAILURE: i32 = 1;
/// Bad command line (clap's own code).
pub const USAGE: i32 = 2;
/// get / delete / exists: the key does not exist.
pub const NOT_FOUND: i32 = 3;
/// The server refused our auth key (or could not prove it holds it).
pub const UNAUTHORIZED: i32 = 4;
/// A server could not be reached or dropped the connection.
pub const UNREACHABLE: i32 = 5;
/// An operation missed its deadline.
pub const TIMEOUT: i32 = 6;
/// Client and server protocol versions do not fit together.
pub const UNSUPPORTED_VERSION: i32 = 7;
/// RDMA was required (transport rdma, net verify --transport rdma) but unavailable or failed.
pub const RDMA_UNAVAILABLE: i32 = 8;

/// The `after_help` of `memkv --help`.
pub const HELP: &str = "\
Exit codes:
  0   success
  1   error (message on stderr)
  2   usage error
  3   not found (get, delete, exists)
  4   authentication failed (wrong auth key)
  5   server unreachable or connection lost
  6   timed out
  7   protocol version mismatch
  8   RDMA required but unavailable or failed (transport rdma; net verify)
  10  net doctor: warnings, no failures
  11  net doctor: at least one check failed
  64  net show, net doctor: no port matches --device/--port
  69  net show: this host has no RDMA devices

Client settings come from MEMKV_CONFIG (YAML), then MEMKV_SERVERS, MEMKV_AUTH_KEY,
MEMKV_TRANSPORT, MEMKV_NUM_CONNECTIONS, MEMKV_TIMEOUT_MS, then --servers, --auth-key,
--timeout-ms. Without a key, the local server's key file is used.";

/// The exit code for a client error.
pub fn for_error(err: &Error) -> i32 {
    match err {
        Error::Unauthorized { .. } => UNAUTHORIZED,
        Error::Unreachable { .. } | Error::Disconnected { .. } => UNREACHABLE,
        Error::Timeout { .. } => TIMEOUT,
        Error::UnsupportedVersion { .. } => UNSUPPORTED_VERSION,
        // Strict RDMA without a usable rail, or an RDMA transfer that failed.
        Error::RdmaUnavailable { .. } | Error::Rdma { .. } => RDMA_UNAVAILABLE,
        _ => FAILURE,
    }
}

/// An error that ends the command with a chosen code.
#[derive(Debug)]
pub struct Exit {
    pub code: i32,
    pub message: Option<String>,
}

impl Exit {
    pub fn with(code: i32, message: impl Into<String>) -> Exit {
        Exit {
            code,
            message: Some(message.into()),
        }
    }

    pub fn silent(code: i32) -> Exit {
        Exit {
            code,
            message: None,
        }
    }
}

impl From<Error> for Exit {
    fn from(err: Error) -> Exit {
        Exit::with(for_error(&err), err.to_string())
    }
}

impl From<anyhow::Error> for Exit {
    fn from(err: anyhow::Error) -> Exit {
        Exit::with(FAILURE, chain_message(&err))
    }
}

/// The error and its causes, each text once. Many errors already end with their source's text
/// (thiserror's `"storage: {0}"` on a `#[from]` field), which `{:#}` prints again at every
/// level: "storage: i/o error: X: i/o error: X: X".
fn chain_message(err: &anyhow::Error) -> String {
    let mut message = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

impl From<std::io::Error> for Exit {
    fn from(err: std::io::Error) -> Exit {
        Exit::with(FAILURE, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        // As thiserror writes `#[error("i/o error: {0}")] Io(#[from] io::Error)`.
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "i/o error: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::other("drive0: No such file or directory");
        let err = anyhow::Error::from(Wrapped(io)).context("storage");
        assert_eq!(
            chain_message(&err),
            "storage: i/o error: drive0: No such file or directory"
        );
        // A cause that adds something is kept.
        let err = anyhow::Error::from(std::io::Error::other("refused")).context("connect");
        assert_eq!(chain_message(&err), "connect: refused");
    }

    #[test]
    fn client_errors_map_to_their_codes() {
        let server = "s:1".to_owned();
        assert_eq!(
            for_error(&Error::Unauthorized {
                server: server.clone(),
                message: String::new()
            }),
            UNAUTHORIZED
        );
        assert_eq!(
            for_error(&Error::Unreachable {
                server: server.clone(),
                source: Arc::new(std::io::ErrorKind::ConnectionRefused.into())
            }),
            UNREACHABLE
        );
        assert_eq!(
            for_error(&Error::Timeout {
                server,
                op: "get",
                after: Duration::from_secs(1)
            }),
            TIMEOUT
        );
        assert_eq!(
            for_error(&Error::RdmaUnavailable {
                reason: "no RDMA devices".into()
            }),
            RDMA_UNAVAILABLE
        );
        assert_eq!(
            for_error(&Error::Rdma {
                server: "s:1".into(),
                reason: "QP error".into()
            }),
            RDMA_UNAVAILABLE
        );
        assert_eq!(for_error(&Error::Config("bad".into())), FAILURE);
    }

    #[test]
    fn help_lists_every_code() {
        for code in [
            OK,
            FAILURE,
            USAGE,
            NOT_FOUND,
            UNAUTHORIZED,
            UNREACHABLE,
            TIMEOUT,
            UNSUPPORTED_VERSION,
            RDMA_UNAVAILABLE,
            memkv_fabric::doctor::EXIT_DOCTOR_WARNINGS,
            memkv_fabric::doctor::EXIT_DOCTOR_FAILURES,
            memkv_fabric::EXIT_NO_MATCHING_PORT,
            memkv_fabric::EXIT_NO_RDMA_DEVICES,
        ] {
            assert!(HELP.contains(&format!("\n  {code:<2}  ")), "code {code}");
        }
    }
}
