//! Index journal: an append-only log of commit and delete records in a region of drive 0.
//!
//! The region has two halves. Each starts with a header page naming its generation; replay uses
//! the valid half with the highest generation and reads records until the first one whose
//! checksum, generation or sequence number is wrong (a torn tail or stale bytes). Compaction
//! writes a snapshot of the live index into the other half under generation + 1, makes it
//! durable, and only then writes that half's header: a crash at any point leaves one complete,
//! consistent half. Writes are whole pages, which keeps the journal usable on O_DIRECT devices.
//!
//! Each append starts on a fresh page (format 2): a page that holds synced records is never
//! written again, so a drive that tears a sector of an append into garbage loses only that
//! unacknowledged append, never the records before it. Replay therefore reads the next record
//! where the last one ended or, failing that, at the start of the next page, and only with the
//! expected sequence number, so no record can be skipped. Format 1 packed batches into the
//! partial tail page (rewritten with the same prefix); its journals replay the same way.
//!
//! Record: checksum:u64 len:u32 kind:u8 pad[3] generation:u64 seq:u64 batch:u64 body[len],
//! checksum = xxh3 of everything after the checksum field. `batch` numbers group commits: only
//! the journal's final batch can have been cut short by a crash before its sync finished, so
//! replay re-verifies the data of that batch alone (0 marks snapshot records, always durable). Commit body: key_len:u16 key value_len:u64
//! value_checksum:u64 n:u32 extent ids[n]:u64. Delete body: key_len:u16 key.

use std::io;
use std::sync::Arc;

use super::io::ExtentIo;
use crate::error::{Result, StoreError};

pub(crate) const PAGE: u64 = 4096;
const HALF_MAGIC: &[u8; 8] = b"MKVJHALF";
const HEADER: usize = 40;
const KIND_COMMIT: u8 = 1;
const KIND_DELETE: u8 = 2;
/// Upper bound of one record's body; values are limited so their extent lists fit.
pub(crate) const MAX_BODY: usize = 2 + 1024 + 8 + 8 + 4 + 8 * MAX_EXTENTS_PER_VALUE;
pub(crate) const MAX_EXTENTS_PER_VALUE: usize = 16384;
/// Bytes a live entry may take in a snapshot, not counting its extent ids.
pub(crate) const SNAPSHOT_BYTES_PER_ENTRY: u64 = (HEADER + 2 + 1024 + 8 + 8 + 4) as u64;

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

impl Record {
    fn encode_into(&self, generation: u64, seq: u64, batch: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        let (kind, key) = match self {
            Record::Commit(c) => (KIND_COMMIT, &c.key),
            Record::Delete { key } => (KIND_DELETE, key),
        };
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
        let body_len = (out.len() - start - HEADER) as u32;
        let h = &mut out[start..start + HEADER];
        h[8..12].copy_from_slice(&body_len.to_le_bytes());
        h[12] = kind;
        h[16..24].copy_from_slice(&generation.to_le_bytes());
        h[24..32].copy_from_slice(&seq.to_le_bytes());
        h[32..40].copy_from_slice(&batch.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&out[start + 8..]);
        out[start..start + 8].copy_from_slice(&sum.to_le_bytes());
    }

