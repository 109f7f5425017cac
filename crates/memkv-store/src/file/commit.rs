//! Group commit: committers queue their journal operation and wait; one of them becomes the
//! leader, journals the whole queued batch, syncs each touched drive once, applies the batch to
//! the index in journal order and wakes everyone. A commit is acknowledged only after its data
//! and its journal record are durable. Only the leader mutates the file-mode index, so the index
//! always equals what replay would rebuild.
//!
//! A one-step put queues its commit before it writes its bytes ([`DataWritten`]): the leader
//! writes the batch's journal records while those bytes are still on their way to the drives
//! and waits for them only before the sync, so a put pays for the longer of the two writes, not
//! their sum. A record whose bytes then fail to land is superseded in the same batch by a record
//! of what the key holds without it, before anything is synced or published.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use super::FileBackend;
use super::extents::split_extent;
use super::journal::{CommitRecord, PAGE, Record};
use crate::error::{Result, StoreError};
use crate::file::FileBlock;
use crate::index::Entry;

/// Journal bytes one batch may add; keeps a batch inside the slack reserved beside a snapshot.
pub(crate) const BATCH_BYTES: u64 = 256 << 10;

pub(crate) enum Op {
    Commit {
        /// The key and its new block.
        entry: Entry<FileBlock>,
        /// Set when the bytes are still being written as the op is queued.
        written: Option<Arc<DataWritten>>,
    },
    /// Delete `key`; with `only_if`, only while the key still maps to that block.
    Delete {
        key: Box<[u8]>,
        only_if: Option<Entry<FileBlock>>,
    },
}

impl Op {
    fn journal_bytes(&self) -> u64 {
        match self {
            Op::Commit { entry, .. } => {
                64 + entry.key().len() as u64 + 8 * entry.extents.ids.len() as u64
            }
            Op::Delete { key, .. } => 64 + key.len() as u64,
        }
    }
}

type Outcome = std::result::Result<bool, String>;

/// Whether a queued put's bytes reached the drives: set once by the writer (a dropped
/// [`WriteGuard`] sets "failed"), awaited by the leader before it syncs.
#[derive(Default)]
pub(crate) struct DataWritten {
    landed: Mutex<Option<bool>>,
    set: Condvar,
}

impl DataWritten {
    fn finish(&self, ok: bool) {
        let mut landed = self.landed.lock().unwrap_or_else(|p| p.into_inner());
        if landed.is_none() {
            *landed = Some(ok);
            self.set.notify_all();
        }
    }

