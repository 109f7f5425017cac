//! `network.tcp_congestion`: the congestion control of data connections, set on the listener
//! so that every accepted connection inherits it.
//!
//! Why it is a setting: BBR, the default on many cloud images, stalls some answers on loopback
//! for one or more scheduler ticks (docs/operations.md, "TCP congestion control"); an operator
//! whose clients share the host can pick another algorithm for memkv alone instead of for the
//! whole host. Left unset, the host's algorithm applies, except that a loopback connection
//! the host would run on BBR runs on cubic ([`loopback_off_bbr`]).

use std::io;
use std::net::SocketAddr;

use socket2::SockRef;
use tokio::net::TcpListener;

/// What a loopback connection leaves BBR for: built into every kernel the server runs on, and
/// one an unprivileged process may choose.
const LOOPBACK_ALGORITHM: &str = "cubic";

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

/// With `network.tcp_congestion` unset: moves a connection from this host (`peer` loopback)
/// off BBR, onto cubic. BBR paces by a bottleneck bandwidth that loopback does not have, and
/// there it holds some answers (exactly 17 segments, values of about 1 MiB) for a scheduler
/// tick or more; that costs a same-host client 5-10x in p99 and gains nothing. Connections from
/// other hosts, and loopback ones on any other algorithm, keep the host's. Best effort: a
/// kernel that refuses leaves the connection as it was. `true` when it moved one.
pub(crate) fn loopback_off_bbr(stream: &impl std::os::fd::AsFd, peer: SocketAddr) -> bool {
    if !peer.ip().to_canonical().is_loopback() {
        return false;
    }
    let socket = SockRef::from(stream);
    match socket.tcp_congestion() {
        Ok(name) if name.split(|&b| b == 0).next() == Some(b"bbr".as_slice()) => socket
            .set_tcp_congestion(LOOPBACK_ALGORITHM.as_bytes())
            .is_ok(),
        _ => false,
    }
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

    /// Needs BBR (`tcp_bbr`), which many kernels have but not all: where setting it on a
    /// listener fails, there is nothing to move off and the test says so.
    #[tokio::test]
    async fn loopback_connections_leave_bbr_and_others_keep_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        if let Err(e) = apply(&listener, "bbr") {
            eprintln!("skipped: this kernel gives no bbr ({e})");
            return;
        }
        let addr = listener.local_addr().unwrap();
        let _first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (from_here, peer) = listener.accept().await.unwrap();
        assert_eq!(current(&from_here).unwrap(), "bbr");
        assert!(loopback_off_bbr(&from_here, peer));
        assert_eq!(current(&from_here).unwrap(), "cubic");
        // Told the peer is another host, a connection keeps BBR.
        let _second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (other, _) = listener.accept().await.unwrap();
        assert!(!loopback_off_bbr(
            &other,
            "192.0.2.7:40000".parse().unwrap()
        ));
        assert_eq!(current(&other).unwrap(), "bbr");
        // An IPv4-mapped loopback address is loopback too.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().unwrap();
        assert!(loopback_off_bbr(&other, mapped));
        assert_eq!(current(&other).unwrap(), "cubic");
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
