//! The work requests a DCI pool has posted and not yet seen complete. Like the RC pair's table
//! (whose entries and outcomes it reuses), but each request also remembers its DCI and its
//! peer, because one completion queue serves every DCI and every peer. Pure: the caller
//! supplies the clock and settles the operations.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gate::PeerWindow;
use crate::inflight::InFlight;
use crate::op::Op;
use crate::slot::Slot;

pub(crate) struct DcRequest {
    pub base: InFlight,
    pub dci: usize,
    pub peer: u64,
    pub window: Arc<PeerWindow>,
}

/// Who a run of requests belongs to.
pub(crate) struct Owner<'a> {
    pub slot: &'a Arc<Slot>,
    pub op: Op,
    pub dci: usize,
    pub peer: u64,
    pub window: &'a Arc<PeerWindow>,
}

/// What [`DcTable::expire`] found.
#[derive(Default)]
pub(crate) struct DcExpiry {
    /// DCIs with a request that passed its deadline just now: break them (once each).
    pub newly_late: Vec<(usize, Op)>,
    /// Requests the NIC did not flush within the grace period: end them without it.
    pub abandoned: Vec<DcRequest>,
    pub next: Option<Instant>,
}

#[derive(Default)]
pub(crate) struct DcTable {
    entries: HashMap<u64, DcRequest>,
}

impl DcTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records requests `first_id..first_id + n`. Returns whether the table was empty before.
    pub fn insert_run(&mut self, first_id: u64, n: usize, owner: &Owner<'_>, now: Instant) -> bool {
        let was_empty = self.entries.is_empty();
        for i in 0..n as u64 {
            self.entries.insert(
                first_id + i,
                DcRequest {
                    base: InFlight {
                        slot: owner.slot.clone(),
                        op: owner.op,
                        posted_at: now,
                        timed_out: false,
                    },
                    dci: owner.dci,
                    peer: owner.peer,
                    window: owner.window.clone(),
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

    pub fn take(&mut self, wr_id: u64) -> Option<DcRequest> {
        self.entries.remove(&wr_id)
    }

    /// Marks requests older than `deadline` as timed out, takes out those still here `grace`
    /// after that, and says when the next of either falls due.
    pub fn expire(&mut self, now: Instant, deadline: Duration, grace: Duration) -> DcExpiry {
        let mut expiry = DcExpiry::default();
        let mut abandoned_ids = Vec::new();
        for (id, entry) in &mut self.entries {
            let base = &mut entry.base;
            let due = base.posted_at + deadline;
            if !base.timed_out && now >= due {
                base.timed_out = true;
                if !expiry.newly_late.iter().any(|(dci, _)| *dci == entry.dci) {
                    expiry.newly_late.push((entry.dci, base.op));
                }
            }
            let when = if base.timed_out { due + grace } else { due };
            if base.timed_out && now >= when {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::CongestionWindow;

    const DEADLINE: Duration = Duration::from_millis(300);
    const GRACE: Duration = Duration::from_secs(2);

    #[test]
    fn late_requests_name_their_dci_once_and_are_abandoned_after_the_grace_period() {
        let t0 = Instant::now();
        let slot = Arc::new(Slot::default());
        let window = Arc::new(PeerWindow::new("p".into(), CongestionWindow::default()));
        let owner = |dci, peer, op| Owner {
            slot: &slot,
            op,
            dci,
            peer,
            window: &window,
        };
        let mut table = DcTable::default();
        assert!(table.insert_run(1, 3, &owner(0, 7, Op::Write), t0));
        assert!(!table.insert_run(4, 2, &owner(2, 8, Op::Read), t0));
        table.remove_run(4, 1..2);
        assert_eq!(table.len(), 4);
        let r = table.take(4).unwrap();
        assert_eq!((r.dci, r.peer, r.base.op), (2, 8, Op::Read));

        let e = table.expire(t0 + DEADLINE - Duration::from_millis(1), DEADLINE, GRACE);
        assert!(e.newly_late.is_empty() && e.abandoned.is_empty());
        assert_eq!(e.next, Some(t0 + DEADLINE));
        let e = table.expire(t0 + DEADLINE, DEADLINE, GRACE);
        assert_eq!(
            e.newly_late,
            vec![(0, Op::Write)],
            "three late requests, one DCI"
        );
        assert_eq!(e.next, Some(t0 + DEADLINE + GRACE));
        assert!(table.take(2).is_some(), "the NIC flushed one");
        let e = table.expire(t0 + DEADLINE + GRACE, DEADLINE, GRACE);
        assert!(e.newly_late.is_empty());
        assert_eq!(e.abandoned.len(), 2);
        assert!(e.abandoned.iter().all(|r| r.dci == 0 && r.peer == 7));
        assert_eq!((table.len(), e.next), (0, None));
    }
}