    fn wait(&self) -> bool {
        let mut landed = self.landed.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(ok) = *landed {
                return ok;
            }
            landed = self.set.wait(landed).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The writer's side of a [`DataWritten`]: reports failure unless [`WriteGuard::landed`] was
/// called, so a writer that errs or panics never leaves the leader waiting.
pub(crate) struct WriteGuard(Arc<DataWritten>);

impl WriteGuard {
    pub fn new() -> (WriteGuard, Arc<DataWritten>) {
        let w = Arc::new(DataWritten::default());
        (WriteGuard(Arc::clone(&w)), w)
    }

    pub fn landed(self) {
        self.0.finish(true);
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        self.0.finish(false);
    }
}

#[derive(Default)]
pub(crate) struct Queue {
    pending: Vec<(u64, Op)>,
    next_ticket: u64,
    leader_active: bool,
    done: HashMap<u64, Outcome>,
}

#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl FileBackend {
    /// Journals `op` durably and applies it; `Ok(true)` when it changed the index.
    pub(crate) fn submit(&self, op: Op) -> Result<bool> {
        let ticket = self.enqueue(op);
        self.wait_for(ticket)
    }

    /// Queues `op` for the next batch without waiting; [`Self::wait_for`] its ticket.
    pub(crate) fn enqueue(&self, op: Op) -> u64 {
        let mut q = self.group.queue.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push((ticket, op));
        ticket
    }

    /// Seals the journal for a clean close: takes the leadership once no batch is in flight,
    /// so every batch journaled so far has been synced, and appends a seal (then syncs it), so
    /// replay takes the final batch as written rather than re-verifying its bytes. Ops queued
    /// meanwhile are led afterwards, after the seal.
    pub(crate) fn seal(&self) -> Result<()> {
        let gc = &self.group;
        let mut q = gc.queue.lock().unwrap_or_else(|p| p.into_inner());
        while q.leader_active {
            q = gc.wake.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        q.leader_active = true;
        drop(q);
        let sealed = match self.failed.load(Ordering::Acquire) {
            true => Ok(()),
            false => self
                .journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .seal()
                .and_then(|()| self.drives[0].sync()),
        };
        let mut q = gc.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.leader_active = false;
        gc.wake.notify_all();
        drop(q);
        sealed.map_err(StoreError::Io)
    }

    /// Waits until the op queued as `ticket` is durable and applied, leading batches while no
    /// one else does.
    pub(crate) fn wait_for(&self, ticket: u64) -> Result<bool> {
        let gc = &self.group;
        let mut q = gc.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(outcome) = q.done.remove(&ticket) {
                return outcome.map_err(|m| StoreError::Io(io::Error::other(m)));
            }
            if q.leader_active {
                q = gc.wake.wait(q).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            q.leader_active = true;
            let batch = take_batch(&mut q.pending);
            drop(q);
            let tickets: Vec<u64> = batch.iter().map(|(t, _)| *t).collect();
            // A panic here must not leave the followers waiting for a leader forever.
            let outcomes =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_batch(batch)))
                    .unwrap_or_else(|_| {
                        self.failed.store(true, Ordering::Release);
                        let msg = "group commit failed unexpectedly; reopen the store".to_string();
                        tickets.into_iter().map(|t| (t, Err(msg.clone()))).collect()
                    });
            q = gc.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.done.extend(outcomes);
            q.leader_active = false;
            gc.wake.notify_all();
        }
    }

    fn run_batch(&self, batch: Vec<(u64, Op)>) -> Vec<(u64, Outcome)> {
        if self.failed.load(Ordering::Acquire) {
            wait_for_data(&batch);
            let msg = "an earlier journal write failed; reopen the store".to_string();
            return batch
                .into_iter()
                .map(|(t, _)| (t, Err(msg.clone())))
                .collect();
        }
        // Decide each op against the index plus the effect of earlier ops in this batch.
        let mut overlay: HashMap<&[u8], Option<Entry<FileBlock>>> = HashMap::new();
        let mut records = Vec::new();
        let mut journaled = Vec::with_capacity(batch.len());
        for (_, op) in &batch {
            match op {
                Op::Commit { entry, .. } => {
                    records.push(commit_record(entry));
                    overlay.insert(entry.key(), Some(entry.clone()));
                    journaled.push(true);
                }
                Op::Delete { key, only_if } => {
                    let current = match overlay.get(&key[..]) {
                        Some(c) => c.clone(),
                        None => self.index.get(key),
                    };
                    let present = match only_if {
                        Some(b) => current.is_some_and(|c| Entry::same(&c, b)),
                        None => current.is_some(),
                    };
                    if present {
                        records.push(Record::Delete { key: key.clone() });
                        overlay.insert(key, None);
                    }
                    journaled.push(present);
                }
            }
        }
        // The records go out while the batch's bytes may still be in flight; nothing is synced
        // (so nothing is acknowledged) before both have landed.
        let mut written = self.write_records(&records);
        let mut landed = wait_for_data(&batch);
        self.unland_out_of_service(&batch, &mut landed);
        if written.is_ok() && landed.contains(&false) {
            written = self.supersede(&batch, &journaled, &landed);
        }
        // The journal's drive and the drives holding bytes that landed. A data drive whose
        // sync fails goes out of service at once: the kernel may have dropped the writes it
        // could not flush, and a later sync would then succeed without them, so no commit on
        // it (in this batch or a later one) is acknowledged. Those commits fail like unwritten
        // ones (superseded in the journal, synced again) and the rest of the batch stands.
        // Only the journal's own failure stops the store.
        let written = written.and_then(|()| {
            let failed = self.sync_drives(&dirty_drives(&batch, &landed))?;
            if failed.is_empty() {
                return Ok(());
            }
            for (drive, e) in &failed {
                self.health
                    .sync_failed(*drive, self.drives[*drive].path(), e);
            }
            self.unland_out_of_service(&batch, &mut landed);
            self.supersede(&batch, &journaled, &landed)?;
            self.drives[0].sync()
        });
        if let Err(e) = written {
            self.failed.store(true, Ordering::Release);
            tracing::error!(error = %e, "journal write failed; store is now read-only until reopened");
            let msg = format!("journal write failed: {e}");
            return batch
                .into_iter()
                .map(|(t, _)| (t, Err(msg.clone())))
                .collect();
        }
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut replaced = Vec::new();
        for (((ticket, op), done), landed) in batch.into_iter().zip(journaled).zip(landed) {
            if !landed {
                outcomes.push((ticket, Err("the value's bytes were not written".into())));
                continue;
            }
            if !done {
                outcomes.push((ticket, Ok(false)));
                continue;
            }
            match op {
                Op::Commit { entry, .. } => {
                    self.value_bytes.fetch_add(entry.len, Ordering::Relaxed);
                    if let Some(old) = self.index.insert(entry) {
                        self.value_bytes.fetch_sub(old.len, Ordering::Relaxed);
                        replaced.push(old);
                    }
                }
                Op::Delete { key, .. } => {
                    if let Some(old) = self.index.remove(&key) {
                        self.value_bytes.fetch_sub(old.len, Ordering::Relaxed);
                        replaced.push(old);
                    }
                }
            }
            outcomes.push((ticket, Ok(true)));
        }
        // Old extents return to the free list only now, after the records superseding them are
        // durable (and later still if a reader holds the block).
        drop(replaced);
        outcomes
    }

