//! The work requests posted on the queue pairs behind one completion queue and not yet seen
//! complete, with their deadlines, and what a completion (or its absence) means for the
//! operation waiting on it. One table serves an RC pair (one queue pair) and a DC initiator
//! pool (many, one completion queue). Pure: the caller supplies the clock and settles the
//! operations.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::RdmaError;
use crate::gate::PeerWindow;
use crate::op::Op;
use crate::slot::Slot;
use crate::status::WcStatus;
use crate::window::Epoch;

/// How long after a timeout the completion thread waits for the NIC to flush a request before
/// it ends the request without the flush, which it does only if the request's queue pair is
/// verifiably stopped; otherwise it looks again this often.
pub(crate) const FLUSH_GRACE: Duration = Duration::from_secs(2);

/// One posted work request.
pub(crate) struct InFlight<T> {
    pub slot: Arc<Slot>,
    pub op: Op,
    /// The peer's congestion window, credited when the request completes.
    pub window: Arc<PeerWindow>,
    /// Which of the owner's queue pairs carries it (an RC pair has one, 0; a DC pool's DCIs
    /// are numbered from 0): a completion error or a deadline breaks that one.
    pub queue: usize,
    /// What else the transport needs back when the request ends (DC: the peer, whose place on
    /// the DCI it frees; RC: nothing).
    pub tag: T,
    pub posted_at: Instant,
    /// The window's epoch when it was posted: congestion it signals after a later reduction
    /// belongs to the loss event already counted.
    pub window_epoch: Epoch,
    /// The deadline passed; the queue pair was broken and the NIC should flush this request.
    pub timed_out: bool,
}

/// Who a run of requests belongs to.
pub(crate) struct Owner<'a, T> {
    pub slot: &'a Arc<Slot>,
    pub op: Op,
    pub window: &'a Arc<PeerWindow>,
    pub queue: usize,
    pub tag: T,
}

/// What [`InFlightTable::expire`] found.
pub(crate) struct Expiry<T> {
    /// Queue pairs with a request that passed its deadline just now, each once with the
    /// operation of one such request: break them.
    pub newly_late: Vec<(usize, Op)>,
    /// Requests the NIC did not flush within the grace period, on queue pairs verifiably
    /// stopped (in the error or reset state): end them without the flush.
    pub abandoned: Vec<InFlight<T>>,
    /// Queue pairs (each once) with requests past the grace period that stay in the table
    /// because the pair is not verifiably stopped: the NIC may still read or write their
    /// memory, so their operations must keep waiting.
    pub held: Vec<usize>,
    /// When to look again.
    pub next: Option<Instant>,
}

pub(crate) struct InFlightTable<T> {
    entries: HashMap<u64, InFlight<T>>,
}

impl<T> Default for InFlightTable<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<T: Clone> InFlightTable<T> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records requests `first_id..first_id + n` of one operation. Returns whether the table
    /// was empty before (the completion thread may be asleep with no deadline to wake for).
    pub fn insert_run(
        &mut self,
        first_id: u64,
        n: usize,
        owner: &Owner<'_, T>,
        now: Instant,
    ) -> bool {
        let was_empty = self.entries.is_empty();
        let window_epoch = owner.window.epoch();
        for i in 0..n as u64 {
            self.entries.insert(
                first_id + i,
                InFlight {
                    slot: owner.slot.clone(),
                    op: owner.op,
                    window: owner.window.clone(),
                    queue: owner.queue,
                    tag: owner.tag.clone(),
                    posted_at: now,
                    window_epoch,
                    timed_out: false,
                },
            );
        }
        was_empty
    }

    /// Forgets requests `first_id + range` (never posted).
    pub fn remove_run(&mut self, first_id: u64, range: Range<usize>) {
        for i in range {
            self.entries.remove(&(first_id + i as u64));
        }
    }

    pub fn take(&mut self, wr_id: u64) -> Option<InFlight<T>> {
        self.entries.remove(&wr_id)
    }

    /// Marks requests older than `deadline` as timed out, takes out those still here `grace`
    /// after that whose queue pair `stopped` says the NIC has verifiably stopped, and says when
    /// the next of these falls due (for one held back, `grace` from now).
    pub fn expire(
        &mut self,
        now: Instant,
        deadline: Duration,
        grace: Duration,
        stopped: impl Fn(usize) -> bool,
    ) -> Expiry<T> {
        let mut newly_late: Vec<(usize, Op)> = Vec::new();
        let mut next: Option<Instant> = None;
        let mut abandoned_ids = Vec::new();
        let mut held = Vec::new();
        // Asked at most once per queue pair and call: it may query the device.
        let mut known: Vec<(usize, bool)> = Vec::new();
        for (id, entry) in &mut self.entries {
            let due = entry.posted_at + deadline;
            if !entry.timed_out && now >= due {
                entry.timed_out = true;
                if !newly_late.iter().any(|(queue, _)| *queue == entry.queue) {
                    newly_late.push((entry.queue, entry.op));
                }
            }
            let when = if entry.timed_out { due + grace } else { due };
            if entry.timed_out && now >= when {
                let queue = entry.queue;
                let is_stopped = match known.iter().find(|(q, _)| *q == queue) {
                    Some(&(_, s)) => s,
                    None => {
                        let s = stopped(queue);
                        known.push((queue, s));
                        s
                    }
                };
                if is_stopped {
                    abandoned_ids.push(*id);
                } else {
                    if !held.contains(&queue) {
                        held.push(queue);
                    }
                    let again = now + grace;
                    next = Some(next.map_or(again, |n| n.min(again)));
                }
            } else {
                next = Some(next.map_or(when, |n| n.min(when)));
            }
        }
        let abandoned = abandoned_ids
            .iter()
            .filter_map(|id| self.entries.remove(id))
            .collect();
        Expiry {
            newly_late,
            abandoned,
            held,
            next,
        }
    }
}

