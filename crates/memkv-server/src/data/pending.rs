//! Connections still in their handshake, oldest first. A server at `limits.max_connections`
//! closes the oldest of them to admit a new connection, so a peer that opens connections and
//! never authenticates cannot hold every slot for the handshake's 10 s deadline: honest
//! handshakes finish in a round trip or two, so the oldest pending one is almost always the
//! stalled one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A handshake younger than this is never closed for a newcomer, so a burst of honest
/// connections at the limit does not close each other in turn.
pub const PREEMPTIBLE_AFTER: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct PendingHandshakes {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Ids grow with time, so the first entry is the oldest.
    waiting: BTreeMap<u64, Waiting>,
}

struct Waiting {
    since: Instant,
    peer: SocketAddr,
    close: oneshot::Sender<()>,
}

/// One connection's place in the registry; dropping it (the handshake ended) removes it.
pub struct Pending {
    registry: Arc<PendingHandshakes>,
    id: u64,
    closed: oneshot::Receiver<()>,
}

impl PendingHandshakes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a connection whose handshake starts now.
    pub fn begin(self: &Arc<Self>, peer: SocketAddr, now: Instant) -> Pending {
        let (close, closed) = oneshot::channel();
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.waiting.insert(
            id,
            Waiting {
                since: now,
                peer,
                close,
            },
        );
        Pending {
            registry: Arc::clone(self),
            id,
            closed,
        }
    }

    /// Closes the oldest handshake that has been pending for at least [`PREEMPTIBLE_AFTER`]
    /// and returns its peer; `None` when there is none that old.
    pub fn close_oldest(&self, now: Instant) -> Option<SocketAddr> {
        let mut inner = self.lock();
        let oldest = inner.waiting.first_entry()?;
        if now.saturating_duration_since(oldest.get().since) < PREEMPTIBLE_AFTER {
            return None;
        }
        let waiting = oldest.remove();
        // The connection may have just finished its handshake and dropped its receiver; then
        // it is not counted as closed, and the newcomer still gets in (one over, briefly).
        let _ = waiting.close.send(());
        Some(waiting.peer)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().waiting.len()
    }
}

impl Pending {
    /// Resolves once the server has closed this handshake for a newer connection.
    pub async fn preempted(&mut self) {
        if (&mut self.closed).await.is_err() {
            // The sender lives in the registry until this Pending drops; never reached.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.registry.lock().waiting.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[tokio::test]
    async fn the_oldest_handshake_past_the_grace_period_is_closed_first() {
        let registry = Arc::new(PendingHandshakes::default());
        let t0 = Instant::now();
        let mut first = registry.begin(peer(1), t0);
        let _second = registry.begin(peer(2), t0 + Duration::from_millis(100));
        assert_eq!(
            registry.close_oldest(t0 + PREEMPTIBLE_AFTER / 2),
            None,
            "too young"
        );
        assert_eq!(registry.close_oldest(t0 + PREEMPTIBLE_AFTER), Some(peer(1)));
        first.preempted().await;
        assert_eq!(
            registry.close_oldest(t0 + PREEMPTIBLE_AFTER),
            None,
            "the second is 100 ms younger"
        );
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn a_finished_handshake_leaves_the_registry() {
        let registry = Arc::new(PendingHandshakes::default());
        let t0 = Instant::now();
        drop(registry.begin(peer(1), t0));
        assert_eq!(registry.len(), 0);
        assert_eq!(registry.close_oldest(t0 + PREEMPTIBLE_AFTER * 2), None);
    }
}
