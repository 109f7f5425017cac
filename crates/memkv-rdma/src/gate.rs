//! The congestion window of one peer behind an async wait, shared by every queue pair to that
//! peer and kept by the device across reconnects, with its size exported as a gauge.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use crate::metrics_names::{CWND_GAUGE, PEER_LABEL};
use crate::status::WcStatus;
use crate::window::{CongestionWindow, Epoch};

pub struct PeerWindow {
    peer: String,
    window: Mutex<CongestionWindow>,
    freed: Notify,
    waits: AtomicU64,
}

impl PeerWindow {
    pub fn new(peer: String, window: CongestionWindow) -> Self {
        let gate = Self {
            peer,
            window: Mutex::new(window),
            freed: Notify::new(),
            waits: AtomicU64::new(0),
        };
        gate.export(gate.lock().cwnd());
        gate
    }

    /// The peer's address as used in the metric label.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    pub fn snapshot(&self) -> CongestionWindow {
        self.lock().clone()
    }

    /// Waits until at least one slot is free and takes up to `wanted` (at least 1) of them.
    pub async fn acquire(&self, wanted: u32) -> u32 {
        let wanted = wanted.max(1);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before checking, so a release between the check and the wait is seen.
            freed.as_mut().enable();
            let granted = self.lock().try_acquire(wanted);
            if granted > 0 {
                return granted;
            }
            self.waits.fetch_add(1, Ordering::Relaxed);
            freed.await;
        }
    }

    /// How many times an acquire found the window full and waited.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// The window's epoch now: what a request posted now hands back with its completion.
    pub fn epoch(&self) -> Epoch {
        self.lock().epoch()
    }

    /// Takes up to `wanted` slots without waiting.
    pub fn try_acquire(&self, wanted: u32) -> u32 {
        self.lock().try_acquire(wanted)
    }

    /// Returns slots granted for work requests that were never posted.
    pub fn release_unused(&self, slots: u32) {
        if slots > 0 {
            self.lock().release_unused(slots);
            self.freed.notify_waiters();
        }
    }

    /// Accounts one completion of a posted work request.
    /// `posted`: the epoch when the request was posted ([`Self::epoch`]).
    pub fn complete(&self, status: WcStatus, posted: Epoch) {
        self.settle(|w| {
            if status.is_success() {
                w.on_success();
            } else if status.is_congestion() {
                w.on_congestion(posted);
            } else {
                w.on_other_error();
            }
        });
    }

    /// Accounts one posted work request that ended after its deadline with no answer: it
    /// counts as congestion, as if its transport retries had run out.
    /// Like the retries of all requests of one stall, these count once per loss event.
    pub fn complete_late(&self, posted: Epoch) {
        self.settle(|w| w.on_congestion(posted));
    }

    fn settle(&self, account: impl FnOnce(&mut CongestionWindow)) {
        let cwnd = {
            let mut w = self.lock();
            account(&mut w);
            w.cwnd()
        };
        self.export(cwnd);
        self.freed.notify_waiters();
    }

    fn export(&self, cwnd: u32) {
        metrics::gauge!(CWND_GAUGE, PEER_LABEL => self.peer.clone()).set(f64::from(cwnd));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CongestionWindow> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_window_is_exported_as_a_gauge_per_peer() {
        let probe = crate::metrics_probe::Probe::default();
        metrics::with_local_recorder(&probe, || {
            let gate = PeerWindow::new("::ffff:192.0.2.2".into(), CongestionWindow::new(8, 1, 16));
            let key = "memkv_rdma_cwnd{peer=::ffff:192.0.2.2}";
            assert_eq!(probe.gauge(key), Some(8.0));
            assert_eq!(gate.try_acquire(1), 1);
            gate.complete(WcStatus::RNR_RETRY_EXC_ERR, gate.epoch());
            assert_eq!(probe.gauge(key), Some(4.0));
        });
    }

    #[tokio::test]
    async fn a_full_window_makes_waiters_wait_until_a_completion() {
        let gate = Arc::new(PeerWindow::new(
            "test-peer".into(),
            CongestionWindow::new(2, 1, 4),
        ));
        assert_eq!(gate.acquire(5).await, 2);
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.acquire(1).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "window full: the waiter must wait");
        gate.complete(WcStatus::SUCCESS, gate.epoch());
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the completion")
            .unwrap();
        assert_eq!(got, 1);
        assert!(gate.waits() >= 1);
        gate.complete(WcStatus::RETRY_EXC_ERR, gate.epoch());
        assert_eq!(gate.snapshot().cwnd(), 1);
    }
}
