//! Index journal: an append-only log of commit and delete records in a region of drive 0.
//!
//! The region has two halves. Each starts with a header page naming its generation; replay uses
//! the valid half with the highest generation and reads records until the first one whose
//! checksum, generation or sequence number is wrong (a torn tail or stale bytes). Compaction
//! writes a snapshot of the live index into the other half under generation + 1, makes it
//! durable, and only then writes that half's header: a crash at any point leaves one complete,
//! consistent half. Writes are whole pages, which keeps the journal usable on O_DIRECT devices.
//!
//! Each append starts on a fresh page (since format 2): a page that holds synced records is
//! never written again, so a drive that tears a sector of an append into garbage loses only that
//! unacknowledged append, never the records before it.
//!
//! Each append is written twice, back to back, in the same write (format 3): copy A, padded to
//! whole pages, then copy B, the same bytes. A record's header names the pages of one copy, so a
//! record whose bytes went bad on the medium (a flipped bit in a synced sector) is read from the
//! other copy at the same offset, and replay goes on past it instead of dropping every later
//! record. When copy A's first record is unreadable, replay finds copy B as the first page
//! boundary within [`MAX_COPY_BYTES`] holding that sequence number with a matching page count.
//! Appends and snapshot chunks too large for two copies (the half nearly filled by the
//! snapshot) are written once, with a page count of 0, as in formats 1 and 2.
//!
//! Replay reads the next record where the last one ended or, failing that, at the start of the
//! next page, and only with the expected sequence number, so no record can be skipped. Format 1
//! packed batches into the partial tail page (rewritten with the same prefix); its journals
//! replay the same way. Stale records past the tail never match: every open compacts into a
//! fresh generation before it appends.
//!
//! Record: checksum:u64 len:u32 kind:u8 copy_pages:u16 pad:u8 generation:u64 seq:u64
//! batch:u64 body[len], checksum = xxh3 of everything after the checksum field. `batch` numbers
//! group commits: only the journal's final batch can have been cut short by a crash before its
//! sync finished, so replay re-verifies the data of that batch alone (0 marks snapshot records,
//! always durable), unless a seal follows it: a clean close appends one once every batch is
//! synced, so a value of the final batch whose bytes later go bad on the medium is caught by
//! its checksum when read (a miss) instead of being taken for a write the crash cut short (the
//! key's previous value). Commit body: key_len:u16 key value_len:u64 value_checksum:u64 n:u32
//! extent ids[n]:u64. Delete body: key_len:u16 key. Seal body: empty.

use std::io;
use std::sync::Arc;

use super::io::ExtentIo;
use crate::error::{Result, StoreError};

pub(crate) const PAGE: u64 = 4096;
const HALF_MAGIC: &[u8; 8] = b"MKVJHALF";
const HEADER: usize = 40;
const KIND_COMMIT: u8 = 1;
const KIND_DELETE: u8 = 2;
const KIND_SEAL: u8 = 3;
/// Upper bound of one record's body; values are limited so their extent lists fit.
pub(crate) const MAX_BODY: usize = 2 + 1024 + 8 + 8 + 4 + 8 * MAX_EXTENTS_PER_VALUE;
pub(crate) const MAX_EXTENTS_PER_VALUE: usize = 16384;
/// Bytes a live entry may take in a snapshot, not counting its extent ids.
pub(crate) const SNAPSHOT_BYTES_PER_ENTRY: u64 = (HEADER + 2 + 1024 + 8 + 8 + 4) as u64;
/// The largest copy of a mirrored append or snapshot chunk; bounds how far replay looks for a
/// second copy, which it does once per open at the journal's end.
const MAX_COPY_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitRecord {
    pub key: Box<[u8]>,
    pub len: u64,
    pub checksum: u64,
    pub extents: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Commit(CommitRecord),
    Delete { key: Box<[u8]> },
}

/// What a journal record holds: an index change, or a seal (every batch before it is durable).
#[derive(Debug)]
enum Entry {
    Record(Record),
    Seal,
}

/// Where a record sits: the journal's generation, its sequence number, its group-commit batch
/// and the pages of each copy of its append (0: written once).
#[derive(Debug, Clone, Copy)]
struct Stamp {
    generation: u64,
    seq: u64,
    batch: u64,
    copy_pages: u16,
}

