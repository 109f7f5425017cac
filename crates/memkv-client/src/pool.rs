//! The connections kept to one server, opened on first use and reopened with exponential
//! backoff after a failure, so a dead server costs its callers one fast error instead of a
//! connect attempt per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use memkv_proto::AuthKey;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::conn::{CLIENT_LIMITS, Connection, Dial};
use crate::{Error, Result};

/// First retry delay after a failed connect.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Reconnect pacing of one connection slot.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last: Option<Error>,
}

impl Backoff {
    /// The delay after `failures` consecutive failures: 50 ms doubling up to 2 s.
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        BACKOFF_MIN.saturating_mul(1 << doublings).min(BACKOFF_MAX)
    }

    /// The last failure, while it is too soon to try again.
    fn waiting(&self, now: Instant) -> Option<&Error> {
        match self.retry_at {
            Some(at) if now < at => self.last.as_ref(),
            _ => None,
        }
    }

    fn failed(&mut self, now: Instant, err: Error) {
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + Backoff::delay(self.failures));
        self.last = Some(err);
    }

    fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

#[derive(Default)]
struct Slot {
    conn: Option<Arc<Connection>>,
    backoff: Backoff,
}

/// Up to `num_connections` connections to one server, used round-robin.
pub(crate) struct ServerPool {
    server: String,
    key: AuthKey,
    payload_mac: bool,
    slots: Vec<Mutex<Slot>>,
    next: AtomicUsize,
}

impl ServerPool {
    pub fn new(server: String, key: AuthKey, payload_mac: bool, num_connections: usize) -> Self {
        ServerPool {
            server,
            key,
            payload_mac,
            slots: (0..num_connections.max(1))
                .map(|_| Mutex::new(Slot::default()))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// An open connection: the next slot's, opening it if needed. While a slot is backing off
    /// after a failure, its last error is returned at once.
    pub async fn connection(&self) -> Result<Arc<Connection>> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut slot = self.slots[index].lock().await;
        if let Some(conn) = slot.conn.as_ref().filter(|c| c.is_open()) {
            return Ok(Arc::clone(conn));
        }
        slot.conn = None;
        let now = Instant::now();
        if let Some(err) = slot.backoff.waiting(now) {
            return Err(err.clone());
        }
        let dial = Dial {
            server: &self.server,
            key: &self.key,
            payload_mac: self.payload_mac,
            limits: CLIENT_LIMITS,
        };
        match Connection::open(&dial).await {
            Ok(conn) => {
                crate::metrics::connected();
                if slot.backoff.failures > 0 {
                    tracing::info!(server = %self.server, "reconnected");
                }
                slot.backoff.succeeded();
                let conn = Arc::new(conn);
                slot.conn = Some(Arc::clone(&conn));
                Ok(conn)
            }
            Err(err) => {
                if slot.backoff.failures == 0 {
                    tracing::warn!(server = %self.server, "cannot connect: {err}");
                }
                slot.backoff.failed(Instant::now(), err.clone());
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_50ms_to_2s() {
        assert_eq!(Backoff::delay(1), Duration::from_millis(50));
        assert_eq!(Backoff::delay(2), Duration::from_millis(100));
        assert_eq!(Backoff::delay(6), Duration::from_millis(1600));
        assert_eq!(Backoff::delay(7), BACKOFF_MAX);
        assert_eq!(Backoff::delay(u32::MAX), BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_slot_answers_from_memory_until_its_retry_time() {
        let mut b = Backoff::default();
        let now = Instant::now();
        b.failed(
            now,
            Error::Config("first".into()), // any error stands in for a refused connect
        );
        assert!(b.waiting(now + Duration::from_millis(49)).is_some());
        assert!(b.waiting(now + Duration::from_millis(50)).is_none());
        b.failed(now, Error::Config("second".into()));
        assert!(b.waiting(now + Duration::from_millis(99)).is_some());
        b.succeeded();
        assert!(b.waiting(now).is_none());
    }
}
