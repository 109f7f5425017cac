//! Ids that name a reservation, a pin or a staged get on the wire. Any authenticated client
//! can send Commit, Abort or Release with any id, so an id counted up from 1 let one client
//! guess and end another's put or read in progress. These are a counter run through SipHash
//! with a key drawn at random for each process (std's `RandomState`): unique in practice,
//! and unpredictable from the ids a client has seen.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct UnguessableIds {
    counter: AtomicU64,
    key: RandomState,
}

impl Default for UnguessableIds {
    fn default() -> Self {
        Self {
            counter: AtomicU64::new(0),
            key: RandomState::new(),
        }
    }
}

impl UnguessableIds {
    /// The next id (never 0). Two ids collide with probability about 2^-64; callers that
    /// keep ids in a table draw again when `taken` says the id is in use.
    pub fn next(&self, taken: impl Fn(u64) -> bool) -> u64 {
        loop {
            let n = self.counter.fetch_add(1, Ordering::Relaxed);
            let id = self.key.hash_one(n);
            if id != 0 && !taken(id) {
                return id;
            }
        }
    }
}

impl std::fmt::Debug for UnguessableIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnguessableIds").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_not_a_sequence() {
        let ids = UnguessableIds::default();
        let drawn: Vec<u64> = (0..10_000).map(|_| ids.next(|_| false)).collect();
        let distinct: std::collections::HashSet<_> = drawn.iter().collect();
        assert_eq!(distinct.len(), drawn.len());
        let steps = drawn
            .windows(2)
            .filter(|w| w[1].wrapping_sub(w[0]) == 1)
            .count();
        assert_eq!(steps, 0, "consecutive ids one apart");
        // Another process (another key) draws other ids from the same counter values.
        let other = UnguessableIds::default();
        assert_ne!(other.next(|_| false), drawn[0]);
    }

    #[test]
    fn a_taken_id_is_drawn_again() {
        let ids = UnguessableIds::default();
        let first = ids.next(|_| false);
        let again = UnguessableIds {
            counter: AtomicU64::new(0),
            key: ids.key.clone(),
        };
        assert_ne!(again.next(|id| id == first), first);
    }
}
