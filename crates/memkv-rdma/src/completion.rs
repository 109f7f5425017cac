//! The completion thread of one completion queue and the queue pairs behind it (an RC pair's
//! one, a DC pool's initiators): takes completions off the CQ and settles the operations
//! waiting for them. Adaptive: while completions keep coming it polls the CQ (spinning for at
//! most `SPIN`), then arms the CQ and sleeps in poll(2) on the completion channel, so an idle
//! owner costs no CPU. It also enforces operation deadlines, breaking only the queue pair a
//! late request is on. What differs between transports is behind [`QueuePairs`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cq::{NotifiedCq, WcBatch, WorkCompletion};
use crate::error::RdmaError;
use crate::inflight::{FLUSH_GRACE, InFlight, outcome, timeout_error};
use crate::metrics_names::{STATUS_LABEL, WC_ERRORS_TOTAL};
use crate::status::WcStatus;
use crate::work_requests::WorkRequests;

/// Busy-poll this long after the last completion before sleeping on the channel.
const SPIN: Duration = Duration::from_micros(50);
/// Deadlines are checked this often while the thread is busy.
const DEADLINE_CHECK: Duration = Duration::from_millis(5);

/// The queue pairs behind one completion queue, numbered from 0, as the completion thread
/// sees them.
pub(crate) trait QueuePairs: Send + Sync + 'static {
    /// What a request carries besides its queue pair ([`InFlight::tag`]).
    type Tag: Clone + Send;

    fn work(&self) -> &WorkRequests<Self::Tag>;
    fn cq(&self) -> &NotifiedCq;
    fn device_name(&self) -> &str;
    fn queue_count(&self) -> usize;
    /// The verbs number of queue pair `queue`, as errors name it.
    fn qp_num(&self, queue: usize) -> u32;
    fn is_broken(&self, queue: usize) -> bool;
    /// Takes `queue` out of service and moves it to the error state, which makes the NIC
    /// flush every request outstanding on it. Called again for a pair not yet
    /// [`Self::is_stopped`]: it retries the move.
    fn break_queue(&self, queue: usize, reason: &str);
    /// Whether the NIC verifiably no longer processes `queue`'s requests: a move to the error
    /// state succeeded or the device reports it there. Only then may a request the NIC never
    /// flushed be ended without its completion; before, the NIC may still read or write the
    /// memory the request names, which its operation keeps borrowed until it ends.
    fn is_stopped(&self, queue: usize) -> bool;
    /// `request` left its send queue (completed, or abandoned after its deadline).
    fn release(&self, _request: &InFlight<Self::Tag>) {}
    /// Runs on every turn of the loop (DC: drained broken initiators go back into service).
    fn between_polls(&self) {}
}

pub(crate) fn spawn<Q: QueuePairs>(
    owner: Arc<Q>,
    name: String,
) -> Result<std::thread::JoinHandle<()>, std::io::Error> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || run(&*owner))
}

fn run<Q: QueuePairs>(q: &Q) {
    let mut batch = WcBatch::new();
    let mut last_completion = Instant::now();
    let mut last_check = Instant::now();
    loop {
        if drain(q, &mut batch) {
            last_completion = Instant::now();
        }
        let now = Instant::now();
        let mut next_deadline = None;
        if now.duration_since(last_check) >= DEADLINE_CHECK {
            next_deadline = check_deadlines(q, now);
            last_check = now;
        }
        q.between_polls();
        if q.work().is_shut_down() && q.work().in_flight() == 0 {
            return;
        }
        if now.duration_since(last_completion) < SPIN {
            std::hint::spin_loop();
            continue;
        }
        // Arm, then look once more: a completion that arrived before arming raises no event.
        q.cq().arm();
        if drain(q, &mut batch) {
            last_completion = Instant::now();
            continue;
        }
        let next_deadline = next_deadline.or_else(|| check_deadlines(q, Instant::now()));
        q.cq().sleep_until_event(q.work().wake_fd(), next_deadline);
        last_check = Instant::now() - DEADLINE_CHECK;
    }
}

/// Takes every available completion; true when there was at least one.
fn drain<Q: QueuePairs>(q: &Q, batch: &mut WcBatch) -> bool {
    let mut any = false;
    loop {
        let wcs = match q.cq().poll(batch) {
            Ok(wcs) => wcs,
            Err(n) => {
                let reason = format!("ibv_poll_cq failed (errno {})", -n);
                for queue in 0..q.queue_count() {
                    q.break_queue(queue, &reason);
                }
                std::thread::sleep(Duration::from_millis(10));
                return any;
            }
        };
        if wcs.is_empty() {
            return any;
        }
        any = true;
        let full = wcs.len() == crate::cq::POLL_BATCH;
        for wc in wcs {
            on_completion(q, WorkCompletion::from(wc));
        }
        if !full {
            return any;
        }
    }
}

