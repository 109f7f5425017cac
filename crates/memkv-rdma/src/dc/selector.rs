//! Which DC initiator a peer's work requests go on. Pure.
//!
//! A peer with work in flight sticks to the DCI it is using: its requests stay ordered on one
//! send queue, and the DCI keeps its connection to that target instead of reconnecting to it
//! from another one. A peer with nothing in flight goes to the least-loaded usable DCI (the
//! lowest index among equals). No DCI ever holds more requests than its send queue.

use std::collections::HashMap;

/// What [`DciSelector::assign`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Post `count` (between 1 and what was asked) work requests on DCI `dci`.
    Use { dci: usize, count: u32 },
    /// The DCI the peer must use (its own, or the least loaded) has a full send queue: wait
    /// for a completion and ask again.
    Wait,
    /// The peer's work in flight is on DCI `dci`, which broke; its requests are being flushed.
    Broken { dci: usize },
    /// Every DCI is broken.
    NoneUsable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DciLoad {
    in_flight: u32,
    broken: bool,
}

/// The load of each DCI and which DCI each busy peer is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DciSelector {
    dcis: Vec<DciLoad>,
    capacity: u32,
    /// Peers with work in flight: their DCI and how many of their requests are on it.
    busy: HashMap<u64, (usize, u32)>,
}

impl DciSelector {
    /// `num_dcis` initiators (at least one) of `capacity` send queue entries each (at least one).
    pub fn new(num_dcis: usize, capacity: u32) -> Self {
        Self {
            dcis: vec![
                DciLoad {
                    in_flight: 0,
                    broken: false
                };
                num_dcis.max(1)
            ],
            capacity: capacity.max(1),
            busy: HashMap::new(),
        }
    }

    pub fn num_dcis(&self) -> usize {
        self.dcis.len()
    }

    /// Work requests outstanding on `dci`.
    pub fn load(&self, dci: usize) -> u32 {
        self.dcis.get(dci).map_or(0, |d| d.in_flight)
    }

    pub fn is_broken(&self, dci: usize) -> bool {
        self.dcis.get(dci).is_some_and(|d| d.broken)
    }

    /// The DCI `peer`'s work in flight is on, if it has any.
    pub fn dci_of(&self, peer: u64) -> Option<usize> {
        self.busy.get(&peer).map(|(dci, _)| *dci)
    }

    /// Picks the DCI for up to `wanted` (at least 1) more requests of `peer` and records them
    /// as in flight there.
    pub fn assign(&mut self, peer: u64, wanted: u32) -> Assignment {
        let wanted = wanted.max(1);
        let dci = match self.busy.get(&peer) {
            Some(&(dci, _)) if self.dcis[dci].broken => return Assignment::Broken { dci },
            Some(&(dci, _)) => dci,
            None => match self
                .dcis
                .iter()
                .enumerate()
                .filter(|(_, d)| !d.broken)
                .min_by_key(|(i, d)| (d.in_flight, *i))
            {
                Some((dci, _)) => dci,
                None => return Assignment::NoneUsable,
            },
        };
        let free = self.capacity.saturating_sub(self.dcis[dci].in_flight);
        if free == 0 {
            return Assignment::Wait;
        }
        let count = wanted.min(free);
        self.dcis[dci].in_flight += count;
        self.busy.entry(peer).or_insert((dci, 0)).1 += count;
        Assignment::Use { dci, count }
    }

    /// `n` requests of `peer` on `dci` completed (or were never posted).
    pub fn release(&mut self, dci: usize, peer: u64, n: u32) {
        if let Some(d) = self.dcis.get_mut(dci) {
            d.in_flight = d.in_flight.saturating_sub(n);
        }
        if let Some(entry) = self.busy.get_mut(&peer)
            && entry.0 == dci
        {
            entry.1 = entry.1.saturating_sub(n);
            if entry.1 == 0 {
                self.busy.remove(&peer);
            }
        }
    }

    /// Takes `dci` out of service until [`DciSelector::mark_repaired`].
    pub fn mark_broken(&mut self, dci: usize) {
        if let Some(d) = self.dcis.get_mut(dci) {
            d.broken = true;
        }
    }

    pub fn mark_repaired(&mut self, dci: usize) {
        if let Some(d) = self.dcis.get_mut(dci) {
            d.broken = false;
        }
    }