    fn decode_body(kind: u8, body: &[u8]) -> Option<Record> {
        let key_len = u16::from_le_bytes(body.get(..2)?.try_into().ok()?) as usize;
        let key: Box<[u8]> = body.get(2..2 + key_len)?.into();
        let rest = &body[2 + key_len..];
        let u64_at = |o: usize| Some(u64::from_le_bytes(rest.get(o..o + 8)?.try_into().ok()?));
        match kind {
            KIND_DELETE if rest.is_empty() => Some(Record::Delete { key }),
            KIND_COMMIT => {
                let n = u32::from_le_bytes(rest.get(16..20)?.try_into().ok()?) as usize;
                if rest.len() != 20 + 8 * n {
                    return None;
                }
                let extents = (0..n).map(|i| u64_at(20 + 8 * i)).collect::<Option<_>>()?;
                Some(Record::Commit(CommitRecord {
                    key,
                    len: u64_at(0)?,
                    checksum: u64_at(8)?,
                    extents,
                }))
            }
            _ => None,
        }
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
    next_batch: u64,
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
            next_batch: 1,
        };
        j.compact(std::iter::empty())?;
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
        let mut reader = HalfReader::new(&*io, base + active * half_len, half_len);
        let mut records = Vec::new();
        let mut tail = PAGE;
        let mut seq = 0u64;
        loop {
            let mut found = reader.next(tail, generation, seq)?;
            let mut at = tail;
            if found.is_none() && tail % PAGE != 0 {
                at = tail.next_multiple_of(PAGE);
                found = reader.next(at, generation, seq)?;
            }
            let Some((rec, batch, len)) = found else {
                break;
            };
            records.push((rec, batch));
            tail = at + len;
            seq += 1;
        }
        let journal = Self {
            io,
            base,
            half_len,
            active,
            generation,
            next_seq: seq,
            tail,
            next_batch: records.last().map_or(1, |(_, b)| b + 1),
        };
        Ok((journal, records))
    }

    /// Bytes still free in the active half.
    pub fn space_left(&self) -> u64 {
        self.half_len - self.tail.next_multiple_of(PAGE)
    }

    /// Appends records (not yet durable: the caller syncs the drive) as a new batch, or, with
    /// `same_batch`, as more of the batch appended last: replay re-verifies the data of the
    /// whole final batch, so records that amend a batch must carry its number.
    pub fn append(&mut self, records: &[Record], same_batch: bool) -> io::Result<()> {
        if same_batch {
            self.next_batch -= 1;
        }
        let page_start = self.tail.next_multiple_of(PAGE);
        let half_base = self.base + self.active * self.half_len;
        let mut buf = Vec::with_capacity(PAGE as usize);
        for r in records {
            r.encode_into(self.generation, self.next_seq, self.next_batch, &mut buf);
            self.next_seq += 1;
        }
        self.next_batch += 1;
        let new_tail = page_start + buf.len() as u64;
        if new_tail.next_multiple_of(PAGE) > self.half_len {
            return Err(io::Error::other("journal half overflow"));
        }
        buf.resize(buf.len().next_multiple_of(PAGE as usize), 0);
        self.io.write_at(half_base + page_start, &buf)?;
        self.tail = new_tail;
        Ok(())
    }

    /// Rewrites the live set into the other half and switches to it, durably.
    pub fn compact(&mut self, live: impl Iterator<Item = Record>) -> io::Result<()> {
        let target = 1 - self.active;
        let generation = self.generation + 1;
        let half_base = self.base + target * self.half_len;
        let mut buf = Vec::with_capacity(1 << 20);
        let mut written = PAGE;
        let mut seq = 0;
        for r in live {
            r.encode_into(generation, seq, 0, &mut buf);
            seq += 1;
            if buf.len() >= 1 << 20 {
                let whole = buf.len() / PAGE as usize * PAGE as usize;
                self.write_checked(half_base, written, &buf[..whole])?;
                written += whole as u64;
                buf.drain(..whole);
            }
        }
        let tail = written + buf.len() as u64;
        buf.resize(
            buf.len().next_multiple_of(PAGE as usize).max(PAGE as usize),
            0,
        );
        self.write_checked(half_base, written, &buf)?;
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
        self.next_batch = 1;
        Ok(())
    }

    fn write_checked(&self, half_base: u64, at: u64, bytes: &[u8]) -> io::Result<()> {
        if at + bytes.len() as u64 > self.half_len {
            return Err(io::Error::other("journal snapshot does not fit in a half"));
        }
        self.io.write_at(half_base + at, bytes)
    }
}

