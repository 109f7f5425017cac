//! Running the data plane's futures from plain threads: they need no async runtime (their
//! wake-ups come from the completion thread), so a parked thread is enough of an executor.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on the calling thread, parking it while the future waits.
/// For synchronous callers, e.g. `block_on(qp.write(&buf, 0, len, addr, rkey))`. Do not call
/// it on an async runtime's worker thread.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::PeerWindow;
    use crate::status::WcStatus;
    use crate::window::CongestionWindow;
    use std::time::Duration;

    #[test]
    fn a_full_window_wakes_a_blocked_thread_when_a_slot_frees() {
        let gate = Arc::new(PeerWindow::new(
            "blocking".into(),
            CongestionWindow::new(1, 1, 1),
        ));
        assert_eq!(block_on(gate.acquire(3)), 1);
        let releaser = std::thread::spawn({
            let gate = gate.clone();
            move || {
                std::thread::sleep(Duration::from_millis(30));
                gate.complete(WcStatus::SUCCESS, gate.epoch());
            }
        });
        assert_eq!(block_on(gate.acquire(1)), 1);
        releaser.join().unwrap();
        assert!(gate.waits() >= 1);
    }
}