    /// Broken DCIs with nothing left in flight: ready to be reset and reused.
    pub fn drained_broken(&self) -> Vec<usize> {
        self.dcis
            .iter()
            .enumerate()
            .filter(|(_, d)| d.broken && d.in_flight == 0)
            .map(|(i, _)| i)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn idle_peers_go_to_the_least_loaded_dci_and_busy_peers_stay_put() {
        let mut s = DciSelector::new(3, 8);
        assert_eq!(s.assign(1, 4), Assignment::Use { dci: 0, count: 4 });
        assert_eq!(s.assign(2, 2), Assignment::Use { dci: 1, count: 2 });
        assert_eq!(s.assign(3, 1), Assignment::Use { dci: 2, count: 1 });
        // Peer 1 stays on DCI 0 although DCI 2 is the least loaded.
        assert_eq!(s.assign(1, 1), Assignment::Use { dci: 0, count: 1 });
        // A new peer goes to the least loaded: DCI 2 (1 in flight).
        assert_eq!(s.assign(4, 1), Assignment::Use { dci: 2, count: 1 });
        assert_eq!(s.dci_of(1), Some(0));
        s.release(0, 1, 5);
        assert_eq!(s.dci_of(1), None, "nothing in flight: free to move");
        assert_eq!(s.assign(1, 1), Assignment::Use { dci: 0, count: 1 });
    }

    #[test]
    fn a_full_send_queue_grants_what_fits_then_makes_the_peer_wait() {
        let mut s = DciSelector::new(2, 4);
        assert_eq!(s.assign(1, 10), Assignment::Use { dci: 0, count: 4 });
        assert_eq!(s.assign(1, 1), Assignment::Wait, "stuck to its full DCI");
        assert_eq!(s.assign(2, 10), Assignment::Use { dci: 1, count: 4 });
        assert_eq!(s.assign(3, 1), Assignment::Wait, "every DCI full");
        s.release(1, 2, 1);
        assert_eq!(s.assign(3, 5), Assignment::Use { dci: 1, count: 1 });
    }

    #[test]
    fn broken_dcis_are_skipped_and_their_peers_told_until_repaired() {
        let mut s = DciSelector::new(2, 4);
        assert_eq!(s.assign(1, 2), Assignment::Use { dci: 0, count: 2 });
        s.mark_broken(0);
        assert_eq!(s.assign(1, 1), Assignment::Broken { dci: 0 });
        assert_eq!(s.assign(2, 1), Assignment::Use { dci: 1, count: 1 });
        assert!(s.drained_broken().is_empty(), "still flushing");
        s.release(0, 1, 2);
        assert_eq!(s.drained_broken(), vec![0]);
        s.mark_broken(1);
        assert_eq!(s.assign(3, 1), Assignment::NoneUsable);
        s.mark_repaired(0);
        assert_eq!(s.assign(1, 1), Assignment::Use { dci: 0, count: 1 });
        assert!(s.is_broken(1) && !s.is_broken(0));
    }

    #[test]
    fn releases_for_unknown_dcis_or_peers_change_nothing_else() {
        let mut s = DciSelector::new(0, 0);
        assert_eq!((s.num_dcis(), s.capacity), (1, 1));
        assert_eq!(s.assign(1, 0), Assignment::Use { dci: 0, count: 1 });
        let before = s.clone();
        s.release(7, 1, 1);
        s.release(0, 9, 0);
        assert_eq!(s, before);
        s.mark_broken(7);
        assert_eq!(s, before);
    }

    #[derive(Debug, Clone)]
    enum Event {
        Assign(u64, u32),
        Complete(usize),
        Break(usize),
        Repair(usize),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (0u64..6, 0u32..12).prop_map(|(p, n)| Event::Assign(p, n)),
            4 => (0usize..64).prop_map(Event::Complete),
            1 => (0usize..4).prop_map(Event::Break),
            1 => (0usize..4).prop_map(Event::Repair),
        ]
    }

    proptest! {
        /// Against a model that lists every outstanding request as (dci, peer): loads match,
        /// no DCI exceeds its capacity, a peer's requests are all on one DCI, a busy peer is
        /// always sent back to its DCI, and an idle peer gets the least-loaded usable one.
        #[test]
        fn selection_keeps_its_invariants(
            num_dcis in 1usize..5, capacity in 1u32..10,
            events in proptest::collection::vec(event(), 0..200),
        ) {
            let mut s = DciSelector::new(num_dcis, capacity);
            let mut outstanding: Vec<(usize, u64)> = Vec::new();
            for e in events {
                match e {
                    Event::Assign(peer, wanted) => {
                        let own = outstanding.iter().find(|(_, p)| *p == peer).map(|(d, _)| *d);
                        let before = s.clone();
                        match s.assign(peer, wanted) {
                            Assignment::Use { dci, count } => {
                                prop_assert!(count >= 1 && count <= wanted.max(1));
                                prop_assert!(!before.is_broken(dci));
                                match own {
                                    Some(d) => prop_assert_eq!(dci, d),
                                    None => {
                                        let least = (0..num_dcis)
                                            .filter(|d| !before.is_broken(*d))
                                            .map(|d| before.load(d))
                                            .min()
                                            .unwrap();
                                        prop_assert_eq!(before.load(dci), least);
                                    }
                                }
                                outstanding.extend(std::iter::repeat_n((dci, peer), count as usize));
                            }
                            Assignment::Wait => prop_assert_eq!(&s, &before),
                            Assignment::Broken { dci } => {
                                prop_assert_eq!(Some(dci), own);
                                prop_assert!(s.is_broken(dci));
                            }
                            Assignment::NoneUsable => {
                                prop_assert!(own.is_none());
                                prop_assert!((0..num_dcis).all(|d| s.is_broken(d)));
                            }
                        }
                    }
                    Event::Complete(i) if !outstanding.is_empty() => {
                        let (dci, peer) = outstanding.remove(i % outstanding.len());
                        s.release(dci, peer, 1);
                    }
                    Event::Break(d) => s.mark_broken(d % num_dcis),
                    Event::Repair(d) => s.mark_repaired(d % num_dcis),
                    Event::Complete(_) => {}
                }
                for d in 0..num_dcis {
                    let model = outstanding.iter().filter(|(x, _)| *x == d).count() as u32;
                    prop_assert_eq!(s.load(d), model);
                    prop_assert!(s.load(d) <= capacity);
                }
                for (dci, peer) in &outstanding {
                    prop_assert_eq!(s.dci_of(*peer), Some(*dci));
                }
            }
        }
    }
}