pub(crate) fn timeout_error(qp_num: u32, op: Op, deadline: Duration) -> RdmaError {
    RdmaError::Timeout {
        qp_num,
        op: op.name(),
        deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
    }
}

/// What a completion with `status` means for the operation of `entry`: success, the named
/// completion error, or, for a request flushed after its deadline, the timeout.
pub(crate) fn outcome<T>(
    entry: &InFlight<T>,
    status: WcStatus,
    vendor_err: u32,
    qp_num: u32,
    deadline: Duration,
) -> Result<(), RdmaError> {
    if status.is_success() {
        Ok(())
    } else if entry.timed_out {
        Err(timeout_error(qp_num, entry.op, deadline))
    } else {
        Err(RdmaError::QueuePairError {
            qp_num,
            op: entry.op.name(),
            status,
            vendor_err,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::CongestionWindow;

    const DEADLINE: Duration = Duration::from_millis(300);
    const GRACE: Duration = Duration::from_secs(2);

    fn window() -> Arc<PeerWindow> {
        Arc::new(PeerWindow::new("p".into(), CongestionWindow::default()))
    }

    #[test]
    fn late_requests_are_marked_then_abandoned_after_the_grace_period() {
        let t0 = Instant::now();
        let (slot, window) = (Arc::new(Slot::default()), window());
        let owner = |op| Owner {
            slot: &slot,
            op,
            window: &window,
            queue: 0,
            tag: (),
        };
        let mut table = InFlightTable::default();
        assert!(table.insert_run(10, 3, &owner(Op::Write), t0));
        let later = t0 + Duration::from_millis(100);
        assert!(!table.insert_run(13, 1, &owner(Op::Read), later));
        table.remove_run(10, 1..3);
        assert_eq!(table.len(), 2);

        let e = table.expire(
            t0 + DEADLINE - Duration::from_millis(1),
            DEADLINE,
            GRACE,
            |_| true,
        );
        assert!(e.newly_late.is_empty() && e.abandoned.is_empty());
        assert_eq!(e.next, Some(t0 + DEADLINE));

        let e = table.expire(t0 + DEADLINE, DEADLINE, GRACE, |_| true);
        assert_eq!(e.newly_late, vec![(0, Op::Write)]);
        assert_eq!(e.next, Some(later + DEADLINE));
        let e = table.expire(later + DEADLINE, DEADLINE, GRACE, |_| true);
        assert_eq!(e.newly_late, vec![(0, Op::Read)]);
        assert_eq!(e.next, Some(t0 + DEADLINE + GRACE));

        // The NIC flushes the read in time; the write it never flushes.
        let read = table.take(13).unwrap();
        assert_eq!(
            outcome(&read, WcStatus::WR_FLUSH_ERR, 0, 7, DEADLINE),
            Err(timeout_error(7, Op::Read, DEADLINE))
        );
        let e = table.expire(t0 + DEADLINE + GRACE, DEADLINE, GRACE, |_| true);
        assert!(e.newly_late.is_empty());
        assert_eq!(e.abandoned.len(), 1);
        assert_eq!(e.abandoned[0].op, Op::Write);
        assert_eq!(e.next, None);
        assert_eq!(table.len(), 0);
        assert!(
            table.take(10).is_none(),
            "a late completion finds nothing to settle"
        );
    }

    #[test]
    fn late_requests_name_their_queue_pair_once_and_keep_their_tag() {
        let t0 = Instant::now();
        let (slot, window) = (Arc::new(Slot::default()), window());
        let owner = |queue, peer, op| Owner {
            slot: &slot,
            op,
            window: &window,
            queue,
            tag: peer,
        };
        let mut table = InFlightTable::default();
        assert!(table.insert_run(1, 3, &owner(0, 7u64, Op::Write), t0));
        assert!(!table.insert_run(4, 2, &owner(2, 8, Op::Read), t0));
        table.remove_run(4, 1..2);
        assert_eq!(table.len(), 4);
        let r = table.take(4).unwrap();
        assert_eq!((r.queue, r.tag, r.op), (2, 8, Op::Read));

        let e = table.expire(
            t0 + DEADLINE - Duration::from_millis(1),
            DEADLINE,
            GRACE,
            |_| true,
        );
        assert!(e.newly_late.is_empty() && e.abandoned.is_empty());
        assert_eq!(e.next, Some(t0 + DEADLINE));
        let e = table.expire(t0 + DEADLINE, DEADLINE, GRACE, |_| true);
        assert_eq!(
            e.newly_late,
            vec![(0, Op::Write)],
            "three late requests, one queue pair"
        );
        assert_eq!(e.next, Some(t0 + DEADLINE + GRACE));
        assert!(table.take(2).is_some(), "the NIC flushed one");
        let e = table.expire(t0 + DEADLINE + GRACE, DEADLINE, GRACE, |_| true);
        assert!(e.newly_late.is_empty());
        assert_eq!(e.abandoned.len(), 2);
        assert!(e.abandoned.iter().all(|r| r.queue == 0 && r.tag == 7));
        assert_eq!((table.len(), e.next), (0, None));
    }

    #[test]
    fn late_requests_on_a_pair_not_verifiably_stopped_are_held_not_abandoned() {
        let t0 = Instant::now();
        let (slot, window) = (Arc::new(Slot::default()), window());
        let owner = |queue| Owner {
            slot: &slot,
            op: Op::Read,
            window: &window,
            queue,
            tag: (),
        };
        let mut table = InFlightTable::default();
        table.insert_run(1, 2, &owner(0), t0);
        table.insert_run(3, 1, &owner(1), t0);
        let stopped = |queue| queue == 1;
        table.expire(t0 + DEADLINE, DEADLINE, GRACE, stopped);
        let now = t0 + DEADLINE + GRACE;
        let e = table.expire(now, DEADLINE, GRACE, stopped);
        assert_eq!(e.held, vec![0], "the NIC may still use their memory");
        assert_eq!(e.abandoned.len(), 1);
        assert_eq!(e.abandoned[0].queue, 1);
        assert_eq!(
            (table.len(), e.next),
            (2, Some(now + GRACE)),
            "looked at again"
        );
        let e = table.expire(now + GRACE, DEADLINE, GRACE, |_| true);
        assert_eq!((e.abandoned.len(), e.held.len(), table.len()), (2, 0, 0));
    }

    #[test]
    fn completions_map_to_success_or_named_errors() {
        let entry = InFlight {
            slot: Arc::new(Slot::default()),
            op: Op::Write,
            window: window(),
            queue: 0,
            tag: (),
            posted_at: Instant::now(),
            window_epoch: Epoch::default(),
            timed_out: false,
        };
        assert_eq!(outcome(&entry, WcStatus::SUCCESS, 0, 1, DEADLINE), Ok(()));
        assert_eq!(
            outcome(&entry, WcStatus::REM_ACCESS_ERR, 0x12, 1, DEADLINE),
            Err(RdmaError::QueuePairError {
                qp_num: 1,
                op: "RDMA WRITE",
                status: WcStatus::REM_ACCESS_ERR,
                vendor_err: 0x12
            })
        );
        let e = outcome(&entry, WcStatus(77), 0, 1, DEADLINE).unwrap_err();
        assert!(
            e.to_string().contains("unknown completion status 77"),
            "{e}"
        );
    }
}
