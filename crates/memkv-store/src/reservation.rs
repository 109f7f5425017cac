//! Two-phase puts: a reservation owns space the caller (or a remote RDMA writer) fills before
//! committing. Reservations are also addressable by id so a remote client can commit or abort.
//!
//! While the local [`Reservation`] handle is alive it alone owns the space (so its `&mut`
//! access cannot race a commit by id); dropping the handle without committing parks the space
//! in the table, where `commit_id`, `abort` or lease expiry finds it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::arena::ArenaBlock;
use crate::error::{Result, StoreError};
use crate::file::FileSpace;
use crate::ids::UnguessableIds;
use crate::store::Inner;

/// Space held by a reservation.
pub(crate) enum Space {
    Memory(ArenaBlock),
    /// Boxed: the streaming hasher state is large.
    File(Box<FileSpace>),
}

impl Space {
    pub fn len(&self) -> u64 {
        match self {
            Space::Memory(b) => b.len() as u64,
            Space::File(f) => f.len(),
        }
    }
}

struct Entry {
    key: Box<[u8]>,
    /// The value's length (its space may be rounded up).
    len: u64,
    deadline: Instant,
    /// `None` while the local handle holds the space.
    parked: Option<Space>,
}

const REMEMBER_EXPIRED: usize = 65536;

#[derive(Default)]
struct Expired {
    order: VecDeque<u64>,
    ids: HashSet<u64>,
}

#[derive(Default)]
pub(crate) struct ReservationTable {
    open: Mutex<HashMap<u64, Entry>>,
    expired: Mutex<Expired>,
    ids: UnguessableIds,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReservationTable {
    pub fn open(&self, key: &[u8], len: u64, deadline: Instant) -> u64 {
        let entry = Entry {
            key: key.into(),
            len,
            deadline,
            parked: None,
        };
        let mut open = lock(&self.open);
        let id = self.ids.next(|id| open.contains_key(&id));
        open.insert(id, entry);
        id
    }

    pub fn len(&self) -> usize {
        lock(&self.open).len()
    }

    /// The value bytes of the open reservations: space no eviction can free.
    pub fn open_bytes(&self) -> u64 {
        lock(&self.open).values().map(|e| e.len).sum()
    }

    fn missing(&self, id: u64) -> StoreError {
        if lock(&self.expired).ids.contains(&id) {
            StoreError::LeaseExpired(id)
        } else {
            StoreError::UnknownReservation(id)
        }
    }

    fn remember_expired(&self, id: u64) {
        let mut e = lock(&self.expired);
        if e.order.len() >= REMEMBER_EXPIRED
            && let Some(old) = e.order.pop_front()
        {
            e.ids.remove(&old);
        }
        e.order.push_back(id);
        e.ids.insert(id);
    }

    /// Handle dropped uncommitted: park its space for a later commit/abort by id.
    pub fn park(&self, id: u64, space: Space) {
        if let Some(e) = lock(&self.open).get_mut(&id) {
            e.parked = Some(space);
        }
    }

    /// Ends a reservation for commit through its handle; returns its key.
    pub fn finish_held(&self, id: u64, now: Instant) -> Result<Box<[u8]>> {
        let entry = lock(&self.open)
            .remove(&id)
            .ok_or_else(|| self.missing(id))?;
        if now > entry.deadline {
            self.remember_expired(id);
            return Err(StoreError::LeaseExpired(id));
        }
        Ok(entry.key)
    }

    /// The length of a parked reservation's value; `None` when it is not open or not parked.
    pub fn parked_len(&self, id: u64) -> Option<u64> {
        lock(&self.open)
            .get(&id)
            .and_then(|e| e.parked.as_ref().map(Space::len))
    }

    /// Ends a parked reservation for commit by id; returns its key and space.
    pub fn finish_parked(&self, id: u64, now: Instant) -> Result<(Box<[u8]>, Space)> {
        let mut open = lock(&self.open);
        let entry = open.get(&id).ok_or_else(|| self.missing(id))?;
        if entry.parked.is_none() {
            return Err(StoreError::BadRequest(format!(
                "reservation {id} is still held by its local writer; commit it through the handle"
            )));
        }
        let entry = open.remove(&id).expect("entry checked above");
        drop(open);
        if now > entry.deadline {
            self.remember_expired(id);
            return Err(StoreError::LeaseExpired(id));
        }
        Ok((entry.key, entry.parked.expect("parked checked above")))
    }

    /// Drops a reservation; its space is freed (now, or when its handle drops).
    pub fn abort(&self, id: u64) -> Result<()> {
        let entry = lock(&self.open)
            .remove(&id)
            .ok_or_else(|| self.missing(id))?;
        drop(entry);
        Ok(())
    }

    /// Reclaims reservations whose lease ran out; returns how many.
    pub fn reap(&self, now: Instant) -> usize {
        let expired: Vec<(u64, Entry)> = {
            let mut open = lock(&self.open);
            let ids: Vec<u64> = open
                .iter()
                .filter(|(_, e)| now > e.deadline)
                .map(|(&id, _)| id)
                .collect();
            ids.into_iter()
                .filter_map(|id| open.remove(&id).map(|e| (id, e)))
                .collect()
        };
        for (id, _) in &expired {
            self.remember_expired(*id);
        }
        expired.len()
    }
}

/// An uncommitted value being written. Commit with [`crate::Store::commit`]; dropping the
/// handle leaves the reservation open for [`crate::Store::commit_id`] / [`crate::Store::abort`]
/// until its lease expires.
pub struct Reservation {
    pub(crate) id: u64,
    pub(crate) space: Option<Space>,
    pub(crate) store: Arc<Inner>,
    /// Memory mode: the checksum of the prefix the caller reported filled, so far.
    pub(crate) hashed: Option<Box<(crate::arena::Xxh3Stream, usize)>>,
}

impl Reservation {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn len(&self) -> u64 {
        self.space.as_ref().map_or(0, Space::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the reserved bytes start in the arena (memory mode), for an RDMA WRITE.
    pub fn arena_offset(&self) -> Option<u64> {
        match &self.space {
            Some(Space::Memory(b)) => Some(b.offset()),
            _ => None,
        }
    }

    /// The reserved bytes, to fill in place (memory mode only).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match &mut self.space {
            Some(Space::Memory(b)) => Some(b.as_mut_slice()),
            _ => None,
        }
    }

