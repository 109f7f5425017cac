//! The TCP data plane: the listener and its connections.

mod conn;
mod connect;
mod dispatch;
mod handshake;
pub(crate) mod pending;
mod staged;
pub(crate) mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use memkv_proto::{Header, Opcode, ProtoError, Status};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::state::Shared;

/// How long connections get to finish in-flight work once the server drains.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers a connection just accepted with a Busy refusal naming `why`, and closes it: the
/// client backs off instead of waiting for a handshake that will not come.
pub(crate) fn refuse_busy(mut stream: tokio::net::TcpStream, why: String) {
    let refusal = memkv_proto::frame::encode_refusal(
        &Header::request(Opcode::Hello, 0),
        &ProtoError::Refused {
            status: Status::Busy,
            message: why,
        },
    );
    tokio::spawn(async move {
        let _ = stream.write_all(&refusal).await;
    });
}

/// At `limits.max_connections`: closes the oldest connection still in its handshake, if it is
/// old enough, so that `peer` takes its place; `false` when none is.
fn preempt_a_stalled_handshake(shared: &Shared, peer: SocketAddr, now: Instant) -> bool {
    let Some(stalled) = shared.handshakes.close_oldest(now) else {
        return false;
    };
    tracing::warn!(%peer, %stalled, "at limits.max_connections: closed the oldest connection still in its handshake to admit a new one");
    crate::metrics::handshake_preempted();
    true
}

/// Accepts connections until `shutdown` turns true, then waits for them to drain.
pub async fn serve(shared: Arc<Shared>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    let mut stop_signal = shutdown.clone();
    shared.listener_up.store(true, Ordering::Release);
    loop {
        tokio::select! {
            biased;
            _ = crate::server::stopped(&mut stop_signal) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let limit = u64::from(shared.config.limits.max_connections);
                    let now = Instant::now();
                    if shared.connections.snapshot().current >= limit
                        && !preempt_a_stalled_handshake(&shared, peer, now)
                    {
                        tracing::warn!(%peer, limit, "refusing connection: limits.max_connections reached");
                        crate::metrics::connection_refused();
                        refuse_busy(stream, format!("server is at limits.max_connections ({limit})"));
                        continue;
                    }
                    if shared.config.network.tcp_congestion.is_none()
                        && crate::congestion::loopback_off_bbr(&stream, peer)
                    {
                        tracing::debug!(%peer, "loopback connection moved from bbr to cubic (network.tcp_congestion unset)");
                    }
                    let shared = Arc::clone(&shared);
                    let stop = shutdown.clone();
                    let open = shared.connections.open();
                    let pending = shared.handshakes.begin(peer, now);
                    connections.spawn(async move {
                        conn::serve(shared, stream, peer, pending, stop).await;
                        drop(open);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    shared.listener_up.store(false, Ordering::Release);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
        connections.shutdown().await;
    }
}
