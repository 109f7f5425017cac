//! Where the completion thread leaves the outcome of one operation (one or more work
//! requests) and where the operation's future, or a blocked drop, picks it up.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::RdmaError;

#[derive(Default)]
struct State {
    outstanding: usize,
    error: Option<RdmaError>,
    waker: Option<Waker>,
}

#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<State>,
    settled: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Expects `n` more work request outcomes.
    pub fn expect(&self, n: usize) {
        self.lock().outstanding += n;
    }

    /// Forgets `n` expected outcomes (requests that were never posted).
    pub fn forget(&self, n: usize) {
        let mut s = self.lock();
        s.outstanding = s.outstanding.saturating_sub(n);
        self.wake_if_settled(s);
    }

    /// Records one work request's outcome; the first error is the operation's error.
    pub fn settle_one(&self, outcome: Result<(), RdmaError>) {
        let mut s = self.lock();
        s.outstanding = s.outstanding.saturating_sub(1);
        if let Err(e) = outcome
            && s.error.is_none()
        {
            s.error = Some(e);
        }
        self.wake_if_settled(s);
    }

    fn wake_if_settled(&self, mut s: MutexGuard<'_, State>) {
        if s.outstanding == 0 {
            let waker = s.waker.take();
            drop(s);
            self.settled.notify_all();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }

    pub fn outstanding(&self) -> usize {
        self.lock().outstanding
    }

    /// Blocks the thread until every expected outcome arrived or `limit` passed; true when
    /// settled.
    pub fn wait_blocking(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut s = self.lock();
        while s.outstanding > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = self
                .settled
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Resolves once every expected outcome arrived, to the first error if any.
    pub fn settled(&self) -> Settled<'_> {
        Settled { slot: self }
    }
}

pub(crate) struct Settled<'a> {
    slot: &'a Slot,
}

impl Future for Settled<'_> {
    type Output = Result<(), RdmaError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.lock();
        if s.outstanding == 0 {
            return Poll::Ready(s.error.take().map_or(Ok(()), Err));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn settles_after_every_outcome_with_the_first_error() {
        let slot = Arc::new(Slot::default());
        slot.expect(3);
        let s2 = slot.clone();
        let t = std::thread::spawn(move || {
            s2.settle_one(Ok(()));
            s2.settle_one(Err(RdmaError::NotConnected { qp_num: 1 }));
            s2.settle_one(Err(RdmaError::NotConnected { qp_num: 2 }));
        });
        let r = slot.settled().await;
        t.join().unwrap();
        assert_eq!(r, Err(RdmaError::NotConnected { qp_num: 1 }));
        slot.expect(2);
        slot.forget(2);
        assert!(slot.wait_blocking(Duration::from_millis(1)));
        slot.expect(1);
        assert!(!slot.wait_blocking(Duration::from_millis(10)));
    }
}