impl Record {
    fn encoded_len(&self) -> usize {
        match self {
            Record::Commit(c) => HEADER + 2 + c.key.len() + 20 + 8 * c.extents.len(),
            Record::Delete { key } => HEADER + 2 + key.len(),
        }
    }

    fn encode_into(&self, stamp: Stamp, out: &mut Vec<u8>) {
        let (kind, key) = match self {
            Record::Commit(c) => (KIND_COMMIT, &c.key),
            Record::Delete { key } => (KIND_DELETE, key),
        };
        encode_entry(kind, stamp, out, |out| {
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
            if let Record::Commit(c) = self {
                out.extend_from_slice(&c.len.to_le_bytes());
                out.extend_from_slice(&c.checksum.to_le_bytes());
                out.extend_from_slice(&(c.extents.len() as u32).to_le_bytes());
                for e in &c.extents {
                    out.extend_from_slice(&e.to_le_bytes());
                }
            }
        });
    }

    fn decode_body(kind: u8, body: &[u8]) -> Option<Entry> {
        if kind == KIND_SEAL {
            return body.is_empty().then_some(Entry::Seal);
        }
        let key_len = u16::from_le_bytes(body.get(..2)?.try_into().ok()?) as usize;
        let key: Box<[u8]> = body.get(2..2 + key_len)?.into();
        let rest = &body[2 + key_len..];
        let u64_at = |o: usize| Some(u64::from_le_bytes(rest.get(o..o + 8)?.try_into().ok()?));
        let record = match kind {
            KIND_DELETE if rest.is_empty() => Record::Delete { key },
            KIND_COMMIT => {
                let n = u32::from_le_bytes(rest.get(16..20)?.try_into().ok()?) as usize;
                if rest.len() != 20 + 8 * n {
                    return None;
                }
                let extents = (0..n).map(|i| u64_at(20 + 8 * i)).collect::<Option<_>>()?;
                Record::Commit(CommitRecord {
                    key,
                    len: u64_at(0)?,
                    checksum: u64_at(8)?,
                    extents,
                })
            }
            _ => return None,
        };
        Some(Entry::Record(record))
    }
}

/// Appends one record to `out`: its header stamped with `stamp`, the body `body` writes, and
/// the checksum over both.
fn encode_entry(kind: u8, stamp: Stamp, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    body(out);
    let body_len = (out.len() - start - HEADER) as u32;
    let h = &mut out[start..start + HEADER];
    h[8..12].copy_from_slice(&body_len.to_le_bytes());
    h[12] = kind;
    h[13..15].copy_from_slice(&stamp.copy_pages.to_le_bytes());
    h[16..24].copy_from_slice(&stamp.generation.to_le_bytes());
    h[24..32].copy_from_slice(&stamp.seq.to_le_bytes());
    h[32..40].copy_from_slice(&stamp.batch.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&out[start + 8..]);
    out[start..start + 8].copy_from_slice(&sum.to_le_bytes());
}

/// Encodes `records` one after another, numbered from `stamp.seq`.
fn encode_records(records: &[Record], stamp: Stamp, out: &mut Vec<u8>) {
    for (i, r) in records.iter().enumerate() {
        let seq = stamp.seq + i as u64;
        r.encode_into(Stamp { seq, ..stamp }, out);
    }
}

/// One append (or snapshot chunk) ready to write: `len` bytes of records, which `encode` writes
/// with the stamp it is given, padded to whole pages, once or as two copies back to back.
/// Returns the bytes and where the records end within them (the journal's new tail).
fn encode_append(
    len: u64,
    stamp: Stamp,
    copies: u64,
    encode: impl FnOnce(Stamp, &mut Vec<u8>),
) -> (Vec<u8>, u64) {
    let copy_len = len.next_multiple_of(PAGE).max(PAGE);
    let copy_pages = if copies == 2 {
        (copy_len / PAGE) as u16
    } else {
        0
    };
    let mut buf = Vec::with_capacity((copies * copy_len) as usize);
    encode(
        Stamp {
            copy_pages,
            ..stamp
        },
        &mut buf,
    );
    debug_assert_eq!(buf.len() as u64, len);
    buf.resize(copy_len as usize, 0);
    if copies == 2 {
        buf.extend_from_within(..);
        let end = buf.len() as u64;
        (buf, end)
    } else {
        (buf, len)
    }
}

