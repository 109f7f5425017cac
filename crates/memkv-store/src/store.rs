//! The public [`Store`]: one API over memory and file mode.

mod arena_access;
mod put_in_place;
mod value_parts;

pub use put_in_place::DirectPut;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::{EvictionPolicy, StoreConfig, StoreMode, check_key};
use crate::error::{Result, StoreError};
use crate::file::io::DriveIo;
use crate::file::{DriveAccess, FileBackend, MAX_EXTENTS_PER_VALUE};
use crate::memory::MemoryBackend;
use crate::pins::PinTable;
use crate::reservation::{Reservation, ReservationTable, Space};
use crate::stats::StoreStats;
use crate::value::{Pinned, ValueRef};

const REAP_EVERY: Duration = Duration::from_secs(1);
const FULL_RETRIES: u32 = 20;
const FULL_RETRY_WAIT: Duration = Duration::from_micros(250);

enum Backend {
    Memory(MemoryBackend),
    File(Box<FileBackend>),
}

pub(crate) struct Inner {
    config: StoreConfig,
    backend: Backend,
    pub(crate) reservations: ReservationTable,
    pins: PinTable,
    evictions: AtomicU64,
    checksum_failures: AtomicU64,
    started: Instant,
    last_reap_ms: AtomicU64,
    closed: AtomicBool,
    /// Largest value that can fit at all (config limit and capacity).
    value_limit: u64,
}

impl Inner {
    pub(crate) fn file_backend(&self) -> Result<&FileBackend> {
        match &self.backend {
            Backend::File(f) => Ok(f),
            Backend::Memory(_) => Err(StoreError::BadRequest("store is in memory mode".into())),
        }
    }
}

