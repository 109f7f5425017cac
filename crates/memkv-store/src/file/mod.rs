//! File mode: values in fixed-size extents striped over drive files, located by an in-memory
//! index that an on-disk journal (drive 0) rebuilds after a restart. Every read is verified
//! against the value's xxh3-64; a mismatch is counted, journaled as a delete and reported as a
//! miss.

mod commit;
mod direct;
mod discard;
mod extents;
mod fill;
mod health;
pub(crate) mod inspect;
pub(crate) mod io;
mod journal;
mod leased;
mod maintenance;
mod open;
mod superblock;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::Xxh3Default;

use crate::arena::IncrementalXxh3;

use crate::config::DriveConfig;
use crate::error::{Result, StoreError};
use crate::index::{Entry, Index};
use crate::stats::DeviceStats;
use commit::{GroupCommit, Op, WriteGuard};
use extents::{ExtentAllocator, ExtentSet, split_extent};
pub use health::DRIVE_ERROR_LIMIT;
pub(crate) use health::DriveHealth;
use io::ExtentIo;
use journal::Journal;
pub use open::check_format;

pub(crate) use fill::FillInPlace;
pub(crate) use journal::MAX_EXTENTS_PER_VALUE;
pub(crate) use leased::LeasedRead;
pub use leased::LeasedValue;
pub(crate) use superblock::FORMAT_VERSION;

/// Values of one batch written at once (each writer thread moves one value at a time).
const WRITERS: usize = 8;

/// One value of a batch on its way to the drives; `guard` tells the group commit when it landed.
struct ValueWrite<'a> {
    at: usize,
    block: Entry<FileBlock>,
    guard: WriteGuard,
    data: &'a [u8],
}

/// A committed value's location. Its extents are freed when the last holder drops it.
pub(crate) struct FileBlock {
    pub extents: ExtentSet,
    pub len: u64,
    pub checksum: u64,
}

/// Extents reserved for a value being written.
pub(crate) struct FileSpace {
    extents: ExtentSet,
    len: u64,
    hasher: Xxh3Default,
    /// The checksum of a value written whole in one call (a TCP put), taken with the store's
    /// run-time-dispatched xxh3 (AVX2 where present) instead of the streaming hasher, which is
    /// xxhash-rust's SSE2 code: about 8 % of a direct-mode server's CPU on 1 MiB puts.
    whole: Option<u64>,
    /// Bytes hashed in order so far; `None` once writes arrived out of order.
    hashed: Option<u64>,
}

impl FileSpace {
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The index entry this space becomes once its bytes, hashing to `checksum`, are stored
    /// under `key`.
    fn into_entry(self, key: &[u8], checksum: u64) -> Entry<FileBlock> {
        Entry::new(
            key,
            FileBlock {
                extents: self.extents,
                len: self.len,
                checksum,
            },
        )
    }
}

/// How drives are opened.
#[derive(Clone)]
pub(crate) enum DriveAccess {
    /// Through the page cache (file mode), reading as configured.
    PageCache(crate::config::FileReads),
    /// O_DIRECT through io_uring (direct mode).
    Direct,
    /// Drives the caller opened, one per configured drive, in order.
    Injected(Vec<Arc<dyn io::DriveIo>>),
}

pub(crate) struct FileBackend {
    drives: Vec<Arc<dyn ExtentIo>>,
    block_size: u64,
    data_offset: u64,
    extents: Arc<ExtentAllocator>,
    pub index: Index<FileBlock>,
    journal: Mutex<Journal>,
    group: GroupCommit,
    value_bytes: AtomicU64,
    failed: AtomicBool,
    health: DriveHealth,
    /// From the superblocks: a drive that rejoins must carry it.
    store_id: u128,
    /// Per drive: it refused a discard (unsupported), so it is not asked again.
    discard_refused: Box<[AtomicBool]>,
}

impl FileBackend {
    pub fn open(
        drives: &[DriveConfig],
        block_size: u64,
        access: DriveAccess,
        discard: bool,
    ) -> Result<Self> {
        open::open(drives, block_size, access, discard)
    }

    fn extents_for(&self, len: u64) -> usize {
        len.div_ceil(self.block_size).max(1) as usize
    }

    pub fn try_allocate(&self, len: u64) -> Option<FileSpace> {
        let extents = self
            .extents
            .allocate(self.extents_for(len), |d| self.health.online(d))?;
        Some(FileSpace {
            extents,
            len,
            hasher: Xxh3Default::new(),
            whole: None,
            hashed: Some(0),
        })
    }