/// The journal's write position. Owned by whoever holds the commit leadership.
pub(crate) struct Journal {
    io: Arc<dyn ExtentIo>,
    base: u64,
    half_len: u64,
    active: u64,
    generation: u64,
    next_seq: u64,
    /// Byte offset within the active half where the last record ends; the next append starts
    /// at the page boundary at or after it.
    tail: u64,
    /// Where the active half's snapshot ends: what a compaction would free is what lies after.
    snapshot_end: u64,
    next_batch: u64,
    /// Copies the current batch's appends get ([`Journal::reserve`]).
    batch_copies: u64,
    /// Replay ended on a seal: the final batch was synced, its bytes need no re-verifying.
    replayed_sealed: bool,
}

impl Journal {
    /// Initialises an empty journal (half 0, generation 1).
    pub fn format(io: Arc<dyn ExtentIo>, base: u64, half_len: u64) -> io::Result<Self> {
        io.write_at(base + half_len, &[0; PAGE as usize])?;
        let mut j = Self {
            io,
            base,
            half_len,
            active: 1,
            generation: 0,
            next_seq: 0,
            tail: PAGE,
            snapshot_end: PAGE,
            next_batch: 1,
            batch_copies: 2,
            replayed_sealed: false,
        };
        j.compact(Vec::new())?;
        Ok(j)
    }

    /// Reads the newest complete half and returns the journal plus its records in order, each
    /// with its batch number.
    pub fn replay(
        io: Arc<dyn ExtentIo>,
        base: u64,
        half_len: u64,
    ) -> Result<(Self, Vec<(Record, u64)>)> {
        let mut best: Option<(u64, u64)> = None;
        for half in 0..2 {
            let mut page = [0u8; 24];
            io.read_at(base + half * half_len, &mut page)?;
            let sum = u64::from_le_bytes(page[16..24].try_into().unwrap());
            if &page[..8] == HALF_MAGIC && xxhash_rust::xxh3::xxh3_64(&page[..16]) == sum {
                let generation = u64::from_le_bytes(page[8..16].try_into().unwrap());
                if best.is_none_or(|(g, _)| generation > g) {
                    best = Some((generation, half));
                }
            }
        }
        let Some((generation, active)) = best else {
            return Err(StoreError::Corrupt("journal: no valid half header".into()));
        };
        let mut reader = HalfReader {
            io: &*io,
            base: base + active * half_len,
            half_len,
            generation,
            buf: Vec::new(),
            buf_at: 0,
        };
        let mut replayed = Replayed::default();
        let mut tail = PAGE;
        let mut snapshot_end = PAGE;
        loop {
            let seq = replayed.next_seq;
            let aligned = tail.next_multiple_of(PAGE);
            // A record written once continues where the last one ended (format 1 also packed
            // appends into one page); anything else starts an append on a fresh page.
            let packed = match tail != aligned {
                true => reader
                    .record(tail, half_len, seq)?
                    .filter(|r| r.copy_pages == 0),
                false => None,
            };
            if let Some(r) = packed {
                tail += r.len;
                replayed.push(r);
            } else {
                let copy_pages = match reader.record(aligned, half_len, seq)? {
                    Some(r) if r.copy_pages == 0 => {
                        tail = aligned + r.len;
                        replayed.push(r);
                        None
                    }
                    Some(r) => Some(u64::from(r.copy_pages)),
                    None => match reader.second_copy(aligned, seq)? {
                        Some(pages) => Some(pages),
                        None => break,
                    },
                };
                if let Some(pages) = copy_pages {
                    reader.mirrored(aligned, pages * PAGE, &mut replayed)?;
                    tail = aligned + 2 * pages * PAGE;
                }
            }
            if replayed
                .records
                .last()
                .is_some_and(|&(_, batch)| batch == 0)
            {
                snapshot_end = tail.next_multiple_of(PAGE);
            }
        }
        let Replayed {
            records,
            next_seq,
            sealed,
        } = replayed;
        let journal = Self {
            io,
            base,
            half_len,
            active,
            generation,
            next_seq,
            tail,
            snapshot_end,
            next_batch: records.last().map_or(1, |(_, b)| b + 1),
            batch_copies: 2,
            replayed_sealed: sealed,
        };
        Ok((journal, records))
    }

    /// Whether the replayed journal ended with a seal ([`Journal::seal`]).
    pub fn replayed_sealed(&self) -> bool {
        self.replayed_sealed
    }