/// A KV block store; cheap to share (`Send + Sync`, every method takes `&self`).
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// Validates `config` and opens the store (mapping the arena, or formatting / replaying
    /// the drives).
    pub fn open(config: StoreConfig) -> Result<Self> {
        Self::open_with(config, None)
    }

    /// Opens a file- or direct-mode store on drives the caller provides, one per entry of
    /// `storage.drives` and in that order, instead of opening those paths (the entries' paths
    /// and sizes are then unused; each drive names itself). The fault-injection tests open the
    /// store on simulated drives this way.
    pub fn open_on_drives(config: StoreConfig, drives: Vec<Arc<dyn DriveIo>>) -> Result<Self> {
        if matches!(config.mode, StoreMode::Memory { .. }) {
            return Err(StoreError::BadRequest(
                "open_on_drives needs file or direct mode; the config is memory mode".into(),
            ));
        }
        Self::open_with(config, Some(drives))
    }

    fn open_with(config: StoreConfig, injected: Option<Vec<Arc<dyn DriveIo>>>) -> Result<Self> {
        config.validate()?;
        let (backend, capacity) = match &config.mode {
            StoreMode::Memory {
                max_size,
                block_size,
            } => {
                let m = MemoryBackend::new(*max_size, *block_size, config.share_memory)?;
                let cap = (max_size / block_size) * block_size;
                (Backend::Memory(m), cap)
            }
            StoreMode::File { drives, block_size } | StoreMode::Direct { drives, block_size } => {
                let per_value = MAX_EXTENTS_PER_VALUE as u64 * block_size;
                if config.max_value_size > per_value {
                    return Err(StoreError::BadRequest(format!(
                        "max_value_size {} exceeds {MAX_EXTENTS_PER_VALUE} extents of storage.block_size ({per_value} bytes)",
                        config.max_value_size
                    )));
                }
                let access = match (injected, &config.mode) {
                    (Some(given), _) => DriveAccess::Injected(given),
                    (None, StoreMode::Direct { .. }) => DriveAccess::Direct,
                    (None, _) => DriveAccess::PageCache(config.file_reads),
                };
                let f = FileBackend::open(drives, *block_size, access, config.discard)?;
                let cap = f.device_stats().iter().map(|d| d.usable).sum();
                (Backend::File(Box::new(f)), cap)
            }
        };
        let value_limit = config.max_value_size.min(capacity);
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                backend,
                reservations: ReservationTable::default(),
                pins: PinTable::default(),
                evictions: AtomicU64::new(0),
                checksum_failures: AtomicU64::new(0),
                started: Instant::now(),
                last_reap_ms: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                value_limit,
            }),
        })
    }

    fn check_writable(&self, key: &[u8], len: u64) -> Result<()> {
        check_key(key)?;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::BadRequest("store is closed".into()));
        }
        if len > self.inner.value_limit {
            return Err(StoreError::TooLarge {
                what: "value",
                len,
                limit: self.inner.value_limit,
            });
        }
        Ok(())
    }

    /// Finds room for `len` bytes, reclaiming expired reservations and evicting if allowed.
    fn reserve_space(&self, len: u64) -> Result<Space> {
        self.maybe_reap();
        let mut reaped = false;
        let mut evicting = false;
        let mut evicted_bytes = 0u64;
        let mut made_room = false;
        let mut waits = 0;
        loop {
            let space = match &self.inner.backend {
                Backend::Memory(m) => m.try_allocate(len).map(Space::Memory),
                Backend::File(f) => f.try_allocate(len).map(|s| Space::File(Box::new(s))),
            };
            if let Some(s) = space {
                return Ok(s);
            }
            if !reaped {
                reaped = true;
                if self.reap_expired() > 0 {
                    continue;
                }
            }
            if self.inner.config.eviction == EvictionPolicy::None {
                return Err(StoreError::Full(format!(
                    "no room for {len} bytes and eviction is disabled"
                )));
            }
            if !evicting {
                evicting = true;
                self.check_evicting_can_help(len)?;
            }
            if let Backend::Memory(m) = &self.inner.backend
                && !made_room
                && evicted_bytes >= m.granule()
            {
                // CLOCK has freed a granule's worth and the value still does not fit: the free
                // space is in pieces (slots of slabs other values keep, granules between
                // others). Going on in CLOCK order would evict most of the cache before a slab
                // empties or enough free granules meet; evict one run of neighbours instead.
                // (Not at the first failure: with values of one size, as KV caches mostly
                // store, one eviction makes room without the scan this takes.)
                made_room = true;
                let n = m.evict_room_for(len);
                if n > 0 {
                    self.inner.evictions.fetch_add(n, Ordering::Relaxed);
                    continue;
                }
            }
            if let Some(bytes) = self.evict_one_freeing()? {
                evicted_bytes = evicted_bytes.saturating_add(bytes);
                continue;
            }
            // Space held only by in-flight writers or by readers of already evicted values
            // comes back shortly; give it a moment before reporting Full.
            if waits < FULL_RETRIES {
                waits += 1;
                std::thread::sleep(FULL_RETRY_WAIT);
                continue;
            }
            return Err(StoreError::Full(format!(
                "no room for {len} bytes and nothing is evictable (pinned, reserved or being read)"
            )));
        }
    }

    /// Refuses a put that could not fit even with every committed value evicted (the rest of
    /// the arena is held by puts in progress and by pinned reads): it would empty the cache
    /// and fail anyway.
    fn check_evicting_can_help(&self, len: u64) -> Result<()> {
        let Backend::Memory(m) = &self.inner.backend else {
            return Ok(());
        };
        let usable = m.arena.alloc_stats().granules_total * m.granule();
        let writing = self.inner.reservations.open_bytes();
        let pinned = self.inner.pins.pinned_bytes();
        if len.saturating_add(writing).saturating_add(pinned) > usable {
            return Err(StoreError::Full(format!(
                "no room for {len} bytes: puts in progress hold {writing} and pinned reads \
                 {pinned} of the {usable} bytes values can use, so evicting values cannot \
                 make room"
            )));
        }
        Ok(())
    }

    /// Evicts one committed, unpinned value (approximate LRU). `Ok(false)`: nothing evictable.
    pub fn evict_one(&self) -> Result<bool> {
        Ok(self.evict_one_freeing()?.is_some())
    }

    /// [`Self::evict_one`], returning the bytes it freed (in memory mode; 0 in drive-backed
    /// modes, whose values need no contiguous room).
    fn evict_one_freeing(&self) -> Result<Option<u64>> {
        match &self.inner.backend {
            Backend::Memory(m) => {
                let freed = m.evict_one();
                if freed.is_some() {
                    self.inner.evictions.fetch_add(1, Ordering::Relaxed);
                }
                Ok(freed)
            }
            Backend::File(f) => Ok(f.evict_one(&self.inner.evictions)?.then_some(0)),
        }
    }

    /// Reserves `len` bytes for `key`. The value stays invisible until committed.
    pub fn allocate(&self, key: &[u8], len: u64) -> Result<Reservation> {
        self.check_writable(key, len)?;
        let space = self.reserve_space(len)?;
        let deadline = Instant::now() + self.inner.config.reservation_lease;
        let id = self.inner.reservations.open(key, len, deadline);
        Ok(Reservation {
            hashed: None,
            id,
            space: Some(space),
            store: Arc::clone(&self.inner),
        })
    }

    /// Commits a reservation through its handle once its bytes hash (xxh3-64) to `checksum`,
    /// atomically replacing any previous value. On mismatch the reservation is freed.
    pub fn commit(&self, mut reservation: Reservation, checksum: u64) -> Result<()> {
        let hashed = reservation.finish_hash();
        let space = reservation
            .space
            .take()
            .ok_or(StoreError::UnknownReservation(reservation.id))?;
        let key = self
            .inner
            .reservations
            .finish_held(reservation.id, Instant::now())?;
        if let Some(actual) = hashed.filter(|&a| a != checksum) {
            // As a failed verification in `commit_space`: the space is freed with `space`.
            return Err(StoreError::ChecksumMismatch {
                expected: checksum,
                actual,
            });
        }
        self.commit_space(&key, space, checksum, hashed.is_none())
    }

    /// Commits a reservation whose handle was dropped (e.g. filled by a remote RDMA WRITE).
    pub fn commit_id(&self, id: u64, checksum: u64) -> Result<()> {
        let (key, space) = self.inner.reservations.finish_parked(id, Instant::now())?;
        self.commit_space(&key, space, checksum, true)
    }

    /// Commits a reservation filled through a shared mapping by a writer that hashed the bytes
    /// in the same pass that copied them (the same-host transport): `checksum` is taken as the
    /// value's without reading the value again. The caller has checked the writer mapped this
    /// store's arena; readers check the checksum end to end as always.
    pub fn commit_id_copied(&self, id: u64, checksum: u64) -> Result<()> {
        let (key, space) = self.inner.reservations.finish_parked(id, Instant::now())?;
        self.commit_space(&key, space, checksum, false)
    }

    /// The value length of a reservation parked for [`Store::commit_id`] (e.g. one a remote
    /// RDMA WRITE fills); `None` when no such reservation is open.
    pub fn parked_len(&self, id: u64) -> Option<u64> {
        self.inner.reservations.parked_len(id)
    }

    /// Cancels a reservation; its space is reclaimed.
    pub fn abort(&self, id: u64) -> Result<()> {
        self.inner.reservations.abort(id)
    }

    fn commit_space(&self, key: &[u8], space: Space, checksum: u64, verify: bool) -> Result<()> {
        // A reservation taken before `close` is refused like a new write (its space is freed
        // with `space`): a drive-backed store's journal is sealed by then.
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::BadRequest("store is closed".into()));
        }
        match (&self.inner.backend, space) {
            (Backend::Memory(m), Space::Memory(b)) => m.commit(key, b, checksum, verify),
            (Backend::File(f), Space::File(s)) => f.commit(key, *s, checksum, verify),
            _ => Err(StoreError::BadRequest(
                "reservation belongs to another mode".into(),
            )),
        }
    }

    /// Stores `value` under `key` in one step.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_whole(key, value, None)
    }

    /// Stores `value` under `key` once it hashes (xxh3-64) to `checksum`, the checksum its
    /// sender computed; on a mismatch nothing is stored.
    pub fn put_checked(&self, key: &[u8], value: &[u8], checksum: u64) -> Result<()> {
        self.put_whole(key, value, Some(checksum))
    }

    /// A put of a whole value, refused unless it hashes to `expected`, when given. In memory
    /// mode the value is copied into the arena and hashed in one pass, then indexed (a refused
    /// value's room is freed); a value held whole needs no reservation, since nothing else can
    /// see it before it is indexed.
    fn put_whole(&self, key: &[u8], value: &[u8], expected: Option<u64>) -> Result<()> {
        if let Backend::File(f) = &self.inner.backend {
            return self
                .put_drive_backed(f, &[(key, value, expected)])
                .pop()
                .expect("one result per item");
        }
        self.check_writable(key, value.len() as u64)?;
        match self.reserve_space(value.len() as u64)? {
            Space::Memory(mut block) => {
                let actual = block.fill_hashed(value);
                if let Some(expected) = expected.filter(|&e| e != actual) {
                    return Err(StoreError::ChecksumMismatch { expected, actual });
                }
                self.commit_space(key, Space::Memory(block), actual, false)
            }
            Space::File(_) => Err(StoreError::BadRequest(
                "a memory store reserved drive space".into(),
            )),
        }
    }

    /// [`Self::put_checked`] for each `(key, value, checksum)`, in order; in drive-backed modes
    /// the whole batch shares one group commit.
    pub fn put_batch_checked(&self, items: &[(&[u8], &[u8], u64)]) -> Vec<Result<()>> {
        match &self.inner.backend {
            Backend::File(f) => {
                let items: Vec<_> = items.iter().map(|&(k, v, c)| (k, v, Some(c))).collect();
                self.put_drive_backed(f, &items)
            }
            Backend::Memory(_) => items
                .iter()
                .map(|&(k, v, c)| self.put_checked(k, v, c))
                .collect(),
        }
    }

    /// The checksum of a whole value (refused unless it is `expected`, when given) and room
    /// for it.
    fn checked_space(
        &self,
        key: &[u8],
        value: &[u8],
        expected: Option<u64>,
    ) -> Result<(u64, Space)> {
        self.check_writable(key, value.len() as u64)?;
        let actual = crate::arena::xxh3(value);
        if let Some(expected) = expected.filter(|&e| e != actual) {
            return Err(StoreError::ChecksumMismatch { expected, actual });
        }
        Ok((actual, self.reserve_space(value.len() as u64)?))
    }

    /// Drive-backed puts of whole values (`Some(checksum)`: refused unless the value hashes to
    /// it): room for every value first (evicting as needed), then one pass that queues each
    /// commit and writes its bytes, all under a shared group commit.
    fn put_drive_backed(
        &self,
        f: &FileBackend,
        items: &[(&[u8], &[u8], Option<u64>)],
    ) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = Vec::with_capacity(items.len());
        let mut ready = Vec::new();
        for (i, &(key, value, expected)) in items.iter().enumerate() {
            match self.checked_space(key, value, expected) {
                Ok((sum, Space::File(space))) => {
                    ready.push((i, (key, *space, value, sum)));
                    results.push(None);
                }
                Ok((_, Space::Memory(_))) => {
                    results.push(Some(Err(StoreError::BadRequest(
                        "a drive-backed store reserved memory".into(),
                    ))));
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let (at, ready): (Vec<usize>, Vec<_>) = ready.into_iter().unzip();
        for (i, r) in at.into_iter().zip(f.put_many(ready)) {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every item has a result"))
            .collect()
    }

    /// The value under `key`: zero-copy in memory mode, a verified copy in file mode.
    pub fn get(&self, key: &[u8]) -> Result<Option<ValueRef>> {
        check_key(key)?;
        match &self.inner.backend {
            Backend::Memory(m) => Ok(m.get(key).map(ValueRef::arena)),
            Backend::File(f) => {
                let mut buf = Vec::new();
                let sum = f.read_into(key, &mut buf, &self.inner.checksum_failures)?;
                Ok(sum.map(|s| ValueRef::owned(buf, s)))
            }
        }
    }

    /// The length of the value under `key`, without reading it: to size a buffer for
    /// [`Store::read_into_slice`] (the value may be replaced meanwhile; that read says so).
    pub fn value_len(&self, key: &[u8]) -> Result<Option<u64>> {
        check_key(key)?;
        Ok(match &self.inner.backend {
            Backend::Memory(m) => m.get(key).map(|b| b.data.len() as u64),
            Backend::File(f) => f.index.get(key).map(|b| b.len),
        })
    }

    /// Copies the value into `buf` (resized to fit) and returns its checksum.
    pub fn read_into(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<Option<u64>> {
        check_key(key)?;
        match &self.inner.backend {
            Backend::Memory(m) => Ok(m.get(key).map(|b| {
                buf.clear();
                buf.extend_from_slice(b.data.as_slice());
                b.checksum
            })),
            Backend::File(f) => f.read_into(key, buf, &self.inner.checksum_failures),
        }
    }

    /// Copies the value into the front of `buf` and returns `(length, checksum)`; a value
    /// longer than `buf` is refused with `TooLarge`.
    pub fn read_into_slice(&self, key: &[u8], buf: &mut [u8]) -> Result<Option<(usize, u64)>> {
        check_key(key)?;
        match &self.inner.backend {
            Backend::Memory(m) => {
                let Some(b) = m.get(key) else {
                    return Ok(None);
                };
                let bytes = b.data.as_slice();
                let limit = buf.len() as u64;
                let dst = buf.get_mut(..bytes.len()).ok_or(StoreError::TooLarge {
                    what: "value for the read buffer",
                    len: bytes.len() as u64,
                    limit,
                })?;
                dst.copy_from_slice(bytes);
                Ok(Some((bytes.len(), b.checksum)))
            }
            Backend::File(f) => f.read_into_slice(key, buf, &self.inner.checksum_failures),
        }
    }

    /// Pins the value for a one-sided read of `len` bytes at `arena_offset` (memory mode).
    /// The pin lasts until [`Self::release`] or `lease` (capped at the configured pin lease).
    pub fn lookup(&self, key: &[u8], lease: Duration) -> Result<Option<Pinned>> {
        check_key(key)?;
        self.maybe_reap();
        let Backend::Memory(m) = &self.inner.backend else {
            return Err(StoreError::BadRequest(
                "lookup pins arena memory and needs memory mode; use get/read_into".into(),
            ));
        };
        let lease = lease.min(self.inner.config.pin_lease);
        Ok(m.get(key)
            .map(|b| self.inner.pins.pin(b, Instant::now() + lease)))
    }

    /// Ends a pin; `false` if it was unknown or already expired.
    pub fn release(&self, pin_id: u64) -> bool {
        self.inner.pins.release(pin_id)
    }

    /// Reclaims expired reservations and pins; returns how many. Run it on a timer; the store
    /// also calls it now and then on its own.
    pub fn reap_expired(&self) -> usize {
        let now = Instant::now();
        let ms = now.duration_since(self.inner.started).as_millis() as u64;
        self.inner.last_reap_ms.store(ms, Ordering::Relaxed);
        self.inner.reservations.reap(now) + self.inner.pins.reap(now)
    }

    fn maybe_reap(&self) {
        let now_ms = self.inner.started.elapsed().as_millis() as u64;
        let last = self.inner.last_reap_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= REAP_EVERY.as_millis() as u64 {
            self.reap_expired();
        }
    }

    /// Removes `key`; `true` if it existed. In file mode the delete is durable on return.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        match &self.inner.backend {
            Backend::Memory(m) => Ok(m.delete(key)),
            Backend::File(f) => f.delete(key),
        }
    }

    /// Whether a committed value exists (reservations are invisible).
    pub fn exists(&self, key: &[u8]) -> bool {
        check_key(key).is_ok()
            && match &self.inner.backend {
                Backend::Memory(m) => m.index.contains(key),
                Backend::File(f) => f.index.contains(key),
            }
    }

    pub fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Vec<Result<()>> {
        match &self.inner.backend {
            Backend::File(f) => {
                let items: Vec<_> = items.iter().map(|&(k, v)| (k, v, None)).collect();
                self.put_drive_backed(f, &items)
            }
            Backend::Memory(_) => items.iter().map(|(k, v)| self.put(k, v)).collect(),
        }
    }

    pub fn get_batch(&self, keys: &[&[u8]]) -> Vec<Result<Option<ValueRef>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// [`Self::exists`] for each key, in order; one lock per index shard for the whole batch.
    pub fn exists_batch(&self, keys: &[&[u8]]) -> Vec<bool> {
        let found = match &self.inner.backend {
            Backend::Memory(m) => m.index.contains_many(keys),
            Backend::File(f) => f.index.contains_many(keys),
        };
        keys.iter()
            .zip(found)
            .map(|(k, found)| found && check_key(k).is_ok())
            .collect()
    }

    pub fn delete_batch(&self, keys: &[&[u8]]) -> Vec<Result<bool>> {
        keys.iter().map(|k| self.delete(k)).collect()
    }

    pub fn stats(&self) -> StoreStats {
        let i = &self.inner;
        let mut s = StoreStats {
            evictions: i.evictions.load(Ordering::Relaxed),
            checksum_failures: i.checksum_failures.load(Ordering::Relaxed),
            open_reservations: i.reservations.len() as u64,
            active_pins: i.pins.len() as u64,
            ..StoreStats::default()
        };
        match &i.backend {
            Backend::Memory(m) => {
                let a = m.arena.alloc_stats();
                s.raw_bytes = m.info().len as u64;
                s.usable_bytes = a.granules_total * m.granule();
                s.used_bytes = a.reserved_bytes;
                s.value_bytes = m.value_bytes();
                s.blocks = m.index.len() as u64;
                s.index_bytes = m.index.memory_bytes();
            }
            Backend::File(f) => {
                s.per_device = f.device_stats();
                s.raw_bytes = s.per_device.iter().map(|d| d.raw).sum();
                s.usable_bytes = s.per_device.iter().map(|d| d.usable).sum();
                s.used_bytes = s.per_device.iter().map(|d| d.used).sum();
                s.value_bytes = f.value_bytes();
                s.blocks = f.index.len() as u64;
                s.index_bytes = f.index.memory_bytes();
            }
        }
        s
    }

    /// Drive-backed modes: takes the drive configured as `path` out of service (new values go
    /// to the other drives; its values read as misses until it is added back). `Ok(false)`:
    /// removed already. Refused for the journal's drive (the first) and for the last drive in
    /// service.
    pub fn remove_drive(&self, path: &std::path::Path) -> Result<bool> {
        self.inner.file_backend()?.remove_drive(path)
    }

    /// Drive-backed modes: puts the drive configured as `path` back into service, once its
    /// superblock shows it is this store's drive for that slot (its values, still indexed, are
    /// served again, each verified against its checksum). `Ok(false)`: in service already.
    pub fn add_drive(&self, path: &std::path::Path) -> Result<bool> {
        self.inner.file_backend()?.add_drive(path)
    }

    /// Drive-backed modes: discards the extents freed since the last call, in one batch
    /// (neighbouring extents as one range), so a drive learns the blocks are free (BLKDISCARD)
    /// or a drive file gives them back to its filesystem (a punched hole). The extents are
    /// free again once their discard is done. Returns how many extents were discarded. A
    /// drive that cannot discard is told once, logged, and skipped from then on. Run it on a
    /// timer (the server does, every second); a no-op in memory mode or with discard off.
    pub fn discard_freed(&self) -> u64 {
        match &self.inner.backend {
            Backend::Memory(_) => 0,
            Backend::File(f) => f.discard_freed(),
        }
    }

    /// Makes everything written so far durable (file mode; a no-op in memory mode).
    pub fn flush(&self) -> Result<()> {
        match &self.inner.backend {
            Backend::Memory(_) => Ok(()),
            Backend::File(f) => f.flush(),
        }
    }

    /// Flushes and refuses further writes; in file mode it also seals the journal, so the next
    /// open trusts the last writes instead of re-verifying them. Reads keep working until the
    /// store is dropped.
    pub fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        match &self.inner.backend {
            Backend::Memory(_) => Ok(()),
            Backend::File(f) => f.close(),
        }
    }
}
