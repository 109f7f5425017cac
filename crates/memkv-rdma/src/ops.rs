//! One operation (WRITE or READ of one or more transfers) on either transport: its work
//! requests go out in chains, each as large as the peer's congestion window and the transport
//! allow (one doorbell each), and the operation ends when every one of them has completed.
//! What differs (where a chain may go, how it is handed to the provider) is behind [`Sender`].

use std::sync::Arc;

use crate::completion::QueuePairs;
use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::inflight::{FLUSH_GRACE, Owner};
use crate::op::Op;
use crate::slot::Slot;
use crate::transfer::Chunk;

/// How one operation's work requests reach the wire: on an RC pair, always its one queue pair;
/// through a DC pool, the initiator the pool's selector gives the peer.
pub(crate) trait Sender {
    type Pairs: QueuePairs;

    fn pairs(&self) -> &Self::Pairs;
    /// What every request of this operation carries ([`crate::inflight::InFlight::tag`]).
    fn tag(&self) -> <Self::Pairs as QueuePairs>::Tag;
    /// Waits for room for up to `wanted` (at least one) requests on one queue pair: which one,
    /// and how many (at least one) fit. Err: none of the usable ones can take them.
    async fn place(&self, wanted: u32) -> Result<(usize, u32), RdmaError>;
    /// Gives back `count` places on `queue` for requests that were not posted.
    fn unplace(&self, _queue: usize, _count: u32) {}
    /// Hands `chunks` to the provider as one chain on `queue` (one doorbell), with ids from
    /// `first_id` on. On failure: how many of them the provider took.
    fn ring(
        &self,
        queue: usize,
        op: Op,
        chunks: &[Chunk],
        first_id: u64,
    ) -> Result<(), (usize, RdmaError)>;
}

/// Posts `chunks` (at least one) under `window` and waits for all of them.
pub(crate) async fn execute<S: Sender>(
    sender: &S,
    op: Op,
    chunks: &[Chunk],
    window: &Arc<PeerWindow>,
) -> Result<(), RdmaError> {
    let pairs = sender.pairs();
    let slot = Arc::new(Slot::default());
    let mut guard = InFlightGuard {
        pairs,
        slot: &slot,
        queues: Vec::new(),
        armed: true,
    };
    let mut posted = 0usize;
    let mut failure = None;
    while posted < chunks.len() {
        let wanted = u32::try_from(chunks.len() - posted).unwrap_or(u32::MAX);
        // Held by a guard across the wait for a place: a future dropped there (a caller's
        // timeout, a cancelled task) would otherwise keep them, and the window is the peer's
        // for the life of the process, so enough cancellations would stall every operation.
        let mut granted = Unposted {
            window,
            slots: window.acquire(wanted).await,
        };
        let (queue, count) = match sender.place(granted.slots).await {
            Ok(placed) => placed,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        // `count` slots are now the posted requests', which the completions credit back.
        window.release_unused(granted.slots - count);
        granted.slots = 0;
        if !guard.queues.contains(&queue) {
            guard.queues.push(queue);
        }
        let batch = &chunks[posted..posted + count as usize];
        let owner = Owner {
            slot: &slot,
            op,
            window,
            queue,
            tag: sender.tag(),
        };
        let rung = pairs.work().post(&owner, batch, |first_id| {
            sender.ring(queue, op, batch, first_id)
        });
        match rung {
            Ok(()) => posted += batch.len(),
            Err((done, e)) => {
                // `done <= count`, a u32.
                let unposted = count - done as u32;
                sender.unplace(queue, unposted);
                window.release_unused(unposted);
                pairs.break_queue(queue, &e.to_string());
                failure = Some(e);
                break;
            }
        }
    }
    let completed = slot.settled().await;
    guard.armed = false;
    // A completion error says more than "broken" or a refused post.
    match (completed, failure) {
        (Err(e), _) => Err(e),
        (Ok(()), Some(e)) => Err(e),
        (Ok(()), None) => Ok(()),
    }
}

/// Window slots granted to an operation and not (yet) handed to posted requests; given back
/// when dropped.
struct Unposted<'a> {
    window: &'a PeerWindow,
    slots: u32,
}

impl Drop for Unposted<'_> {
    fn drop(&mut self) {
        self.window.release_unused(self.slots);
    }
}

