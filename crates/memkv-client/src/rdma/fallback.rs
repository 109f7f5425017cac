//! When an `auto` client sends values over TCP after an RDMA failure, and for how long. The
//! first failures switched the process to TCP for good, so one server restarting (or one
//! refusing RDMA in a mixed fleet) took RDMA away from every server for the client's whole
//! life; now RDMA is tried again after [`RETRY_AFTER`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long values go over TCP after an RDMA failure before RDMA is tried again. Long enough
/// that a server whose RDMA stays broken costs one failed attempt (then a TCP retry) per
/// period, short enough that a restarted server is back on RDMA soon.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(30);

pub(crate) struct Fallback {
    epoch: Instant,
    /// Milliseconds after `epoch` until which values go over TCP; 0: RDMA in use.
    tcp_until_ms: AtomicU64,
    reason: Mutex<Option<String>>,
}

impl Fallback {
    pub fn new(now: Instant) -> Fallback {
        Fallback {
            epoch: now,
            tcp_until_ms: AtomicU64::new(0),
            reason: Mutex::new(None),
        }
    }

    fn millis(&self, at: Instant) -> u64 {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// Whether operations should try RDMA at `now`.
    pub fn rdma_at(&self, now: Instant) -> bool {
        self.millis(now) >= self.tcp_until_ms.load(Ordering::Relaxed)
    }

    /// An RDMA failure at `now`: values go over TCP until [`RETRY_AFTER`] later. `true` when
    /// RDMA was in use until now (the caller logs the switch once).
    pub fn failed(&self, now: Instant, reason: String) -> bool {
        let until = self.millis(now + RETRY_AFTER);
        let was = self.tcp_until_ms.swap(until, Ordering::Relaxed);
        let switched = self.millis(now) >= was;
        if switched {
            *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
        }
        switched
    }

    /// Why values go over TCP at `now`; `None` while RDMA is in use.
    pub fn reason_at(&self, now: Instant) -> Option<String> {
        if self.rdma_at(now) {
            return None;
        }
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_sends_values_over_tcp_until_rdma_is_tried_again() {
        let t0 = Instant::now();
        let f = Fallback::new(t0);
        assert!(f.rdma_at(t0));
        assert_eq!(f.reason_at(t0), None);
        assert!(
            f.failed(t0, "server 1 restarted".into()),
            "the switch is reported once"
        );
        assert!(!f.failed(t0 + Duration::from_secs(1), "again".into()));
        assert!(!f.rdma_at(t0 + RETRY_AFTER / 2));
        assert_eq!(
            f.reason_at(t0 + RETRY_AFTER / 2).as_deref(),
            Some("server 1 restarted"),
            "the first failure's reason"
        );
        // A failure while on TCP pushed the retry back: 30 s after the last failure.
        assert!(!f.rdma_at(t0 + RETRY_AFTER));
        let retry = t0 + Duration::from_secs(1) + RETRY_AFTER + Duration::from_millis(2);
        assert!(f.rdma_at(retry));
        assert_eq!(f.reason_at(retry), None);
        assert!(
            f.failed(retry, "still down".into()),
            "a new switch after the retry"
        );
        assert_eq!(f.reason_at(retry).as_deref(), Some("still down"));
    }
}