    /// Memory mode: the first `filled` bytes are final; hash them now, while they are still in
    /// cache, so that [`crate::Store::commit`] only hashes what follows. Call it as a value
    /// arrives, with growing `filled`; bytes must not change after they are reported.
    pub fn hash_filled(&mut self, filled: usize) {
        let Some(Space::Memory(b)) = &self.space else {
            return;
        };
        let bytes = b.as_slice();
        let filled = filled.min(bytes.len());
        let state = self.hashed.get_or_insert_with(Default::default);
        if filled > state.1 {
            state.0.update(&bytes[state.1..filled]);
            state.1 = filled;
        }
    }

    /// The value's checksum, hashing only what [`Self::hash_filled`] did not (memory mode).
    pub(crate) fn finish_hash(&mut self) -> Option<u64> {
        let (Some(Space::Memory(b)), Some(state)) = (&self.space, self.hashed.take()) else {
            return None;
        };
        let (mut stream, done) = *state;
        stream.update(&b.as_slice()[done..]);
        Some(stream.digest())
    }

    /// Writes `data` at `offset` within the reservation (both modes).
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let len = self.len();
        match &mut self.space {
            Some(Space::Memory(b)) => {
                let end = offset
                    .checked_add(data.len() as u64)
                    .filter(|&e| e <= len)
                    .ok_or_else(|| {
                        StoreError::BadRequest(format!(
                            "write of {} bytes at {offset} exceeds the reservation length {len}",
                            data.len()
                        ))
                    })?;
                b.as_mut_slice()[offset as usize..end as usize].copy_from_slice(data);
                Ok(())
            }
            Some(Space::File(f)) => self.store.file_backend()?.write_space(f, offset, data),
            None => Err(StoreError::UnknownReservation(self.id)),
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("id", &self.id)
            .field("len", &self.len())
            .field("arena_offset", &self.arena_offset())
            .finish()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(space) = self.space.take() {
            self.store.reservations.park(self.id, space);
        }
    }
}