    /// Records that restore, for every key with a journaled commit whose bytes did not land,
    /// what the key holds once the batch is applied without that commit (the index's value, or
    /// a later op's), so that replay ends where the index does.
    fn supersede_unwritten(
        &self,
        batch: &[(u64, Op)],
        journaled: &[bool],
        landed: &[bool],
    ) -> Vec<Record> {
        let mut keys: Vec<&[u8]> = batch
            .iter()
            .zip(landed)
            .filter(|(_, landed)| !**landed)
            .map(|((_, op), _)| match op {
                Op::Commit { entry, .. } => entry.key(),
                Op::Delete { key, .. } => &key[..],
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let mut state = self.index.get(k);
                for (((_, op), done), landed) in batch.iter().zip(journaled).zip(landed) {
                    match op {
                        Op::Commit { entry, .. } if entry.key() == k && *done && *landed => {
                            state = Some(entry.clone())
                        }
                        Op::Delete { key, .. } if **key == *k && *done => state = None,
                        _ => {}
                    }
                }
                match state {
                    Some(block) => commit_record(&block),
                    None => Record::Delete { key: k.into() },
                }
            })
            .collect()
    }

    /// Appends `records` to the journal as a new batch (compacting it first when they would
    /// not fit, with room to spare for superseding every commit among them in the same batch:
    /// compacting between the two would drop records not yet in the index); not yet durable.
    /// The room reserved covers both appends' page rounding.
    fn write_records(&self, records: &[Record]) -> io::Result<()> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = |key: &[u8], extents: usize| 64 + key.len() as u64 + 8 * extents as u64;
        let need: u64 = records
            .iter()
            .map(|r| match r {
                // The record, and one that may supersede it: what the key holds without it (the
                // index's value, which may have far more extents, or another of these records).
                Record::Commit(c) => {
                    let held = self.index.get(&c.key).map_or(0, |b| b.extents.ids.len());
                    bytes(&c.key, c.extents.len()) + bytes(&c.key, c.extents.len().max(held))
                }
                Record::Delete { key } => bytes(key, 0),
            })
            .sum::<u64>()
            + 2 * PAGE;
        journal.reserve(need, || {
            let mut live = Vec::new();
            self.index.for_each(|b| live.push(commit_record(b)));
            live
        })?;
        if !records.is_empty() {
            journal.append(records, false)?;
        }
        Ok(())
    }

    /// One sync per touched drive, all at once: each waits on its own device.
    /// Counts as not landed the commits with bytes on a drive out of service: its writes may
    /// have been lost unseen (a failed sync), or it is the operator's removed drive.
    fn unland_out_of_service(&self, batch: &[(u64, Op)], landed: &mut [bool]) {
        for ((_, op), landed) in batch.iter().zip(landed.iter_mut()) {
            if let Op::Commit { entry, .. } = op
                && entry
                    .extents
                    .ids
                    .iter()
                    .any(|&e| !self.health.online(split_extent(e).0))
            {
                *landed = false;
            }
        }
    }

    /// Appends the records that supersede the journaled commits whose bytes did not land.
    fn supersede(
        &self,
        batch: &[(u64, Op)],
        journaled: &[bool],
        landed: &[bool],
    ) -> io::Result<()> {
        let fixes = self.supersede_unwritten(batch, journaled, landed);
        self.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&fixes, true)
    }

    /// Syncs `dirty` (drive 0, the journal's, among them) in parallel. A failure of drive 0 is
    /// the error; the data drives that failed are returned with theirs.
    fn sync_drives(&self, dirty: &BTreeSet<usize>) -> io::Result<Vec<(usize, io::Error)>> {
        let synced: Vec<(usize, io::Result<()>)> = std::thread::scope(|s| {
            let others: Vec<_> = dirty
                .iter()
                .filter(|&&d| d != 0)
                .map(|&d| (d, s.spawn(move || self.drives[d].sync())))
                .collect();
            let mut synced = vec![(0, self.drives[0].sync())];
            for (d, t) in others {
                let result = t
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("sync panicked")));
                synced.push((d, result));
            }
            synced
        });
        let mut failed = Vec::new();
        for (d, result) in synced {
            match result {
                Ok(()) => {}
                Err(e) if d == 0 => return Err(e),
                Err(e) => failed.push((d, e)),
            }
        }
        Ok(failed)
    }
}

