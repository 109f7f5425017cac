//! Which servers an `auto` client sends values to over TCP after an RDMA failure, and for how
//! long. The first failure used to switch the whole process to TCP for good, so one server
//! restarting (or one refusing RDMA in a mixed fleet) took RDMA away from every server for the
//! client's whole life; now only that server's values go over TCP, for [`RETRY_AFTER`], and
//! then RDMA is tried again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a server's values go over TCP after an RDMA failure before RDMA is tried again.
/// Long enough that a server whose RDMA stays broken costs one failed attempt (then a TCP
/// retry) per period, short enough that a restarted server is back on RDMA soon.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// One server's state.
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

    /// An RDMA failure at `now`. While RDMA is in use, values go over TCP until
    /// [`RETRY_AFTER`] later and this returns `true` (the caller logs the switch once); a
    /// failure while on TCP (an operation that had started before, or one refused because the
    /// server is on TCP) changes nothing.
    pub fn failed(&self, now: Instant, reason: String) -> bool {
        let now_ms = self.millis(now);
        let until = self.millis(now + RETRY_AFTER);
        let switched = self
            .tcp_until_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |was| {
                (now_ms >= was).then_some(until)
            })
            .is_ok();
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
            f.failed(t0, "server restarted".into()),
            "the switch is reported once"
        );
        assert!(
            !f.failed(t0 + Duration::from_secs(1), "again".into()),
            "a failure while on TCP changes nothing"
        );
        assert!(!f.rdma_at(t0 + RETRY_AFTER / 2));
        assert_eq!(
            f.reason_at(t0 + RETRY_AFTER / 2).as_deref(),
            Some("server restarted"),
            "the first failure's reason"
        );
        let retry = t0 + RETRY_AFTER + Duration::from_millis(2);
        assert!(
            f.rdma_at(retry),
            "RDMA is tried again {RETRY_AFTER:?} after the failure"
        );
        assert_eq!(f.reason_at(retry), None);
        assert!(
            f.failed(retry, "still down".into()),
            "a new switch after the retry"
        );
        assert_eq!(f.reason_at(retry).as_deref(), Some("still down"));
    }
}