/// Applies one work completion: settles its operation, credits the window, counts errors and
/// breaks the request's queue pair on one.
pub(crate) fn on_completion<Q: QueuePairs>(q: &Q, wc: WorkCompletion) {
    let taken = q.work().table().take(wc.wr_id);
    let Some(request) = taken else {
        tracing::warn!(
            qp_num = wc.qp_num,
            wr_id = wc.wr_id,
            "completion for an unknown work request"
        );
        return;
    };
    let status = wc.status;
    let qp_num = q.qp_num(request.queue);
    let result = outcome(&request, status, wc.vendor_err, qp_num, q.work().deadline);
    if !status.is_success() {
        metrics::counter!(WC_ERRORS_TOTAL, STATUS_LABEL => status.metric_label()).increment(1);
        if status != WcStatus::WR_FLUSH_ERR {
            let reason = format!("{} completed with {status}", request.op.name());
            q.break_queue(request.queue, &reason);
        } else if !q.is_broken(request.queue) {
            q.break_queue(request.queue, "work requests were flushed");
        }
    }
    finish(q, request, status, result);
}

fn finish<Q: QueuePairs>(
    q: &Q,
    request: InFlight<Q::Tag>,
    status: WcStatus,
    result: Result<(), RdmaError>,
) {
    // A request past its deadline had no answer from the peer for that long: congestion,
    // whatever status the flush reports.
    if request.timed_out && !status.is_success() {
        request.window.complete_late(request.window_epoch);
    } else {
        request.window.complete(status, request.window_epoch);
    }
    q.release(&request);
    request.slot.settle_one(result);
}