/// The journal record of a stored entry: what replay needs to index it again.
pub(super) fn commit_record(entry: &Entry<FileBlock>) -> Record {
    Record::Commit(CommitRecord {
        key: entry.key().into(),
        len: entry.len,
        checksum: entry.checksum,
        extents: entry.extents.ids.to_vec(),
    })
}

/// The drives a batch must sync: the journal's (0) and those holding bytes that landed.
fn dirty_drives(batch: &[(u64, Op)], landed: &[bool]) -> BTreeSet<usize> {
    let mut dirty = BTreeSet::from([0usize]);
    for ((_, op), &landed) in batch.iter().zip(landed) {
        if let (Op::Commit { entry, .. }, true) = (op, landed) {
            dirty.extend(entry.extents.ids.iter().map(|&e| split_extent(e).0));
        }
    }
    dirty
}

/// Waits until the bytes of every commit in `batch` have landed or failed; per op, whether
/// they landed (ops with nothing in flight: true). Their extents must not be reused before.
fn wait_for_data(batch: &[(u64, Op)]) -> Vec<bool> {
    batch
        .iter()
        .map(|(_, op)| match op {
            Op::Commit {
                written: Some(w), ..
            } => w.wait(),
            _ => true,
        })
        .collect()
}

fn take_batch(pending: &mut Vec<(u64, Op)>) -> Vec<(u64, Op)> {
    let mut bytes = 0;
    let mut n = 0;
    while n < pending.len() && (n == 0 || bytes + pending[n].1.journal_bytes() <= BATCH_BYTES) {
        bytes += pending[n].1.journal_bytes();
        n += 1;
    }
    pending.drain(..n).collect()
}
