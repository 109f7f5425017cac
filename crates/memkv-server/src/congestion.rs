//! `network.tcp_congestion`: the congestion control of data connections, set on the listener
//! so that every accepted connection inherits it.
//!
//! Why it is a setting: BBR, the default on many cloud images, stalls some answers on loopback
//! for one or more scheduler ticks (docs/operations.md, "TCP congestion control"); an operator
//! whose clients share the host can pick another algorithm for memkv alone instead of for the
//! whole host.

use std::io;

use socket2::SockRef;
use tokio::net::TcpListener;

/// Where the kernel lists the algorithms it has, and those unprivileged processes may choose.
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Why the kernel did not take the configured algorithm.
#[derive(Debug, thiserror::Error)]
#[error("network.tcp_congestion: this host refused `{name}`: {reason}")]
pub struct CongestionError {
    name: String,
    reason: String,
}

/// Sets `name` on `listener`; accepted connections inherit it.
pub(crate) fn apply(listener: &TcpListener, name: &str) -> Result<(), CongestionError> {
    SockRef::from(listener)
        .set_tcp_congestion(name.as_bytes())
        .map_err(|e| CongestionError {
            name: name.to_owned(),
            reason: explain(&e),
        })
}

/// The algorithm a connected or listening socket uses.
#[cfg(test)]
fn current(socket: &impl std::os::fd::AsFd) -> io::Result<String> {
    let name = SockRef::from(socket).tcp_congestion()?;
    Ok(String::from_utf8_lossy(&name)
        .trim_end_matches('\0')
        .to_owned())
}

fn explain(e: &io::Error) -> String {
    let list = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned())
    };
    match e.kind() {
        io::ErrorKind::NotFound => {
            format!(
                "the kernel has no such algorithm (available: {})",
                list(AVAILABLE)
            )
        }
        io::ErrorKind::PermissionDenied => format!(
            "not allowed without CAP_NET_ADMIN (allowed: {}; available: {})",
            list(ALLOWED),
            list(AVAILABLE)
        ),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reno is built into every Linux kernel and allowed to unprivileged processes.
    #[tokio::test]
    async fn accepted_connections_inherit_the_listeners_algorithm() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        apply(&listener, "reno").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(current(&accepted).unwrap(), "reno");
        drop(client);
    }

    #[tokio::test]
    async fn an_algorithm_the_kernel_lacks_is_refused_by_key_with_the_list() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = apply(&listener, "nosuchalgo").unwrap_err().to_string();
        assert!(err.contains("network.tcp_congestion"), "{err}");
        assert!(err.contains("nosuchalgo"), "{err}");
        assert!(err.contains("reno"), "names what the kernel has: {err}");
    }
}
