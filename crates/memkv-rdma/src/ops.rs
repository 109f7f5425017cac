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
        let granted = window.acquire(wanted).await;
        let (queue, count) = match sender.place(granted).await {
            Ok(placed) => placed,
            Err(e) => {
                window.release_unused(granted);
                failure = Some(e);
                break;
            }
        };
        window.release_unused(granted - count);
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

/// Keeps memory safe when an operation's future is dropped before its completions arrived:
/// the NIC may still be reading or writing the borrowed memory, so the queue pairs the
/// operation posted on are broken (which flushes every request outstanding on them) and the
/// drop waits for the flush.
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
        if !self.slot.wait_blocking(limit) {
            tracing::error!(
                device = self.pairs.device_name(),
                qp_num = self.queues.first().map(|&q| self.pairs.qp_num(q)),
                "work requests of a dropped operation did not complete in {limit:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::completion::on_completion;
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

    impl QueuePairs for Fake {
        type Tag = ();
        fn work(&self) -> &WorkRequests<()> {
            &self.work
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
            !self.breaks.lock().unwrap().is_empty()
        }
        fn break_queue(&self, _queue: usize, reason: &str) {
            self.breaks.lock().unwrap().push(reason.to_owned());
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
}
