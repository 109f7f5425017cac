//! Staged transfers waiting for their client: a put's staging and reservation until Commit or
//! Abort, a get's staging until Release. Each has a deadline (the reservation or pin lease),
//! so a client that vanishes leaves nothing behind once the reaper has run.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use memkv_store::UnguessableIds;

pub struct Leases<T> {
    open: Mutex<HashMap<u64, (T, Instant)>>,
}

impl<T> Default for Leases<T> {
    fn default() -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Leases<T> {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (T, Instant)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `value` under `id` until taken or until `deadline` passes and a reap runs.
    pub fn insert(&self, id: u64, value: T, deadline: Instant) {
        // An id is never reused while open: the store's reservation ids are unique.
        self.lock().insert(id, (value, deadline));
    }

    /// Holds `value` under a fresh id from `ids` until taken or reaped; returns the id.
    pub fn insert_new(&self, ids: &UnguessableIds, value: T, deadline: Instant) -> u64 {
        let mut open = self.lock();
        let id = ids.next(|id| open.contains_key(&id));
        open.insert(id, (value, deadline));
        id
    }

    /// Ends the lease `id` and hands its value to the caller; `None` when no such lease is
    /// open (never staged, already taken, or reaped).
    pub fn take(&self, id: u64) -> Option<T> {
        self.lock().remove(&id).map(|(value, _)| value)
    }

    /// Drops every lease whose deadline is before `now`; returns how many. The values are
    /// dropped after the table's lock is released (dropping one frees staging chunks).
    pub fn reap(&self, now: Instant) -> usize {
        let expired: Vec<T> = {
            let mut open = self.lock();
            let ids: Vec<u64> = open
                .iter()
                .filter(|(_, (_, deadline))| *deadline < now)
                .map(|(&id, _)| id)
                .collect();
            ids.iter()
                .filter_map(|id| open.remove(id).map(|(value, _)| value))
                .collect()
        };
        expired.len()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts its drops, as a staged range gives its chunks back when dropped.
    struct Held(Arc<AtomicUsize>);

    impl Drop for Held {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn take_ends_a_lease_once() {
        let leases = Leases::default();
        let now = Instant::now();
        leases.insert(7, "staged", now + Duration::from_secs(30));
        assert_eq!(leases.len(), 1);
        assert_eq!(leases.take(7), Some("staged"));
        assert_eq!(
            leases.take(7),
            None,
            "a second Commit or Release finds nothing"
        );
        assert_eq!(leases.take(8), None);
        assert_eq!(leases.len(), 0);
    }

    #[test]
    fn reaping_drops_only_expired_leases_and_their_values() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let leases = Leases::default();
        let now = Instant::now();
        leases.insert(1, Held(dropped.clone()), now);
        leases.insert(2, Held(dropped.clone()), now + Duration::from_secs(10));
        leases.insert(3, Held(dropped.clone()), now + Duration::from_secs(20));
        assert_eq!(leases.reap(now), 0, "a deadline that is now has not passed");
        assert_eq!(leases.reap(now + Duration::from_secs(15)), 2);
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        assert_eq!(leases.len(), 1);
        assert!(leases.take(3).is_some());
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        assert_eq!(leases.take(1).map(|_| ()), None, "reaped");
    }
}