/// Sequential reader over one half, fetching 1 MiB at a time.
struct HalfReader<'a> {
    io: &'a dyn ExtentIo,
    base: u64,
    half_len: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl<'a> HalfReader<'a> {
    fn new(io: &'a dyn ExtentIo, base: u64, half_len: u64) -> Self {
        Self {
            io,
            base,
            half_len,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    fn bytes(&mut self, at: u64, n: usize) -> io::Result<Option<&[u8]>> {
        if at + n as u64 > self.half_len {
            return Ok(None);
        }
        let end = self.buf_at + self.buf.len() as u64;
        if at < self.buf_at || at + n as u64 > end {
            let len = ((1u64 << 20).max(n as u64)).min(self.half_len - at) as usize;
            self.buf.resize(len, 0);
            self.io.read_at(self.base + at, &mut self.buf)?;
            self.buf_at = at;
        }
        let off = (at - self.buf_at) as usize;
        Ok(Some(&self.buf[off..off + n]))
    }

    /// The record at `at` if it is intact and belongs to this generation and sequence.
    fn next(
        &mut self,
        at: u64,
        generation: u64,
        seq: u64,
    ) -> io::Result<Option<(Record, u64, u64)>> {
        let Some(h) = self.bytes(at, HEADER)? else {
            return Ok(None);
        };
        let body_len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        let kind = h[12];
        let rec_gen = u64::from_le_bytes(h[16..24].try_into().unwrap());
        let rec_seq = u64::from_le_bytes(h[24..32].try_into().unwrap());
        let batch = u64::from_le_bytes(h[32..40].try_into().unwrap());
        if body_len > MAX_BODY || rec_gen != generation || rec_seq != seq {
            return Ok(None);
        }
        let Some(all) = self.bytes(at, HEADER + body_len)? else {
            return Ok(None);
        };
        let sum = u64::from_le_bytes(all[..8].try_into().unwrap());
        if xxhash_rust::xxh3::xxh3_64(&all[8..]) != sum {
            return Ok(None);
        }
        let len = (HEADER + body_len) as u64;
        Ok(Record::decode_body(kind, &all[HEADER..]).map(|r| (r, batch, len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::io::FileDrive;

    /// A 1 MiB drive file for one test, removed when the guard drops.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn journal_file(test: &str) -> (TempFile, Arc<dyn ExtentIo>) {
        let path =
            std::env::temp_dir().join(format!("memkv-journal-{test}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let io = Arc::new(FileDrive::open(&path, Some(1 << 20), 0, true).unwrap());
        (TempFile(path), io)
    }

    fn commit(k: &str, n: u64) -> Record {
        Record::Commit(CommitRecord {
            key: k.as_bytes().into(),
            len: n,
            checksum: n * 7,
            extents: (0..n).collect(),
        })
    }

    #[test]
    fn append_replay_compact_and_torn_tail() {
        let (_file, io) = journal_file("basic");
        let half = 256 << 10;
        let mut j = Journal::format(io.clone(), 4096, half).unwrap();
        let recs = vec![
            commit("a", 1),
            Record::Delete {
                key: b"a".as_slice().into(),
            },
        ];
        j.append(&recs, false).unwrap();
        j.append(&[commit("b", 3)], false).unwrap();
        let (mut j2, got) = Journal::replay(io.clone(), 4096, half).unwrap();
        let want = vec![
            (recs[0].clone(), 1),
            (recs[1].clone(), 1),
            (commit("b", 3), 2),
        ];
        assert_eq!(got, want);
        // Tear the last record: replay stops before it.
        let torn_at = 4096 + j2.active * half + j2.tail - 3;
        io.write_at(torn_at, &[0xff]).unwrap();
        let (_, got) = Journal::replay(io.clone(), 4096, half).unwrap();
        assert_eq!(got.len(), 2);
        j2.compact([commit("c", 2)].into_iter()).unwrap();
        j2.append(&[commit("d", 1)], false).unwrap();
        // Amending the last batch keeps its number, so replay re-verifies all of it; the page
        // cached from the last write is what the amendment extends.
        j2.append(&[commit("e", 4)], true).unwrap();
        j2.append(&[commit("f", 5)], false).unwrap();
        let (_, got) = Journal::replay(io, 4096, half).unwrap();
        assert_eq!(
            got,
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
        let half = 256 << 10;
        let j = Journal::format(io.clone(), 4096, half).unwrap();
        // What format 1 wrote: each batch right after the last, sharing its page.
        let mut packed = Vec::new();
        commit("a", 1).encode_into(j.generation, 0, 1, &mut packed);
        commit("b", 2).encode_into(j.generation, 1, 2, &mut packed);
        commit("c", 3).encode_into(j.generation, 2, 3, &mut packed);
        packed.resize(PAGE as usize, 0);
        io.write_at(4096 + j.active * half + PAGE, &packed).unwrap();
        let (_, got) = Journal::replay(io, 4096, half).unwrap();
        assert_eq!(
            got,
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
        let half = 256 << 10;
        let mut j = Journal::format(io.clone(), 4096, half).unwrap();
        j.append(&[commit("a", 1)], false).unwrap();
        j.append(&[commit("b", 2), commit("c", 3)], false).unwrap();
        let first_page_end = j.tail.next_multiple_of(PAGE);
        j.append(&[commit("d", 600)], false).unwrap();
        assert!(
            j.tail > first_page_end + PAGE,
            "the last record spans pages"
        );
        let half_base = 4096 + j.active * half;
        // The drive tore the newest append's first sector into garbage: the records before it,
        // on pages that were never written again, all replay.
        io.write_at(half_base + first_page_end, &[0xa5; 512])
            .unwrap();
        let (mut j2, got) = Journal::replay(io.clone(), 4096, half).unwrap();
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
        let (_, got) = Journal::replay(io, 4096, half).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], (commit("e", 1), 3));
    }
}