    fn layout(&self) -> Layout<'_> {
        Layout {
            drives: &self.drives,
            block_size: self.block_size,
            data_offset: self.data_offset,
        }
    }

    pub fn write_space(&self, space: &mut FileSpace, off: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        if off.checked_add(len).is_none_or(|end| end > space.len) {
            return Err(StoreError::BadRequest(format!(
                "write of {len} bytes at {off} exceeds the reservation length {}",
                space.len
            )));
        }
        self.write_pieces(&space.extents.ids, off, data)?;
        space.hashed = match space.hashed {
            Some(0) if len == space.len => {
                space.whole = Some(crate::arena::xxh3(data));
                Some(len)
            }
            Some(h) if h == off => {
                space.hasher.update(data);
                Some(h + len)
            }
            _ => None,
        };
        Ok(())
    }

    /// Writes `data` at `off` of a value's extents; a failure is counted against its drive and
    /// fails the write (the caller's space is then freed).
    fn write_pieces(&self, ids: &[u64], off: u64, data: &[u8]) -> Result<()> {
        self.layout()
            .for_each_piece(ids, off, data.len() as u64, |io, at, r| {
                io.write_at(at, &data[r])
            })
            .map_err(|e| {
                self.health
                    .fail(e.drive, self.drives[e.drive].path(), &e.error);
                self.health.write_errors[e.drive].fetch_add(1, Ordering::Relaxed);
                e.into()
            })
    }

    fn read_extents(
        &self,
        ids: &[u64],
        len: u64,
        buf: &mut [u8],
    ) -> std::result::Result<u64, DriveError> {
        self.layout().read_hashed(ids, len, buf)
    }

    /// Journals the value durably, then publishes it. `verify`: check the bytes hash to
    /// `checksum` first (reading them back if they were written out of order).
    pub fn commit(&self, key: &[u8], space: FileSpace, checksum: u64, verify: bool) -> Result<()> {
        if verify {
            let actual = match space.hashed {
                Some(h) if h == space.len => space.whole.unwrap_or_else(|| space.hasher.digest()),
                _ => {
                    let mut buf = vec![0; space.len as usize];
                    self.read_extents(&space.extents.ids, space.len, &mut buf)
                        .map_err(|e| self.count_error(e))?
                }
            };
            if actual != checksum {
                return Err(StoreError::ChecksumMismatch {
                    expected: checksum,
                    actual,
                });
            }
        }
        self.submit(Op::Commit {
            entry: space.into_entry(key, checksum),
            written: None,
        })?;
        Ok(())
    }

    /// Stores each whole value in its space: every commit is queued before any bytes are
    /// written, so the journal records go out while the bytes do and the batch shares one
    /// group commit; the bytes of several values are written at once. One result per item, in
    /// order. `checksum`: each value's xxh3-64, which the caller has computed or checked.
    pub fn put_many(&self, items: Vec<(&[u8], FileSpace, &[u8], u64)>) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = Vec::with_capacity(items.len());
        let mut writes = Vec::new();
        let mut tickets = Vec::new();
        for (i, (key, space, data, checksum)) in items.into_iter().enumerate() {
            if data.len() as u64 != space.len {
                results.push(Some(Err(StoreError::BadRequest(
                    "value length differs from its space".into(),
                ))));
                continue;
            }
            let block = space.into_entry(key, checksum);
            let (guard, written) = WriteGuard::new();
            tickets.push((
                i,
                self.enqueue(Op::Commit {
                    entry: block.clone(),
                    written: Some(written),
                }),
            ));
            writes.push(ValueWrite {
                at: i,
                block,
                guard,
                data,
            });
            results.push(None);
        }
        let wrote = self.write_values(writes);
        // Every ticket is waited for, even when its write failed (the leader drops the op
        // then), but the write's own error is the one to report.
        for ((i, ticket), (j, wrote)) in tickets.into_iter().zip(wrote) {
            debug_assert_eq!(i, j);
            let committed = self.wait_for(ticket);
            results[i] = Some(wrote.and(committed.map(|_| ())));
        }
        results
            .into_iter()
            .map(|r| r.expect("every item has a result"))
            .collect()
    }

    /// Writes each value's bytes, up to [`WRITERS`] values at a time, and reports each landed
    /// (or not) to the group commit. Results in the order given, each with its item position.
    fn write_values(&self, writes: Vec<ValueWrite<'_>>) -> Vec<(usize, Result<()>)> {
        let write = |w: ValueWrite<'_>| {
            let wrote = self.write_pieces(&w.block.extents.ids, 0, w.data);
            if wrote.is_ok() {
                w.guard.landed();
            }
            (w.at, wrote)
        };
        if writes.len() <= 1 {
            return writes.into_iter().map(write).collect();
        }
        let workers = writes.len().min(WRITERS);
        let mut shares: Vec<Vec<ValueWrite<'_>>> = (0..workers).map(|_| Vec::new()).collect();
        for (n, w) in writes.into_iter().enumerate() {
            shares[n % workers].push(w);
        }
        let mut done: Vec<(usize, Result<()>)> = std::thread::scope(|s| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| s.spawn(|| share.into_iter().map(write).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        done.sort_unstable_by_key(|(at, _)| *at);
        done
    }

    /// Reads and verifies `key` into `buf`. `Ok(None)`: missing, or found corrupt (then it is
    /// counted in `failures` and dropped).
    pub fn read_into(
        &self,
        key: &[u8],
        buf: &mut Vec<u8>,
        failures: &AtomicU64,
    ) -> Result<Option<u64>> {
        let Some(block) = self.index.get(key) else {
            return Ok(None);
        };
        buf.resize(block.len as usize, 0);
        buf.truncate(block.len as usize);
        let found = self.read_verified(key, block, buf, failures)?;
        if found.is_none() {
            buf.clear();
        }
        Ok(found)
    }

    /// Like [`Self::read_into`] into the front of a caller's buffer; `Ok(Some((len, sum)))`.
    pub fn read_into_slice(
        &self,
        key: &[u8],
        buf: &mut [u8],
        failures: &AtomicU64,
    ) -> Result<Option<(usize, u64)>> {
        let Some(block) = self.index.get(key) else {
            return Ok(None);
        };
        let len = block.len as usize;
        if len > buf.len() {
            return Err(StoreError::TooLarge {
                what: "value for the read buffer",
                len: block.len,
                limit: buf.len() as u64,
            });
        }
        Ok(self
            .read_verified(key, block, &mut buf[..len], failures)?
            .map(|sum| (len, sum)))
    }

    /// Reads `block` into `buf` (its exact length) and checks it; a corrupt value is counted,
    /// journaled as deleted and reported as missing.
    fn read_verified(
        &self,
        key: &[u8],
        block: Entry<FileBlock>,
        buf: &mut [u8],
        failures: &AtomicU64,
    ) -> Result<Option<u64>> {
        if self.offline_drive(&block).is_some() {
            return Ok(None);
        }
        let actual = match self.read_extents(&block.extents.ids, block.len, buf) {
            Ok(sum) => sum,
            Err(e) => return self.read_failed(key, block, e).map(|()| None),
        };
        if actual == block.checksum {
            return Ok(Some(block.checksum));
        }
        self.corrupt(key, block, failures).map(|()| None)
    }

    /// `e`, counted against its drive's health.
    fn count_error(&self, e: DriveError) -> DriveError {
        self.health
            .fail(e.drive, self.drives[e.drive].path(), &e.error);
        e
    }

    /// After `error` reading `block`: the value reads as a miss from now on.
    ///
    /// On a drive that is out of service the value stays indexed (the drive may be back after
    /// a restart) and reads as a miss meanwhile. On one in service the error was a bad range:
    /// the value is dropped, and the error counts against the drive's health once per value.
    /// Every read of one bad value in flight at once fails (a hot block read by many clients,
    /// a key named several times in one batch); only the read whose delete takes the value out
    /// of the index counts it, so that one bad sector read eight times at once does not take
    /// its drive offline at `DRIVE_ERROR_LIMIT`.
    fn read_failed(&self, key: &[u8], block: Entry<FileBlock>, error: DriveError) -> Result<()> {
        let DriveError { drive, error } = error;
        self.health.unreadable(drive);
        tracing::warn!(key = ?String::from_utf8_lossy(key), drive, %error, "value unreadable; served as a miss");
        if !self.health.online(drive) {
            return Ok(());
        }
        let dropped = self.submit(Op::Delete {
            key: key.into(),
            only_if: Some(block),
        })?;
        if dropped {
            self.health.fail(drive, self.drives[drive].path(), &error);
        }
        Ok(())
    }

    /// `block` failed its checksum: dropped so that it is never served, and counted once (by
    /// the read whose delete dropped it, as for a read error).
    fn corrupt(&self, key: &[u8], block: Entry<FileBlock>, failures: &AtomicU64) -> Result<()> {
        let dropped = self.submit(Op::Delete {
            key: key.into(),
            only_if: Some(block),
        })?;
        if dropped {
            failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = ?String::from_utf8_lossy(key), "checksum mismatch on read; value dropped");
        }
        Ok(())
    }

    /// The first of `block`'s drives that is offline (counted as an unreadable value on it).
    fn offline_drive(&self, block: &FileBlock) -> Option<usize> {
        let d = block
            .extents
            .ids
            .iter()
            .map(|&e| split_extent(e).0)
            .find(|&d| !self.health.online(d))?;
        self.health.unreadable(d);
        Some(d)
    }

    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        if !self.index.contains(key) {
            return Ok(false);
        }
        self.submit(Op::Delete {
            key: key.into(),
            only_if: None,
        })
    }

    /// Evicts one value whose bytes nobody is reading. `Ok(false)`: nothing evictable.
    pub fn evict_one(&self, evictions: &AtomicU64) -> Result<bool> {
        let Some(victim) = self.index.choose_victim(|_| true) else {
            return Ok(false);
        };
        let removed = self.submit(Op::Delete {
            key: victim.key().into(),
            only_if: Some(victim),
        })?;
        if removed {
            evictions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Syncs the drives in service (and the journal's, always): a drive taken out of service
    /// holds nothing served, and a failed one would fail the flush, and so a clean close.
    pub fn flush(&self) -> Result<()> {
        for (i, d) in self.drives.iter().enumerate() {
            if i == 0 || self.health.online(i) {
                d.sync()?;
            }
        }
        Ok(())
    }

    /// Flushes, then seals the journal: a clean close (see [`FileBackend::seal`]).
    pub fn close(&self) -> Result<()> {
        self.flush()?;
        self.seal()
    }

    pub fn value_bytes(&self) -> u64 {
        self.value_bytes.load(Ordering::Relaxed)
    }

    pub fn device_stats(&self) -> Vec<DeviceStats> {
        let store_ok = !self.failed.load(Ordering::Relaxed);
        self.extents
            .usage()
            .into_iter()
            .zip(&self.drives)
            .enumerate()
            .map(|(i, ((total, used), d))| DeviceStats {
                path: PathBuf::from(d.path()),
                raw: d.len(),
                usable: total * self.block_size,
                used: used * self.block_size,
                online: store_ok && self.health.online(i),
                removed: self.health.removed(i),
                read_errors: self.health.read_errors(i),
                write_errors: self.health.write_errors[i].load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// Where extents live on the drives.
pub(crate) struct Layout<'a> {
    drives: &'a [Arc<dyn ExtentIo>],
    block_size: u64,
    data_offset: u64,
}

/// An I/O error and the drive (its index) that returned it.
#[derive(Debug)]
pub(crate) struct DriveError {
    pub drive: usize,
    pub error: std::io::Error,
}

impl From<DriveError> for StoreError {
    fn from(e: DriveError) -> Self {
        StoreError::Io(std::io::Error::new(
            e.error.kind(),
            format!("storage.drives[{}]: {}", e.drive, e.error),
        ))
    }
}

impl Layout<'_> {
    /// Calls `f(drive, drive_offset, range_in_value)` for each extent piece of `[off, off+len)`.
    /// An error names its drive; the caller counts it against the drive's health, as only it
    /// knows whether another read of the same value already did.
    fn for_each_piece(
        &self,
        ids: &[u64],
        off: u64,
        len: u64,
        mut f: impl FnMut(&dyn ExtentIo, u64, std::ops::Range<usize>) -> std::io::Result<()>,
    ) -> std::result::Result<(), DriveError> {
        let mut pos = off;
        let end = off + len;
        while pos < end {
            let k = (pos / self.block_size) as usize;
            let within = pos % self.block_size;
            let n = (self.block_size - within).min(end - pos);
            let (d, i) = split_extent(ids[k]);
            let at = self.data_offset + u64::from(i) * self.block_size + within;
            let drive = &*self.drives[d];
            f(drive, at, (pos - off) as usize..(pos - off + n) as usize)
                .map_err(|error| DriveError { drive: d, error })?;
            pos += n;
        }
        Ok(())
    }

    /// Reads a value into `buf` (exactly `len` bytes long) and returns its xxh3-64. A drive
    /// that can copies and hashes in one pass; otherwise reads go in pieces of at most 256 KiB,
    /// each hashed while it is still in cache.
    fn read_hashed(
        &self,
        ids: &[u64],
        len: u64,
        buf: &mut [u8],
    ) -> std::result::Result<u64, DriveError> {
        const PIECE: usize = 256 << 10;
        let mut hasher = IncrementalXxh3::new(buf.len());
        self.for_each_piece(ids, 0, len, |io, at, r| {
            if io.read_hashed_at(at, buf, r.clone(), &mut hasher)? {
                return Ok(());
            }
            let mut done = r.start;
            while done < r.end {
                let n = (r.end - done).min(PIECE);
                io.read_at(at + (done - r.start) as u64, &mut buf[done..done + n])?;
                done += n;
                hasher.advance(&buf[..done]);
            }
            Ok(())
        })?;
        Ok(hasher.finish(buf))
    }
}