    /// Appends a seal: the caller has synced every batch appended so far (a clean close), so
    /// replay may take the final batch as it is. Not durable until the caller syncs. Nothing
    /// is appended when no batch follows the snapshot or the half has no page left.
    pub fn seal(&mut self) -> io::Result<()> {
        let page_start = self.tail.next_multiple_of(PAGE);
        if self.next_batch == 1 || page_start + PAGE > self.half_len {
            return Ok(());
        }
        let copies = if page_start + 2 * PAGE <= self.half_len {
            2
        } else {
            1
        };
        let stamp = Stamp {
            generation: self.generation,
            seq: self.next_seq,
            batch: self.next_batch - 1,
            copy_pages: 0,
        };
        let (buf, end) = encode_append(HEADER as u64, stamp, copies, |stamp, out| {
            encode_entry(KIND_SEAL, stamp, out, |_| {})
        });
        let half_base = self.base + self.active * self.half_len;
        self.io.write_at(half_base + page_start, &buf)?;
        self.next_seq += 1;
        self.tail = page_start + end;
        Ok(())
    }

    /// Bytes still free in the active half.
    pub fn space_left(&self) -> u64 {
        self.half_len - self.tail.next_multiple_of(PAGE)
    }

    /// Prepares for a batch whose appends (the batch and any amendment of it) hold at most
    /// `bytes` of records, page rounding included: compacts first, with the records `live`
    /// returns, when they would not fit, and gives them two copies when there is room. A half
    /// the snapshot nearly fills takes single copies rather than compacting before every batch.
    pub fn reserve(&mut self, bytes: u64, live: impl FnOnce() -> Vec<Record>) -> io::Result<()> {
        let once = bytes.next_multiple_of(PAGE);
        let left = self.space_left();
        let compaction_frees = self.tail.next_multiple_of(PAGE) - self.snapshot_end;
        if left < once || (left < 2 * once && compaction_frees >= once) {
            let live = live();
            tracing::debug!(entries = live.len(), "compacting journal");
            self.compact(live)?;
        }
        self.batch_copies = if once <= MAX_COPY_BYTES && self.space_left() >= 2 * once {
            2
        } else {
            1
        };
        Ok(())
    }

    /// Appends `records` (not yet durable: the caller syncs the drive) as a new batch, or, with
    /// `same_batch`, as more of the batch appended last: replay re-verifies the data of the
    /// whole final batch, so records that amend a batch must carry its number.
    pub fn append(&mut self, records: &[Record], same_batch: bool) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let batch = if same_batch {
            self.next_batch - 1
        } else {
            self.next_batch
        };
        let page_start = self.tail.next_multiple_of(PAGE);
        let len: u64 = records.iter().map(|r| r.encoded_len() as u64).sum();
        let copy_len = len.next_multiple_of(PAGE);
        let copies = if self.batch_copies == 2
            && copy_len <= MAX_COPY_BYTES
            && page_start + 2 * copy_len <= self.half_len
        {
            2
        } else {
            1
        };
        if page_start + copy_len > self.half_len {
            return Err(io::Error::other(format!(
                "journal half overflow: an append of {copy_len} bytes at offset {page_start} \
                 passes the half's {} bytes",
                self.half_len
            )));
        }
        let stamp = Stamp {
            generation: self.generation,
            seq: self.next_seq,
            batch,
            copy_pages: 0,
        };
        let (buf, end) = encode_append(len, stamp, copies, |stamp, out| {
            encode_records(records, stamp, out)
        });
        let half_base = self.base + self.active * self.half_len;
        self.io.write_at(half_base + page_start, &buf)?;
        self.next_seq += records.len() as u64;
        self.next_batch = batch + 1;
        self.tail = page_start + end;
        Ok(())
    }

    /// Rewrites the live set into the other half and switches to it, durably. The snapshot is
    /// written in chunks of at most [`MAX_COPY_BYTES`], each in two copies when both copies of
    /// the whole snapshot take at most half of the half (so appends keep room after it).
    pub fn compact(&mut self, live: Vec<Record>) -> io::Result<()> {
        let target = 1 - self.active;
        let generation = self.generation + 1;
        let half_base = self.base + target * self.half_len;
        let chunks = chunk_bounds(&live);
        let copy_bytes: u64 = chunks
            .iter()
            .map(|c| (c.1 as u64).next_multiple_of(PAGE).max(PAGE))
            .sum::<u64>()
            .max(PAGE);
        let copies = if PAGE + 2 * copy_bytes <= self.half_len / 2 {
            2
        } else {
            1
        };
        let mut written = PAGE;
        let mut tail = PAGE;
        let mut seq = 0;
        if live.is_empty() {
            // Zeros where the first record would go, so nothing stale is read there.
            self.write_checked(half_base, written, &[0; PAGE as usize])?;
        }
        let mut start = 0;
        for &(end, len) in &chunks {
            let stamp = Stamp {
                generation,
                seq,
                batch: 0,
                copy_pages: 0,
            };
            let chunk = &live[start..end];
            let (buf, chunk_end) = encode_append(len as u64, stamp, copies, |stamp, out| {
                encode_records(chunk, stamp, out)
            });
            self.write_checked(half_base, written, &buf)?;
            tail = written + chunk_end;
            written += buf.len() as u64;
            seq += (end - start) as u64;
            start = end;
        }
        self.io.sync()?;
        let mut header = vec![0u8; PAGE as usize];
        header[..8].copy_from_slice(HALF_MAGIC);
        header[8..16].copy_from_slice(&generation.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&header[..16]);
        header[16..24].copy_from_slice(&sum.to_le_bytes());
        self.io.write_at(half_base, &header)?;
        self.io.sync()?;
        self.active = target;
        self.generation = generation;
        self.next_seq = seq;
        self.tail = tail;
        self.snapshot_end = tail.next_multiple_of(PAGE);
        self.next_batch = 1;
        Ok(())
    }

    fn write_checked(&self, half_base: u64, at: u64, bytes: &[u8]) -> io::Result<()> {
        if at + bytes.len() as u64 > self.half_len {
            return Err(io::Error::other(format!(
                "journal snapshot does not fit in a half: {} bytes at offset {at} pass its {} bytes",
                bytes.len(),
                self.half_len
            )));
        }
        self.io.write_at(half_base + at, bytes)
    }
}

