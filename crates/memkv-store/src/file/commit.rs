//! Group commit: committers queue their journal operation and wait; one of them becomes the
//! leader, journals the whole queued batch, syncs each touched drive once, applies the batch to
//! the index in journal order and wakes everyone. A commit is acknowledged only after its data
//! and its journal record are durable. Only the leader mutates the file-mode index, so the index
//! always equals what replay would rebuild.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use super::FileBackend;
use super::extents::split_extent;
use super::journal::{CommitRecord, PAGE, Record};
use crate::error::{Result, StoreError};
use crate::file::FileBlock;

/// Journal bytes one batch may add; keeps a batch inside the slack reserved beside a snapshot.
pub(crate) const BATCH_BYTES: u64 = 256 << 10;

pub(crate) enum Op {
    Commit {
        key: Box<[u8]>,
        block: Arc<FileBlock>,
    },
    /// Delete `key`; with `only_if`, only while the key still maps to that block.
    Delete {
        key: Box<[u8]>,
        only_if: Option<Arc<FileBlock>>,
    },
}

impl Op {
    fn journal_bytes(&self) -> u64 {
        match self {
            Op::Commit { key, block } => 64 + key.len() as u64 + 8 * block.extents.ids.len() as u64,
            Op::Delete { key, .. } => 64 + key.len() as u64,
        }
    }
}

type Outcome = std::result::Result<bool, String>;

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
        let gc = &self.group;
        let mut q = gc.queue.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push((ticket, op));
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
            let msg = "an earlier journal write failed; reopen the store".to_string();
            return batch
                .into_iter()
                .map(|(t, _)| (t, Err(msg.clone())))
                .collect();
        }
        // Decide each op against the index plus the effect of earlier ops in this batch.
        let mut overlay: HashMap<Box<[u8]>, Option<Arc<FileBlock>>> = HashMap::new();
        let mut records = Vec::new();
        let mut journaled = Vec::with_capacity(batch.len());
        let mut dirty = BTreeSet::from([0usize]);
        for (_, op) in &batch {
            match op {
                Op::Commit { key, block } => {
                    dirty.extend(block.extents.ids.iter().map(|&e| split_extent(e).0));
                    records.push(Record::Commit(CommitRecord {
                        key: key.clone(),
                        len: block.len,
                        checksum: block.checksum,
                        extents: block.extents.ids.to_vec(),
                    }));
                    overlay.insert(key.clone(), Some(Arc::clone(block)));
                    journaled.push(true);
                }
                Op::Delete { key, only_if } => {
                    let current = match overlay.get(key) {
                        Some(c) => c.clone(),
                        None => self.index.get(key),
                    };
                    let present = match only_if {
                        Some(b) => current.is_some_and(|c| Arc::ptr_eq(&c, b)),
                        None => current.is_some(),
                    };
                    if present {
                        records.push(Record::Delete { key: key.clone() });
                        overlay.insert(key.clone(), None);
                    }
                    journaled.push(present);
                }
            }
        }
        if let Err(e) = self.write_records(&records, &dirty) {
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
        for ((ticket, op), done) in batch.into_iter().zip(journaled) {
            if !done {
                outcomes.push((ticket, Ok(false)));
                continue;
            }
            match op {
                Op::Commit { key, block } => {
                    self.value_bytes.fetch_add(block.len, Ordering::Relaxed);
                    if let Some(old) = self.index.insert(&key, block) {
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

    fn write_records(&self, records: &[Record], dirty: &BTreeSet<usize>) -> io::Result<()> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let need: u64 = records
            .iter()
            .map(|r| match r {
                Record::Commit(c) => 64 + c.key.len() as u64 + 8 * c.extents.len() as u64,
                Record::Delete { key } => 64 + key.len() as u64,
            })
            .sum::<u64>()
            + PAGE;
        if journal.space_left() < need {
            let mut live = Vec::new();
            self.index.for_each(|key, b| {
                live.push(Record::Commit(CommitRecord {
                    key: key.into(),
                    len: b.len,
                    checksum: b.checksum,
                    extents: b.extents.ids.to_vec(),
                }))
            });
            tracing::debug!(entries = live.len(), "compacting journal");
            journal.compact(live.into_iter())?;
        }
        if !records.is_empty() {
            journal.append(records)?;
        }
        drop(journal);
        for &d in dirty {
            self.drives[d].sync()?;
        }
        Ok(())
    }
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
