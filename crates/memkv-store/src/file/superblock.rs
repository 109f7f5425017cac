//! Per-drive superblock (first 4 KiB): identifies the store, the drive's place in it and the
//! layout, so drives cannot be mixed up and newer formats are refused.
//!
//! Layout (little endian): magic[8] version:u32 flags:u32 store_id:u128 drive_index:u32
//! drive_count:u32 block_size:u64 drive_size:u64 data_offset:u64 extents:u64
//! journal_offset:u64 journal_half_len:u64 checksum:u64 (xxh3 of everything before it).
//! The version is read before anything else so a newer layout is refused by number.
//! Flags: [`FLAG_FORMATTING`] marks a superblock written by a format that has not finished
//! (builds that predate it ignore flags, and never wrote one).

use crate::error::{Result, StoreError};

pub(crate) const SUPERBLOCK_LEN: usize = 4096;
pub(crate) const MAGIC: &[u8; 8] = b"MEMKVSB\0";
/// Format written by this build; older versions are read, and upgraded when opened.
/// 2: every journal append starts on a fresh page (a build that reads only format 1 would stop
/// replaying at the first page boundary a batch skipped to, so it must refuse these drives).
/// 3: every journal append is written in two copies (a build that reads only format 2 would
/// stop at the second copy, whose sequence numbers it has already read).
pub(crate) const FORMAT_VERSION: u32 = 3;
/// Set on every drive's superblock until the format has finished, which drive 0's superblock
/// without it marks; a store whose drive 0 still has it never held a value. The other drives
/// keep it: a marked drive beside a blank drive 0 is another store's.
pub(crate) const FLAG_FORMATTING: u32 = 1;
const ENCODED_LEN: usize = 8 + 4 + 4 + 16 + 4 + 4 + 8 * 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub version: u32,
    pub flags: u32,
    pub store_id: u128,
    pub drive_index: u32,
    pub drive_count: u32,
    pub block_size: u64,
    pub drive_size: u64,
    pub data_offset: u64,
    pub extents: u64,
    pub journal_offset: u64,
    pub journal_half_len: u64,
}

/// What the first page of a drive turned out to hold.
#[derive(Debug)]
pub(crate) enum Probe {
    Blank,
    Formatted(Superblock),
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SUPERBLOCK_LEN);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.store_id.to_le_bytes());
        b.extend_from_slice(&self.drive_index.to_le_bytes());
        b.extend_from_slice(&self.drive_count.to_le_bytes());
        for v in [
            self.block_size,
            self.drive_size,
            self.data_offset,
            self.extents,
            self.journal_offset,
            self.journal_half_len,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b.resize(SUPERBLOCK_LEN, 0);
        b
    }

    /// Whether this superblock belongs to a format that never finished.
    pub fn formatting(&self) -> bool {
        self.flags & FLAG_FORMATTING != 0
    }

    /// Decodes a drive's first page; `what` names the drive in errors.
    pub fn probe(page: &[u8], what: &str) -> Result<Probe> {
        if page.iter().all(|&b| b == 0) {
            return Ok(Probe::Blank);
        }
        if page.len() < ENCODED_LEN || &page[..8] != MAGIC {
            return Err(StoreError::Corrupt(format!(
                "{what} holds data that is not a memkv drive; refusing to overwrite it"
            )));
        }
        let mut r = Reader { buf: page, pos: 8 };
        let version = r.u32();
        if version > FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let body_end = ENCODED_LEN - 8;
        let stored_sum = u64::from_le_bytes(page[body_end..ENCODED_LEN].try_into().unwrap());
        if xxhash_rust::xxh3::xxh3_64(&page[..body_end]) != stored_sum {
            return Err(StoreError::Corrupt(format!(
                "{what}: superblock checksum mismatch"
            )));
        }
        let flags = r.u32();
        let store_id = u128::from_le_bytes(r.take(16).try_into().unwrap());
        Ok(Probe::Formatted(Superblock {
            version,
            flags,
            store_id,
            drive_index: r.u32(),
            drive_count: r.u32(),
            block_size: r.u64(),
            drive_size: r.u64(),
            data_offset: r.u64(),
            extents: r.u64(),
            journal_offset: r.u64(),
            journal_half_len: r.u64(),
        }))
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            flags: 0,
            store_id: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            drive_index: 1,
            drive_count: 2,
            block_size: 4 << 20,
            drive_size: 1 << 30,
            data_offset: 8 << 20,
            extents: 254,
            journal_offset: 4096,
            journal_half_len: 1 << 20,
        }
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let page = sample().encode();
        assert_eq!(page.len(), SUPERBLOCK_LEN);
        match Superblock::probe(&page, "d").unwrap() {
            Probe::Formatted(sb) => assert_eq!(sb, sample()),
            Probe::Blank => panic!("formatted page read as blank"),
        }
        let mut bad = page.clone();
        bad[40] ^= 1;
        assert!(matches!(
            Superblock::probe(&bad, "d"),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            Superblock::probe(&[0; 4096], "d"),
            Ok(Probe::Blank)
        ));
        let e = Superblock::probe(b"hello world", "d").unwrap_err();
        assert!(e.to_string().contains("not a memkv drive"));
    }

    #[test]
    fn newer_version_is_refused_naming_both() {
        let mut sb = sample();
        sb.version = FORMAT_VERSION + 1;
        let e = Superblock::probe(&sb.encode(), "d").unwrap_err();
        assert!(matches!(
            e,
            StoreError::UnsupportedVersion {
                found: 4,
                supported: 3
            }
        ));
        let msg = e.to_string();
        assert!(msg.contains('4') && msg.contains('3'), "{msg}");
    }
}