/// Breaks queue pairs with a request past its deadline, and ends requests the NIC has not
/// flushed `FLUSH_GRACE` later if their pair is verifiably stopped; the others (and their
/// operations, and so their memory) are held until a flush or the stop, retrying the break.
/// Returns when the next deadline falls, if any.
pub(crate) fn check_deadlines<Q: QueuePairs>(q: &Q, now: Instant) -> Option<Instant> {
    let deadline = q.work().deadline;
    let expiry = q
        .work()
        .table()
        .expire(now, deadline, FLUSH_GRACE, |queue| q.is_stopped(queue));
    for (queue, op) in expiry.newly_late {
        q.break_queue(
            queue,
            &format!(
                "{} got no completion within {} ms",
                op.name(),
                deadline.as_millis()
            ),
        );
    }
    for queue in expiry.held {
        tracing::error!(
            device = q.device_name(),
            qp_num = q.qp_num(queue),
            "the NIC flushed no completion for timed-out work requests and the queue pair is \
             not verifiably in the error state; their operations keep waiting (and their \
             memory stays borrowed) while the move to the error state is retried"
        );
        q.break_queue(queue, "work requests were not flushed after their deadline");
    }
    if !expiry.abandoned.is_empty() {
        tracing::error!(
            device = q.device_name(),
            count = expiry.abandoned.len(),
            "the NIC flushed no completion for timed-out work requests on stopped queue \
             pairs; ending them without it"
        );
    }
    for request in expiry.abandoned {
        let error = timeout_error(q.qp_num(request.queue), request.op, deadline);
        finish(q, request, WcStatus::WR_FLUSH_ERR, Err(error));
    }
    expiry.next
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use crate::gate::PeerWindow;
    use crate::inflight::Owner;
    use crate::op::Op;
    use crate::slot::Slot;
    use crate::transfer::Chunk;
    use crate::window::CongestionWindow;

    const DEADLINE: Duration = Duration::from_millis(300);

    /// Two queue pairs (numbers 100 and 101) whose breaks and releases are recorded.
    struct Fake {
        work: WorkRequests<u64>,
        breaks: Mutex<Vec<(usize, String)>>,
        released: Mutex<Vec<(usize, u64)>>,
    }

    impl QueuePairs for Fake {
        type Tag = u64;
        fn work(&self) -> &WorkRequests<u64> {
            &self.work
        }
        fn cq(&self) -> &NotifiedCq {
            unreachable!("the tests hand completions in directly")
        }
        fn device_name(&self) -> &str {
            "fake"
        }
        fn queue_count(&self) -> usize {
            2
        }
        fn qp_num(&self, queue: usize) -> u32 {
            100 + queue as u32
        }
        fn is_broken(&self, queue: usize) -> bool {
            self.breaks.lock().unwrap().iter().any(|(q, _)| *q == queue)
        }
        fn break_queue(&self, queue: usize, reason: &str) {
            self.breaks.lock().unwrap().push((queue, reason.to_owned()));
        }
        fn is_stopped(&self, queue: usize) -> bool {
            self.is_broken(queue)
        }
        fn release(&self, request: &InFlight<u64>) {
            self.released
                .lock()
                .unwrap()
                .push((request.queue, request.tag));
        }
    }

    fn fake() -> Fake {
        Fake {
            work: WorkRequests::new("fake", DEADLINE).unwrap(),
            breaks: Mutex::default(),
            released: Mutex::default(),
        }
    }

    fn chunks(n: usize) -> Vec<Chunk> {
        let c = Chunk {
            local_addr: 0,
            lkey: 1,
            len: 8,
            remote_addr: 0,
            rkey: 2,
        };
        vec![c; n]
    }

    fn completion(wr_id: u64, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            vendor_err: 0,
            qp_num: 0,
        }
    }

    #[tokio::test]
    async fn completions_settle_credit_the_window_and_break_only_their_queue_pair() {
        let q = fake();
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::new(4, 1, 8)));
        let slot = Arc::new(Slot::default());
        let owner = |queue, peer| Owner {
            slot: &slot,
            op: Op::Read,
            window: &window,
            queue,
            tag: peer,
        };
        assert_eq!(window.try_acquire(4), 4);
        q.work.post(&owner(0, 7), &chunks(2), |_| Ok(())).unwrap();
        q.work.post(&owner(1, 8), &chunks(2), |_| Ok(())).unwrap();

        on_completion(&q, completion(1, WcStatus::SUCCESS));
        on_completion(&q, completion(99, WcStatus::SUCCESS));
        assert!(q.breaks.lock().unwrap().is_empty());
        on_completion(&q, completion(3, WcStatus::REM_ACCESS_ERR));
        on_completion(&q, completion(4, WcStatus::WR_FLUSH_ERR));
        assert_eq!(
            *q.breaks.lock().unwrap(),
            vec![(
                1,
                "RDMA READ completed with IBV_WC_REM_ACCESS_ERR (10)".to_owned()
            )],
            "a flush on a queue pair already broken breaks nothing more"
        );
        on_completion(&q, completion(2, WcStatus::WR_FLUSH_ERR));
        assert_eq!(
            q.breaks.lock().unwrap()[1],
            (0, "work requests were flushed".to_owned())
        );
        assert_eq!(
            *q.released.lock().unwrap(),
            vec![(0, 7), (1, 8), (1, 8), (0, 7)]
        );
        assert_eq!(q.work.in_flight(), 0);
        assert_eq!(
            slot.settled().await,
            Err(RdmaError::QueuePairError {
                qp_num: 101,
                op: "RDMA READ",
                status: WcStatus::REM_ACCESS_ERR,
                vendor_err: 0
            })
        );
        assert_eq!(window.snapshot().in_flight(), 0, "every slot credited back");
    }

    #[tokio::test]
    async fn late_requests_break_their_queue_pair_then_end_without_the_nic() {
        let q = fake();
        let window = Arc::new(PeerWindow::new(
            "p".into(),
            CongestionWindow::new(16, 1, 128),
        ));
        let slot = Arc::new(Slot::default());
        let owner = Owner {
            slot: &slot,
            op: Op::Write,
            window: &window,
            queue: 1,
            tag: 5,
        };
        let t0 = Instant::now();
        q.work.post(&owner, &chunks(3), |_| Ok(())).unwrap();
        assert!(check_deadlines(&q, t0).is_some());
        assert!(q.breaks.lock().unwrap().is_empty());
        let late = t0 + DEADLINE + Duration::from_millis(10);
        assert!(check_deadlines(&q, late).is_some());
        assert_eq!(
            *q.breaks.lock().unwrap(),
            vec![(1, "RDMA WRITE got no completion within 300 ms".to_owned())]
        );
        // The NIC flushes one; the others it never does.
        on_completion(&q, completion(1, WcStatus::WR_FLUSH_ERR));
        assert_eq!(q.breaks.lock().unwrap().len(), 1);
        assert_eq!(check_deadlines(&q, late + FLUSH_GRACE), None);
        assert_eq!(q.work.in_flight(), 0);
        assert_eq!(q.released.lock().unwrap().len(), 3);
        assert_eq!(
            slot.settled().await,
            Err(timeout_error(101, Op::Write, DEADLINE))
        );
        // Unanswered past the deadline is congestion, flushed by the NIC or ended without it;
        // the three went unanswered in one stall, one loss event: the window halves once.
        assert_eq!(window.snapshot().cwnd(), 8);
        assert_eq!(window.snapshot().in_flight(), 0);
    }
}
