//! The work requests a queue pair has posted and not yet seen complete, with their deadlines,
//! and what a completion (or its absence) means for the operation waiting on it. Pure: the
//! caller supplies the clock and settles the operations.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::RdmaError;
use crate::op::Op;
use crate::slot::Slot;
use crate::status::WcStatus;

pub(crate) struct InFlight {
    pub slot: Arc<Slot>,
    pub op: Op,
    pub posted_at: Instant,
    /// The deadline passed; the pair was broken and the NIC should flush this request.
    pub timed_out: bool,
}

/// What [`InFlightTable::expire`] found.
#[derive(Default)]
pub(crate) struct Expiry {
    /// A request passed its deadline just now: break the pair (once is enough).
    pub newly_late: Option<Op>,
    /// Requests the NIC did not flush within the grace period: end them without it.
    pub abandoned: Vec<InFlight>,
    /// When to look again.
    pub next: Option<Instant>,
}

#[derive(Default)]
pub(crate) struct InFlightTable {
    entries: HashMap<u64, InFlight>,
}

impl InFlightTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records requests `first_id..first_id + n` of one operation. Returns whether the table
    /// was empty before (the completion thread may be asleep with no deadline to wake for).
    pub fn insert_run(
        &mut self,
        first_id: u64,
        n: usize,
        slot: &Arc<Slot>,
        op: Op,
        now: Instant,
    ) -> bool {
        let was_empty = self.entries.is_empty();
        for i in 0..n as u64 {
            self.entries.insert(
                first_id + i,
                InFlight {
                    slot: slot.clone(),
                    op,
                    posted_at: now,
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

    pub fn take(&mut self, wr_id: u64) -> Option<InFlight> {
        self.entries.remove(&wr_id)
    }

    /// Marks requests older than `deadline` as timed out, takes out those still here `grace`
    /// after that, and says when the next of either falls due.
    pub fn expire(&mut self, now: Instant, deadline: Duration, grace: Duration) -> Expiry {
        let mut expiry = Expiry::default();
        let mut abandoned_ids = Vec::new();
        for (id, entry) in &mut self.entries {
            let due = entry.posted_at + deadline;
            if !entry.timed_out && now >= due {
                entry.timed_out = true;
                expiry.newly_late = Some(entry.op);
            }
            let when = if entry.timed_out { due + grace } else { due };
            if entry.timed_out && now >= when {
                abandoned_ids.push(*id);
            } else {
                expiry.next = Some(expiry.next.map_or(when, |n| n.min(when)));
            }
        }
        expiry.abandoned = abandoned_ids
            .iter()
            .filter_map(|id| self.entries.remove(id))
            .collect();
        expiry
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
pub(crate) fn outcome(
    entry: &InFlight,
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

    const DEADLINE: Duration = Duration::from_millis(300);
    const GRACE: Duration = Duration::from_secs(2);

    #[test]
    fn late_requests_are_marked_then_abandoned_after_the_grace_period() {
        let t0 = Instant::now();
        let slot = Arc::new(Slot::default());
        let mut table = InFlightTable::default();
        assert!(table.insert_run(10, 3, &slot, Op::Write, t0));
        assert!(!table.insert_run(13, 1, &slot, Op::Read, t0 + Duration::from_millis(100)));
        table.remove_run(10, 1..3);
        assert_eq!(table.len(), 2);

        let e = table.expire(t0 + DEADLINE - Duration::from_millis(1), DEADLINE, GRACE);
        assert!(e.newly_late.is_none() && e.abandoned.is_empty());
        assert_eq!(e.next, Some(t0 + DEADLINE));

        let e = table.expire(t0 + DEADLINE, DEADLINE, GRACE);
        assert_eq!(e.newly_late, Some(Op::Write));
        assert_eq!(e.next, Some(t0 + Duration::from_millis(100) + DEADLINE));
        let e = table.expire(t0 + DEADLINE + Duration::from_millis(100), DEADLINE, GRACE);
        assert_eq!(e.newly_late, Some(Op::Read));
        assert_eq!(e.next, Some(t0 + DEADLINE + GRACE));

        // The NIC flushes the read in time; the write it never flushes.
        let read = table.take(13).unwrap();
        assert_eq!(
            outcome(&read, WcStatus::WR_FLUSH_ERR, 0, 7, DEADLINE),
            Err(timeout_error(7, Op::Read, DEADLINE))
        );
        let e = table.expire(t0 + DEADLINE + GRACE, DEADLINE, GRACE);
        assert!(e.newly_late.is_none());
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
    fn completions_map_to_success_or_named_errors() {
        let entry = InFlight {
            slot: Arc::new(Slot::default()),
            op: Op::Write,
            posted_at: Instant::now(),
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