/// Splits a snapshot into chunks of at most [`MAX_COPY_BYTES`] of records: (end index, bytes).
fn chunk_bounds(live: &[Record]) -> Vec<(usize, usize)> {
    let mut chunks = Vec::new();
    let mut len = 0;
    for (i, r) in live.iter().enumerate() {
        let n = r.encoded_len();
        if len > 0 && (len + n) as u64 > MAX_COPY_BYTES {
            chunks.push((i, len));
            len = 0;
        }
        len += n;
    }
    if len > 0 {
        chunks.push((live.len(), len));
    }
    chunks
}

/// What replay has read so far.
#[derive(Default)]
struct Replayed {
    records: Vec<(Record, u64)>,
    next_seq: u64,
    sealed: bool,
}

impl Replayed {
    fn push(&mut self, found: Found) {
        self.next_seq += 1;
        match found.entry {
            Entry::Record(r) => {
                self.records.push((r, found.batch));
                self.sealed = false;
            }
            Entry::Seal => self.sealed = true,
        }
    }
}

/// A record read back, with its place in the journal.
struct Found {
    entry: Entry,
    batch: u64,
    len: u64,
    copy_pages: u16,
}

/// Sequential reader over one half of one generation, fetching 1 MiB at a time.
struct HalfReader<'a> {
    io: &'a dyn ExtentIo,
    base: u64,
    half_len: u64,
    generation: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl HalfReader<'_> {
    fn bytes(&mut self, at: u64, n: usize) -> io::Result<&[u8]> {
        let end = self.buf_at + self.buf.len() as u64;
        if at < self.buf_at || at + n as u64 > end {
            let len = ((1u64 << 20).max(n as u64)).min(self.half_len - at) as usize;
            self.buf.resize(len, 0);
            self.io.read_at(self.base + at, &mut self.buf)?;
            self.buf_at = at;
        }
        let off = (at - self.buf_at) as usize;
        Ok(&self.buf[off..off + n])
    }

    /// The record at `at` if it is intact, ends by `limit` and has this generation and `seq`.
    fn record(&mut self, at: u64, limit: u64, seq: u64) -> io::Result<Option<Found>> {
        let limit = limit.min(self.half_len);
        if at + HEADER as u64 > limit {
            return Ok(None);
        }
        let generation = self.generation;
        let h = self.bytes(at, HEADER)?;
        let body_len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        let kind = h[12];
        let copy_pages = u16::from_le_bytes(h[13..15].try_into().unwrap());
        let rec_gen = u64::from_le_bytes(h[16..24].try_into().unwrap());
        let rec_seq = u64::from_le_bytes(h[24..32].try_into().unwrap());
        let batch = u64::from_le_bytes(h[32..40].try_into().unwrap());
        let len = (HEADER + body_len) as u64;
        if body_len > MAX_BODY || rec_gen != generation || rec_seq != seq || at + len > limit {
            return Ok(None);
        }
        let all = self.bytes(at, len as usize)?;
        let sum = u64::from_le_bytes(all[..8].try_into().unwrap());
        if xxhash_rust::xxh3::xxh3_64(&all[8..]) != sum {
            return Ok(None);
        }
        Ok(
            Record::decode_body(kind, &all[HEADER..]).map(|entry| Found {
                entry,
                batch,
                len,
                copy_pages,
            }),
        )
    }

    /// The pages of one copy of a mirrored append starting at `at` whose first copy is
    /// unreadable there: found as its second copy, the first page boundary after `at` holding
    /// `seq` with a page count equal to its distance from `at`.
    fn second_copy(&mut self, at: u64, seq: u64) -> io::Result<Option<u64>> {
        for pages in 1..=MAX_COPY_BYTES / PAGE {
            let copy = at + pages * PAGE;
            let limit = (copy + pages * PAGE).min(self.half_len);
            if copy >= self.half_len {
                break;
            }
            if let Some(r) = self.record(copy, limit, seq)?
                && u64::from(r.copy_pages) == pages
            {
                return Ok(Some(pages));
            }
        }
        Ok(None)
    }

    /// Reads the records of the mirrored append at `at` whose copies are `copy_len` bytes each:
    /// each record from copy A or, where A's is damaged, from copy B at the same offset.
    fn mirrored(&mut self, at: u64, copy_len: u64, replayed: &mut Replayed) -> io::Result<()> {
        let pages = (copy_len / PAGE) as u16;
        let mut offset = 0;
        loop {
            let seq = replayed.next_seq;
            let mut found = self
                .record(at + offset, at + copy_len, seq)?
                .filter(|r| r.copy_pages == pages);
            if found.is_none() {
                found = self
                    .record(at + copy_len + offset, at + 2 * copy_len, seq)?
                    .filter(|r| r.copy_pages == pages);
            }
            let Some(r) = found else {
                return Ok(());
            };
            offset += r.len;
            replayed.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::io::FileDrive;
    use proptest::prelude::*;

    /// A 4 MiB drive file for one test, removed when the guard drops.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn journal_file(test: &str) -> (TempFile, Arc<dyn ExtentIo>) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("memkv-journal-{test}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let io = Arc::new(FileDrive::open(&path, Some(4 << 20), 0, true).unwrap());
        (TempFile(path), io)
    }

    const HALF: u64 = 1 << 20;

    fn commit(k: &str, n: u64) -> Record {
        Record::Commit(CommitRecord {
            key: k.as_bytes().into(),
            len: n,
            checksum: n * 7,
            extents: (0..n).collect(),
        })
    }

    fn replayed(io: &Arc<dyn ExtentIo>) -> Vec<(Record, u64)> {
        Journal::replay(Arc::clone(io), PAGE, HALF).unwrap().1
    }

    /// Flips one bit `at` bytes into the active half.
    fn flip(io: &Arc<dyn ExtentIo>, j: &Journal, at: u64) {
        let mut b = [0u8];
        let at = PAGE + j.active * HALF + at;
        io.read_at(at, &mut b).unwrap();
        io.write_at(at, &[b[0] ^ 0x10]).unwrap();
    }

    #[test]
    fn append_replay_compact_and_torn_tail() {
        let (_file, io) = journal_file("basic");
        let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        let recs = vec![
            commit("a", 1),
            Record::Delete {
                key: b"a".as_slice().into(),
            },
        ];
        j.append(&recs, false).unwrap();
        let last_append = j.tail;
        j.append(&[commit("b", 3)], false).unwrap();
        let (mut j2, got) = Journal::replay(io.clone(), PAGE, HALF).unwrap();
        let want = vec![
            (recs[0].clone(), 1),
            (recs[1].clone(), 1),
            (commit("b", 3), 2),
        ];
        assert_eq!(got, want);
        assert_eq!(j2.tail, j.tail);
        // Tear both copies of the last append (it was never synced): replay stops before it.
        flip(&io, &j2, last_append + 50);
        flip(&io, &j2, last_append + PAGE + 50);
        assert_eq!(replayed(&io).len(), 2);
        j2.compact(vec![commit("c", 2)]).unwrap();
        j2.append(&[commit("d", 1)], false).unwrap();
        // Amending the last batch keeps its number, so replay re-verifies all of it.
        j2.append(&[commit("e", 4)], true).unwrap();
        j2.append(&[commit("f", 5)], false).unwrap();
        assert_eq!(
            replayed(&io),
            vec![
                (commit("c", 2), 0),
                (commit("d", 1), 1),
                (commit("e", 4), 1),
                (commit("f", 5), 2)
            ]
        );
    }

    #[test]
    fn a_format_1_journal_with_batches_packed_into_pages_replays() {
        let (_file, io) = journal_file("v1");
        let j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        // What format 1 wrote: each batch right after the last, sharing its page, one copy.
        let mut packed = Vec::new();
        for (seq, r) in [commit("a", 1), commit("b", 2), commit("c", 3)]
            .iter()
            .enumerate()
        {
            let seq = seq as u64;
            let stamp = Stamp {
                generation: j.generation,
                seq,
                batch: seq + 1,
                copy_pages: 0,
            };
            r.encode_into(stamp, &mut packed);
        }
        packed.resize(PAGE as usize, 0);
        io.write_at(PAGE + j.active * HALF + PAGE, &packed).unwrap();
        assert_eq!(
            replayed(&io),
            vec![
                (commit("a", 1), 1),
                (commit("b", 2), 2),
                (commit("c", 3), 3)
            ]
        );
    }

    #[test]
    fn garbage_in_the_newest_append_never_reaches_the_records_before_it() {
        let (_file, io) = journal_file("torn");
        let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        j.append(&[commit("a", 1)], false).unwrap();
        j.append(&[commit("b", 2), commit("c", 3)], false).unwrap();
        let newest = j.tail;
        j.append(&[commit("d", 600)], false).unwrap();
        let copy = (j.tail - newest) / 2;
        assert!(copy > PAGE, "the last record spans pages");
        let half_base = PAGE + j.active * HALF;
        // The drive tore the newest append's first sector into garbage in both copies: the
        // records before it, on pages that were never written again, all replay.
        io.write_at(half_base + newest, &[0xa5; 512]).unwrap();
        io.write_at(half_base + newest + copy, &[0xa5; 512])
            .unwrap();
        let (mut j2, got) = Journal::replay(io.clone(), PAGE, HALF).unwrap();
        assert_eq!(
            got,
            vec![
                (commit("a", 1), 1),
                (commit("b", 2), 2),
                (commit("c", 3), 2)
            ]
        );
        // The next append goes where the torn one was and replays after them.
        j2.append(&[commit("e", 1)], false).unwrap();
        let got = replayed(&io);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], (commit("e", 1), 3));
    }

    #[test]
    fn a_damaged_record_is_read_from_its_second_copy_and_replay_goes_on() {
        let (_file, io) = journal_file("mirror");
        let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        j.compact(vec![commit("s", 1), commit("t", 2)]).unwrap();
        let batch_at = j.tail;
        j.append(&[commit("a", 1), commit("b", 2), commit("c", 3)], false)
            .unwrap();
        j.append(&[commit("d", 4)], false).unwrap();
        let want = replayed(&io);
        assert_eq!(want.len(), 6);
        // Copy A of the snapshot's first record (found through copy B), copy A of the batch's
        // second record, and copy B of its third: every record still has one good copy.
        flip(&io, &j, PAGE + 3);
        let second = batch_at + commit("a", 1).encoded_len() as u64 + 45;
        flip(&io, &j, second);
        let third = batch_at + PAGE + (commit("a", 1).encoded_len() * 2) as u64 + 45;
        flip(&io, &j, third);
        assert_eq!(replayed(&io), want);
        // Both copies of one record bad: replay stops there, before it, never past it.
        flip(&io, &j, second + PAGE);
        assert_eq!(replayed(&io), want[..3]);
    }

    #[test]
    fn a_half_the_snapshot_fills_takes_single_copies_instead_of_compacting_each_batch() {
        let (_file, io) = journal_file("single");
        let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        // Each record about 50 KiB: 9 of them are more than a quarter of the half.
        let live: Vec<Record> = (0..9).map(|i| commit(&format!("k{i}"), 6000)).collect();
        j.compact(live.clone()).unwrap();
        assert_eq!(
            j.tail,
            PAGE + live.iter().map(|r| r.encoded_len() as u64).sum::<u64>()
        );
        let generation = j.generation;
        let need = 300 << 10;
        j.reserve(need, || unreachable!("nothing to compact away"))
            .unwrap();
        assert_eq!(j.batch_copies, 1, "two copies would not fit");
        j.append(&[commit("x", 1)], false).unwrap();
        // A batch that does not fit even once compacts; the half has room for two copies then.
        let mut compacted = false;
        j.reserve(600 << 10, || {
            compacted = true;
            vec![commit("y", 1)]
        })
        .unwrap();
        assert!(compacted && j.generation == generation + 1);
        j.reserve(PAGE, || unreachable!("room enough")).unwrap();
        assert_eq!(j.batch_copies, 2);
        j.append(&[commit("z", 1)], false).unwrap();
        assert_eq!(
            replayed(&io),
            vec![(commit("y", 1), 0), (commit("z", 1), 1)]
        );
    }

    #[test]
    fn a_seal_marks_the_final_batch_synced_until_another_batch_follows() {
        let (_file, io) = journal_file("seal");
        let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
        let tail = j.tail;
        j.seal().unwrap();
        assert_eq!(j.tail, tail, "nothing after the snapshot: nothing to seal");
        j.append(&[commit("a", 1)], false).unwrap();
        assert!(
            !Journal::replay(io.clone(), PAGE, HALF)
                .unwrap()
                .0
                .replayed_sealed()
        );
        j.seal().unwrap();
        let (j2, got) = Journal::replay(io.clone(), PAGE, HALF).unwrap();
        assert!(j2.replayed_sealed());
        assert_eq!(got, vec![(commit("a", 1), 1)]);
        assert_eq!(
            (j2.next_seq, j2.next_batch, j2.tail),
            (j.next_seq, 2, j.tail)
        );
        // Copy A of the seal went bad: copy B still seals.
        flip(&io, &j, j.tail - 2 * PAGE + 20);
        assert!(
            Journal::replay(io.clone(), PAGE, HALF)
                .unwrap()
                .0
                .replayed_sealed()
        );
        // A batch after the seal (a write that was in flight at close) is the final batch again.
        j.append(&[commit("b", 2)], false).unwrap();
        let (j3, got) = Journal::replay(io, PAGE, HALF).unwrap();
        assert!(!j3.replayed_sealed());
        assert_eq!(got, vec![(commit("a", 1), 1), (commit("b", 2), 2)]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Appends of random records, each with one flipped bit in one copy of some records:
        /// replay always returns every record, in order.
        #[test]
        fn one_bad_copy_per_record_loses_nothing(
            appends in prop::collection::vec(
                prop::collection::vec((0u64..300, any::<bool>(), any::<bool>(), 0usize..2000), 1..5),
                1..8,
            ),
        ) {
            let (_file, io) = journal_file("prop");
            let mut j = Journal::format(io.clone(), PAGE, HALF).unwrap();
            let mut want = Vec::new();
            let mut flips = Vec::new();
            for (batch, records) in appends.iter().enumerate() {
                let at = j.tail.next_multiple_of(PAGE);
                let recs: Vec<Record> = records
                    .iter()
                    .enumerate()
                    .map(|(i, &(n, ..))| commit(&format!("k{batch}.{i}"), n))
                    .collect();
                j.reserve(32 << 10, || unreachable!("the half has room")).unwrap();
                j.append(&recs, false).unwrap();
                let copy = (j.tail - at) / 2;
                let mut offset = 0;
                for (r, &(_, damaged, in_b, byte)) in recs.iter().zip(records) {
                    let len = r.encoded_len() as u64;
                    if damaged {
                        flips.push(at + offset + (byte as u64 % len) + if in_b { copy } else { 0 });
                    }
                    offset += len;
                    want.push((r.clone(), batch as u64 + 1));
                }
            }
            for at in flips {
                flip(&io, &j, at);
            }
            prop_assert_eq!(replayed(&io), want);
        }
    }
}
