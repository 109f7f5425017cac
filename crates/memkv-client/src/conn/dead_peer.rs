//! Noticing a server host that died without a word (power loss, a kernel panic, a cable pulled,
//! a partition): nothing sends a reset, so without these settings the kernel retransmits for
//! about 15 minutes (`tcp_retries2`) before the connection fails, and every call routed to that
//! server waits out its whole deadline all that time. Once the connection fails, the pool backs
//! off and calls fail at once (`Unreachable`) between redials.

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// Data sent and not acknowledged for this long (or a zero window that long) fails the
/// connection. A live server's kernel acknowledges even while the process is busy, and a memkv
/// server keeps reading while it works, so only a host (or a process) that stopped for this
/// long trips it.
pub(crate) const UNACKNOWLEDGED_LIMIT: Duration = Duration::from_secs(30);
/// An idle pooled connection is probed after this long without traffic, so a dead server is
/// found before a call is routed to it.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;

/// Best effort: a platform without these options keeps the kernel's defaults (logged).
pub(crate) fn watch(stream: &TcpStream, server: &str) {
    let socket = SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    let set = socket
        .set_tcp_keepalive(&keepalive)
        .and_then(|()| socket.set_tcp_user_timeout(Some(UNACKNOWLEDGED_LIMIT)));
    if let Err(e) = set {
        tracing::debug!(server, error = %e, "dead-peer detection not set on this connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_fails_after_its_limits_not_the_kernels_15_minutes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let socket = SockRef::from(&stream);
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            None,
            "the kernel's default"
        );
        watch(&stream, "test");
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            Some(UNACKNOWLEDGED_LIMIT)
        );
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
    }
}