/// Keeps memory safe when an operation's future is dropped before its completions arrived:
/// the NIC may still be reading or writing the borrowed memory, so the queue pairs the
/// operation posted on are broken (which flushes every request outstanding on them) and the
/// drop waits for the flush. It waits for as long as that takes: the completion thread ends a
/// request without its flush only once the pair is verifiably stopped, and returning earlier
/// would hand the memory back while the NIC may still use it.
struct InFlightGuard<'a, Q: QueuePairs> {
    pairs: &'a Q,
    slot: &'a Slot,
    /// The queue pairs this operation posted on.
    queues: Vec<usize>,
    armed: bool,
}

impl<Q: QueuePairs> Drop for InFlightGuard<'_, Q> {
    fn drop(&mut self) {
        if !self.armed || self.slot.outstanding() == 0 {
            return;
        }
        for &queue in &self.queues {
            self.pairs
                .break_queue(queue, "an operation was dropped while in flight");
        }
        let limit = self.pairs.work().deadline + FLUSH_GRACE * 2;
        while !self.slot.wait_blocking(limit) {
            tracing::error!(
                device = self.pairs.device_name(),
                qp_num = self.queues.first().map(|&q| self.pairs.qp_num(q)),
                "work requests of a dropped operation did not complete in {limit:?}; still \
                 waiting, since the NIC may still use their memory"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::{Pin, pin};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use crate::completion::{check_deadlines, on_completion};
    use crate::cq::{NotifiedCq, WorkCompletion};
    use crate::status::WcStatus;
    use crate::window::CongestionWindow;
    use crate::work_requests::WorkRequests;

    /// One queue pair whose "NIC" completes each chain on another thread; a chain may be
    /// refused after `refuse_after` requests.
    struct Fake {
        work: WorkRequests<()>,
        /// Closed (taken) when the test is done, which ends the NIC's thread.
        rung: Mutex<Option<mpsc::Sender<(u64, usize)>>>,
        chains: Mutex<Vec<usize>>,
        refuse_after: Option<usize>,
        breaks: Mutex<Vec<String>>,
        unplaced: Mutex<u32>,
    }

    /// What the test queue pairs differ in; the rest of [`QueuePairs`] is the same for all:
    /// one queue pair, completions handed in directly, breaks recorded.
    trait FakePair: Send + Sync + 'static {
        fn requests(&self) -> &WorkRequests<()>;
        fn breaks(&self) -> &Mutex<Vec<String>>;
        fn stopped(&self) -> bool;
    }

    impl<T: FakePair> QueuePairs for T {
        type Tag = ();
        fn work(&self) -> &WorkRequests<()> {
            self.requests()
        }
        fn cq(&self) -> &NotifiedCq {
            unreachable!("completions are handed in directly")
        }
        fn device_name(&self) -> &str {
            "fake"
        }
        fn queue_count(&self) -> usize {
            1
        }
        fn qp_num(&self, _queue: usize) -> u32 {
            9
        }
        fn is_broken(&self, _queue: usize) -> bool {
            !self.breaks().lock().unwrap().is_empty()
        }
        fn break_queue(&self, _queue: usize, reason: &str) {
            self.breaks().lock().unwrap().push(reason.to_owned());
        }
        fn is_stopped(&self, queue: usize) -> bool {
            self.stopped() && self.is_broken(queue)
        }
    }

    impl FakePair for Fake {
        fn requests(&self) -> &WorkRequests<()> {
            &self.work
        }
        fn breaks(&self) -> &Mutex<Vec<String>> {
            &self.breaks
        }
        fn stopped(&self) -> bool {
            true
        }
    }

    impl Sender for Fake {
        type Pairs = Fake;
        fn pairs(&self) -> &Fake {
            self
        }
        fn tag(&self) {}
        async fn place(&self, wanted: u32) -> Result<(usize, u32), RdmaError> {
            Ok((0, wanted))
        }
        fn unplace(&self, _queue: usize, count: u32) {
            *self.unplaced.lock().unwrap() += count;
        }
        fn ring(
            &self,
            _queue: usize,
            _op: Op,
            chunks: &[Chunk],
            first_id: u64,
        ) -> Result<(), (usize, RdmaError)> {
            self.chains.lock().unwrap().push(chunks.len());
            let took = self
                .refuse_after
                .map_or(chunks.len(), |n| n.min(chunks.len()));
            let rung = self.rung.lock().unwrap();
            rung.as_ref().unwrap().send((first_id, took)).unwrap();
            if took < chunks.len() {
                return Err((took, RdmaError::verbs_errno("post", "fake", libc::ENOMEM)));
            }
            Ok(())
        }
    }

    /// Runs `execute` for `n` chunks against a NIC that completes every request it took.
    fn run(n: usize, cwnd: u32, refuse_after: Option<usize>) -> (Result<(), RdmaError>, Arc<Fake>) {
        let (rung, nic) = mpsc::channel();
        let fake = Arc::new(Fake {
            work: WorkRequests::new("fake", Duration::from_secs(5)).unwrap(),
            rung: Mutex::new(Some(rung)),
            chains: Mutex::default(),
            refuse_after,
            breaks: Mutex::default(),
            unplaced: Mutex::default(),
        });
        let completer = std::thread::spawn({
            let fake = fake.clone();
            move || {
                for (first_id, took) in nic {
                    for id in first_id..first_id + took as u64 {
                        let wc = WorkCompletion {
                            wr_id: id,
                            status: WcStatus::SUCCESS,
                            vendor_err: 0,
                            qp_num: 9,
                        };
                        on_completion(&*fake, wc);
                    }
                }
            }
        });
        let window = Arc::new(PeerWindow::new(
            "p".into(),
            CongestionWindow::new(cwnd, 1, cwnd),
        ));
        let chunk = Chunk {
            local_addr: 0,
            lkey: 1,
            len: 8,
            remote_addr: 0,
            rkey: 2,
        };
        let chunks = vec![chunk; n];
        let result = crate::block::block_on(execute(&*fake, Op::Write, &chunks, &window));
        assert_eq!(
            window.snapshot().in_flight(),
            0,
            "every window slot came back"
        );
        assert_eq!(fake.work.in_flight(), 0);
        drop(fake.rung.lock().unwrap().take());
        completer.join().unwrap();
        (result, fake)
    }

    #[test]
    fn requests_go_out_in_chains_the_window_admits() {
        let (result, fake) = run(7, 3, None);
        assert_eq!(result, Ok(()));
        let chains = fake.chains.lock().unwrap().clone();
        assert_eq!(chains.iter().sum::<usize>(), 7);
        assert!(chains.iter().all(|&c| (1..=3).contains(&c)), "{chains:?}");
        assert_eq!(fake.work.doorbells(), chains.len() as u64);
        assert!(fake.breaks.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_chain_breaks_the_queue_pair_and_returns_what_was_not_posted() {
        let (result, fake) = run(4, 4, Some(1));
        let Err(RdmaError::Verbs { call: "post", .. }) = result else {
            panic!("{result:?}")
        };
        assert_eq!(*fake.chains.lock().unwrap(), vec![4]);
        assert_eq!(*fake.unplaced.lock().unwrap(), 3);
        assert_eq!(fake.breaks.lock().unwrap().len(), 1);
    }

    /// One queue pair whose "NIC" takes every chain and never answers (no completion, no
    /// flush), as a silent peer, or a pair whose move to the error state failed, looks.
    struct SilentNic {
        work: WorkRequests<()>,
        breaks: Mutex<Vec<String>>,
        /// Whether the pair is verifiably stopped (the move to the error state worked).
        stopped: AtomicBool,
        /// `place` waits for ever when set, as `DcSender::place` does while the DCI's send
        /// queue is full.
        place_blocks: AtomicBool,
    }

    impl SilentNic {
        fn new(deadline: Duration) -> Arc<Self> {
            Arc::new(Self {
                work: WorkRequests::new("fake", deadline).unwrap(),
                breaks: Mutex::default(),
                stopped: AtomicBool::new(false),
                place_blocks: AtomicBool::new(false),
            })
        }
    }

    impl FakePair for SilentNic {
        fn requests(&self) -> &WorkRequests<()> {
            &self.work
        }
        fn breaks(&self) -> &Mutex<Vec<String>> {
            &self.breaks
        }
        fn stopped(&self) -> bool {
            self.stopped.load(Ordering::SeqCst)
        }
    }

    impl Sender for SilentNic {
        type Pairs = SilentNic;
        fn pairs(&self) -> &SilentNic {
            self
        }
        fn tag(&self) {}
        async fn place(&self, wanted: u32) -> Result<(usize, u32), RdmaError> {
            if self.place_blocks.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            Ok((0, wanted))
        }
        fn ring(&self, _: usize, _: Op, _: &[Chunk], _: u64) -> Result<(), (usize, RdmaError)> {
            Ok(())
        }
    }

    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    fn chunks(n: usize) -> Vec<Chunk> {
        let c = Chunk {
            local_addr: 0x1000,
            lkey: 1,
            len: 64,
            remote_addr: 0x8000,
            rkey: 2,
        };
        vec![c; n]
    }

    fn flush(nic: &SilentNic, wr_id: u64) {
        let wc = WorkCompletion {
            wr_id,
            status: WcStatus::WR_FLUSH_ERR,
            vendor_err: 0,
            qp_num: 9,
        };
        on_completion(nic, wc);
    }

    #[test]
    fn an_operation_dropped_while_waiting_for_a_place_gives_its_window_slots_back() {
        let nic = SilentNic::new(Duration::from_secs(5));
        nic.place_blocks.store(true, Ordering::SeqCst);
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::new(4, 1, 4)));
        let chunks = chunks(4);
        {
            let mut op = pin!(execute(&*nic, Op::Write, &chunks, &window));
            assert!(poll_once(op.as_mut()).is_pending(), "waiting for a place");
            assert_eq!(window.snapshot().in_flight(), 4);
            // Dropped here (a caller's timeout, a cancelled task), nothing posted.
        }
        assert_eq!(nic.work.in_flight(), 0);
        assert_eq!(window.snapshot().in_flight(), 0, "the slots came back");
        let mut acquire = pin!(window.acquire(1));
        assert_eq!(
            poll_once(acquire.as_mut()),
            Poll::Ready(1),
            "the peer is usable"
        );
    }

    #[test]
    fn an_operation_the_nic_never_flushed_waits_until_a_flush_while_its_pair_is_not_stopped() {
        let deadline = Duration::from_millis(50);
        let nic = SilentNic::new(deadline);
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::default()));
        let chunks = chunks(2);
        let mut op = pin!(execute(&*nic, Op::Read, &chunks, &window));
        assert!(poll_once(op.as_mut()).is_pending());
        assert_eq!(nic.work.in_flight(), 2);
        // The completion thread's deadline checks, long past the deadline and the grace.
        let t0 = Instant::now();
        for k in 1..=4 {
            check_deadlines(&*nic, t0 + (deadline + FLUSH_GRACE) * k);
            assert!(
                poll_once(op.as_mut()).is_pending(),
                "the READ must not end (freeing its buffer) while the NIC holds its requests"
            );
        }
        assert_eq!(nic.work.in_flight(), 2);
        let breaks = nic.breaks.lock().unwrap().len();
        assert!(
            breaks >= 2,
            "the deadline broke the pair, then retried: {breaks}"
        );
        flush(&nic, 1);
        flush(&nic, 2);
        let Poll::Ready(Err(RdmaError::Timeout { .. })) = poll_once(op.as_mut()) else {
            panic!("a flushed late request ends its operation with the timeout")
        };
        assert_eq!(window.snapshot().in_flight(), 0);
    }

    #[test]
    fn an_operation_the_nic_never_flushed_ends_once_its_pair_is_stopped() {
        let deadline = Duration::from_millis(50);
        let nic = SilentNic::new(deadline);
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::default()));
        let chunks = chunks(2);
        let mut op = pin!(execute(&*nic, Op::Write, &chunks, &window));
        assert!(poll_once(op.as_mut()).is_pending());
        let t0 = Instant::now();
        check_deadlines(&*nic, t0 + deadline * 2);
        nic.stopped.store(true, Ordering::SeqCst);
        assert!(poll_once(op.as_mut()).is_pending(), "within the grace");
        check_deadlines(&*nic, t0 + deadline * 2 + FLUSH_GRACE * 2);
        let Poll::Ready(Err(RdmaError::Timeout { .. })) = poll_once(op.as_mut()) else {
            panic!("ended without the flush once the pair was stopped")
        };
        assert_eq!(
            (nic.work.in_flight(), window.snapshot().in_flight()),
            (0, 0)
        );
    }
}
