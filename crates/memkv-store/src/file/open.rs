//! Opening file mode: format blank drives, or check that formatted drives belong together and
//! match the config, then rebuild the index by replaying the journal.
//!
//! Drive sizing: a configured `size` grows the file to that length; with no size an existing
//! non-empty file keeps its length and a missing or empty one becomes a 1 GiB sparse file. A
//! formatted drive keeps the geometry recorded in its superblock.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use super::commit::{BATCH_BYTES, GroupCommit, commit_record};
use super::direct::DirectDrive;
use super::extents::{ExtentAllocator, split_extent};
use super::io::{ExtentIo, FileDrive, InjectedDrive};
use super::journal::{CommitRecord, Journal, MAX_BODY, PAGE, Record, SNAPSHOT_BYTES_PER_ENTRY};
use super::superblock::{FLAG_FORMATTING, FORMAT_VERSION, Probe, SUPERBLOCK_LEN, Superblock};
use super::{DriveAccess, DriveHealth, FileBackend, FileBlock, Layout};
use crate::config::{DEFAULT_DRIVE_SIZE, DriveConfig};
use crate::error::{Result, StoreError};
use crate::index::{Entry, Index};

const DATA_ALIGN: u64 = 1 << 20;

pub(super) fn open(
    cfgs: &[DriveConfig],
    block_size: u64,
    access: DriveAccess,
    discard: bool,
) -> Result<FileBackend> {
    let mut drives: Vec<Arc<dyn ExtentIo>> = Vec::new();
    let mut probes = Vec::new();
    for (i, cfg) in cfgs.iter().enumerate() {
        let name = format!("storage.drives[{i}] ({})", cfg.path.display());
        let opened: std::io::Result<Arc<dyn ExtentIo>> = match &access {
            DriveAccess::PageCache(reads) => {
                let mapped = *reads == crate::config::FileReads::Mapped;
                FileDrive::open(&cfg.path, cfg.size, DEFAULT_DRIVE_SIZE, mapped)
                    .map(|d| Arc::new(d) as Arc<dyn ExtentIo>)
            }
            DriveAccess::Direct => DirectDrive::open(&cfg.path, cfg.size, DEFAULT_DRIVE_SIZE)
                .map(|d| Arc::new(d) as Arc<dyn ExtentIo>),
            DriveAccess::Injected(given) => {
                if given.len() != cfgs.len() {
                    return Err(StoreError::BadRequest(format!(
                        "{} drives given to open on, but storage.drives lists {}",
                        given.len(),
                        cfgs.len()
                    )));
                }
                Ok(Arc::new(InjectedDrive(Arc::clone(&given[i]))) as Arc<dyn ExtentIo>)
            }
        };
        let drive = opened
            .map_err(|e| StoreError::Io(std::io::Error::new(e.kind(), format!("{name}: {e}"))))?;
        if drive.len() < SUPERBLOCK_LEN as u64 {
            return Err(StoreError::BadRequest(format!(
                "{name} is smaller than one superblock"
            )));
        }
        let mut page = vec![0; SUPERBLOCK_LEN];
        drive.read_at(0, &mut page)?;
        probes.push(Superblock::probe(&page, &name)?);
        drives.push(drive);
    }
    let sbs = match classify(&probes) {
        Found::Blank => format(&drives, block_size)?,
        Found::UnfinishedFormat => {
            tracing::warn!(
                "the drives hold a store whose format never finished (a crash while formatting); formatting them again"
            );
            format(&drives, block_size)?
        }
        Found::Store => {
            let sbs: Vec<Superblock> = probes
                .into_iter()
                .map(|p| match p {
                    Probe::Formatted(sb) => sb,
                    Probe::Blank => unreachable!("classify found no blank drives"),
                })
                .collect();
            check_formatted(&sbs, &drives, block_size)?;
            sbs
        }
        Found::Mixed { blank } => {
            return Err(StoreError::Corrupt(format!(
                "{blank} of {} drives are blank but the others hold a store; refusing to mix them",
                drives.len()
            )));
        }
    };
    let (mut journal, records) = Journal::replay(
        Arc::clone(&drives[0]),
        sbs[0].journal_offset,
        sbs[0].journal_half_len,
    )?;
    let totals: Vec<u64> = sbs.iter().map(|sb| sb.extents).collect();
    // Drives that fail while replay checks the last batch stay offline in the opened store.
    let health = DriveHealth::new(cfgs.len());
    let layout = Layout {
        drives: &drives,
        block_size,
        data_offset: sbs[0].data_offset,
    };
    let verify = |c: &CommitRecord| {
        let mut buf = vec![0; c.len as usize];
        layout
            .read_hashed(&c.extents, c.len, &mut buf)
            .inspect_err(|e| health.fail(e.drive, drives[e.drive].path(), &e.error))
            .is_ok_and(|sum| sum == c.checksum)
    };
    let sealed = journal.replayed_sealed();
    let live = rebuild(records, sealed, &totals, block_size, verify);
    let used: HashSet<u64> = live
        .iter()
        .flat_map(|c| c.extents.iter().copied())
        .collect();
    let extents = ExtentAllocator::new(totals, &used, discard);
    let index = Index::new();
    let mut value_bytes = 0;
    for c in live {
        value_bytes += c.len;
        let block = FileBlock {
            extents: extents.adopt(c.extents),
            len: c.len,
            checksum: c.checksum,
        };
        index.insert(Entry::new(&c.key, block));
    }
    // A fresh generation, so stale records past the replayed tail can never be mistaken for
    // new ones.
    let mut snapshot = Vec::new();
    index.for_each(|b| snapshot.push(commit_record(b)));
    journal.compact(snapshot)?;
    upgrade_superblocks(&drives, &sbs)?;
    tracing::info!(
        drives = drives.len(),
        values = index.len(),
        "file store opened"
    );
    Ok(FileBackend {
        drives,
        block_size,
        data_offset: sbs[0].data_offset,
        extents,
        index,
        journal: Mutex::new(journal),
        group: GroupCommit::default(),
        value_bytes: AtomicU64::new(value_bytes),
        failed: AtomicBool::new(false),
        health,
        store_id: sbs[0].store_id,
        discard_refused: cfgs.iter().map(|_| AtomicBool::new(false)).collect(),
    })
}

/// What the drives' superblocks say, taken together.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Every drive is blank: format them.
    Blank,
    /// Drive 0 is blank or still marked formatting, and every other drive is one or the other:
    /// a format was cut short and no value was ever stored, so format again.
    UnfinishedFormat,
    /// Every drive holds a superblock and drive 0's format finished.
    Store,
    /// Some drives are blank and the others hold a finished store.
    Mixed { blank: usize },
}

fn classify(probes: &[Probe]) -> Found {
    let blank = probes.iter().filter(|p| matches!(p, Probe::Blank)).count();
    // A format writes drive 0's marked superblock first (and syncs it) and the others after,
    // so an unfinished one has drive 0 marked and every other drive blank or marked by the same
    // format. The other drives keep the mark once a format finishes (only drive 0's is
    // cleared): a marked drive next to a blank drive 0 is another store's, not ours to format.
    let unfinished = match probes.first() {
        Some(Probe::Formatted(first)) if first.formatting() => probes.iter().all(|p| match p {
            Probe::Blank => true,
            Probe::Formatted(sb) => sb.formatting() && sb.store_id == first.store_id,
        }),
        _ => false,
    };
    if blank == probes.len() {
        Found::Blank
    } else if unfinished {
        Found::UnfinishedFormat
    } else if blank == 0 {
        Found::Store
    } else {
        Found::Mixed { blank }
    }
}

/// Applies replayed records in order. Commits of the final batch (whose sync a crash may have
/// cut short) count only if their data reads back intact; otherwise the key keeps its previous
/// value, whose extents were still reserved at the time. Entries whose extents are out of range,
/// repeated, or claimed by a later entry are dropped (only a damaged journal could produce them).
fn rebuild(
    records: Vec<(Record, u64)>,
    sealed: bool,
    totals: &[u64],
    block_size: u64,
    verify: impl Fn(&CommitRecord) -> bool,
) -> Vec<CommitRecord> {
    // Each extent in range, and named once: an entry naming one twice would hand it out twice
    // when freed.
    let in_range = |c: &CommitRecord| {
        c.extents.len() == c.len.div_ceil(block_size).max(1) as usize
            && c.extents.iter().all(|&e| {
                let (d, i) = split_extent(e);
                totals.get(d).is_some_and(|&n| u64::from(i) < n)
            })
            && c.extents.iter().collect::<HashSet<_>>().len() == c.extents.len()
    };
    // A sealed journal's final batch was synced before the seal: its bytes are what was
    // acknowledged, and any that fail their checksum now went bad later (a miss when read).
    let last_batch = records
        .last()
        .map(|(_, b)| *b)
        .filter(|&b| b != 0 && !sealed);
    let mut state: HashMap<Box<[u8]>, (usize, CommitRecord)> = HashMap::new();
    for (seq, (r, batch)) in records.into_iter().enumerate() {
        match r {
            Record::Commit(c) => {
                if !in_range(&c) || (Some(batch) == last_batch && !verify(&c)) {
                    tracing::warn!(key = ?String::from_utf8_lossy(&c.key), "unsynced or invalid journal entry skipped");
                    continue;
                }
                state.insert(c.key.clone(), (seq, c));
            }
            Record::Delete { key } => {
                state.remove(&key);
            }
        }
    }
    let mut entries: Vec<(usize, CommitRecord)> = state.into_values().collect();
    entries.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    let mut claimed = HashSet::new();
    let mut live = Vec::new();
    for (_, c) in entries {
        if c.extents.iter().any(|e| claimed.contains(e)) {
            tracing::warn!(key = ?String::from_utf8_lossy(&c.key), "journal entry shares extents with a newer one; dropped");
            continue;
        }
        claimed.extend(c.extents.iter().copied());
        live.push(c);
    }
    live
}

/// Where formatting drives of these lengths puts the data (the journal's halves come first),
/// or why one of them is too small for the metadata and one block.
fn layout(drives: &[(&Path, u64)], block_size: u64) -> Result<(u64, u64)> {
    let total_extents: u64 = drives.iter().map(|(_, len)| len / block_size).sum();
    let snapshot_max = total_extents * (SNAPSHOT_BYTES_PER_ENTRY + 8);
    let half_len =
        (2 * snapshot_max + 2 * BATCH_BYTES + MAX_BODY as u64 + 4 * PAGE).next_multiple_of(PAGE);
    let data_offset = (SUPERBLOCK_LEN as u64 + 2 * half_len).next_multiple_of(DATA_ALIGN);
    for (i, (path, len)) in drives.iter().enumerate() {
        if len.saturating_sub(data_offset) / block_size == 0 {
            return Err(StoreError::BadRequest(format!(
                "storage.drives[{i}] ({}) is {len} bytes; it needs at least {} (metadata + one block)",
                path.display(),
                data_offset + block_size
            )));
        }
    }
    Ok((half_len, data_offset))
}

/// Checks, writing nothing, that drives of these lengths can be formatted as one store with
/// extents of `block_size`: the refusals formatting would give, for a caller that must decide
/// before it overwrites anything (`memkv setup --force`).
pub fn check_format(drives: &[(PathBuf, u64)], block_size: u64) -> Result<()> {
    crate::config::check_block_size("storage.block_size", block_size)?;
    let drives: Vec<(&Path, u64)> = drives.iter().map(|(p, len)| (p.as_path(), *len)).collect();
    layout(&drives, block_size).map(drop)
}

fn format(drives: &[Arc<dyn ExtentIo>], block_size: u64) -> Result<Vec<Superblock>> {
    let sized: Vec<(&Path, u64)> = drives.iter().map(|d| (d.path(), d.len())).collect();
    let (half_len, data_offset) = layout(&sized, block_size)?;
    let journal_offset = SUPERBLOCK_LEN as u64;
    let seed = format!(
        "{:?}{}{}",
        std::time::SystemTime::now(),
        std::process::id(),
        drives[0].path().display()
    );
    let store_id = xxhash_rust::xxh3::xxh3_128(seed.as_bytes());
    let mut sbs = Vec::new();
    for (i, d) in drives.iter().enumerate() {
        let extents = d.len().saturating_sub(data_offset) / block_size;
        let sb = Superblock {
            version: FORMAT_VERSION,
            flags: FLAG_FORMATTING,
            store_id,
            drive_index: i as u32,
            drive_count: drives.len() as u32,
            block_size,
            drive_size: d.len(),
            data_offset,
            extents,
            journal_offset,
            journal_half_len: half_len,
        };
        sbs.push(sb);
    }
    Journal::format(Arc::clone(&drives[0]), journal_offset, half_len)?;
    // Superblocks last, each marked as formatting; then drive 0's without the mark, which
    // finishes the format. A crash before that leaves drives that are blank or marked, which
    // the next open formats again (`classify`); no drive ever pairs with a finished drive 0
    // while still blank.
    for (d, sb) in drives.iter().zip(&sbs) {
        d.write_at(0, &sb.encode())?;
        d.sync()?;
    }
    for sb in &mut sbs {
        sb.flags &= !FLAG_FORMATTING;
    }
    drives[0].write_at(0, &sbs[0].encode())?;
    drives[0].sync()?;
    Ok(sbs)
}

/// Marks an older store's drives with this build's format, drive 0 (the journal's) first, before
/// anything is appended in the new format: from then on, builds that cannot read it refuse the
/// drives by version instead of misreading the journal. Only the version changes.
fn upgrade_superblocks(drives: &[Arc<dyn ExtentIo>], sbs: &[Superblock]) -> Result<()> {
    for (d, sb) in drives.iter().zip(sbs) {
        if sb.version < FORMAT_VERSION {
            let upgraded = Superblock {
                version: FORMAT_VERSION,
                ..*sb
            };
            d.write_at(0, &upgraded.encode())?;
            d.sync()?;
            tracing::info!(
                drive = %d.path().display(),
                from = sb.version,
                to = FORMAT_VERSION,
                "drive format upgraded"
            );
        }
    }
    Ok(())
}

fn check_formatted(
    sbs: &[Superblock],
    drives: &[Arc<dyn ExtentIo>],
    block_size: u64,
) -> Result<()> {
    let first = &sbs[0];
    for (i, (sb, d)) in sbs.iter().zip(drives).enumerate() {
        let name = format!("storage.drives[{i}] ({})", d.path().display());
        if sb.store_id != first.store_id {
            return Err(StoreError::Corrupt(format!(
                "{name} belongs to a different store than storage.drives[0]"
            )));
        }
        if sb.drive_count as usize != drives.len() {
            return Err(StoreError::BadRequest(format!(
                "storage.drives lists {} drives but the store was created with {}",
                drives.len(),
                sb.drive_count
            )));
        }
        if sb.drive_index as usize != i {
            return Err(StoreError::BadRequest(format!(
                "{name} is drive {} of the store; keep the original drive order",
                sb.drive_index
            )));
        }
        if sb.block_size != block_size {
            return Err(StoreError::BadRequest(format!(
                "storage.block_size is {block_size} but the store was formatted with {}",
                sb.block_size
            )));
        }
        // Checked arithmetic: the superblock passed its checksum, but its fields are the
        // drive's word, and every extent and journal offset is derived from them.
        let end = sb
            .extents
            .checked_mul(sb.block_size)
            .and_then(|bytes| bytes.checked_add(sb.data_offset));
        if end.is_none_or(|end| end > d.len()) {
            return Err(StoreError::Corrupt(format!(
                "{name} is {} bytes, smaller than its recorded geometry ({} extents of {} bytes from byte {})",
                d.len(),
                sb.extents,
                sb.block_size,
                sb.data_offset
            )));
        }
        if sb.data_offset != first.data_offset {
            return Err(StoreError::Corrupt(format!(
                "{name} records its data at byte {}, storage.drives[0] at byte {}",
                sb.data_offset, first.data_offset
            )));
        }
    }
    // The journal's two halves lie between drive 0's superblock and its data.
    let journal_end = first
        .journal_half_len
        .checked_mul(2)
        .and_then(|halves| halves.checked_add(first.journal_offset));
    if first.journal_offset < SUPERBLOCK_LEN as u64
        || first.journal_half_len == 0
        || journal_end.is_none_or(|end| end > first.data_offset)
    {
        return Err(StoreError::Corrupt(format!(
            "storage.drives[0] ({}) records a journal of two {} byte halves at byte {} that does \
             not fit between its superblock and its data (byte {})",
            drives[0].path().display(),
            first.journal_half_len,
            first.journal_offset,
            first.data_offset
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(key: &str, extent: u64, checksum: u64) -> Record {
        Record::Commit(CommitRecord {
            key: key.as_bytes().into(),
            len: 10,
            checksum,
            extents: vec![extent],
        })
    }

    #[test]
    fn unsynced_final_batch_falls_back_to_previous_values() {
        let records = vec![
            (commit("a", 0, 1), 1),
            (commit("b", 1, 1), 1),
            (commit("a", 2, 2), 2),
            (commit("c", 3, 2), 2),
            (
                Record::Delete {
                    key: b"b".as_slice().into(),
                },
                2,
            ),
        ];
        // The final batch's data did not reach the disk (checksum 2 fails to verify).
        let live = rebuild(records.clone(), false, &[8], 1 << 20, |c| c.checksum != 2);
        let mut got: Vec<(String, u64)> = live
            .iter()
            .map(|c| (String::from_utf8_lossy(&c.key).into_owned(), c.extents[0]))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![("a".into(), 0)],
            "a keeps v1, c never existed, b's delete stands"
        );
        // A sealed journal's final batch is taken as it is: its values stay indexed (a value
        // whose bytes went bad reads as a checksum failure, never as the older value).
        let live = rebuild(records.clone(), true, &[8], 1 << 20, |c| c.checksum != 2);
        assert_eq!(live.len(), 2, "a is v2 and c exists");
        assert!(live.iter().all(|c| c.checksum == 2));
        // Earlier batches are never re-verified.
        let live = rebuild(records, false, &[8], 1 << 20, |c| c.checksum != 1);
        assert_eq!(live.len(), 2);
    }

    fn formatted(flags: u32) -> Probe {
        Probe::Formatted(Superblock {
            version: FORMAT_VERSION,
            flags,
            store_id: 1,
            drive_index: 0,
            drive_count: 2,
            block_size: 1 << 20,
            drive_size: 1 << 30,
            data_offset: 1 << 20,
            extents: 8,
            journal_offset: 4096,
            journal_half_len: 4096,
        })
    }

    #[test]
    fn a_format_cut_short_is_formatted_again_and_a_real_mix_refused() {
        use Probe::Blank;
        let (marked, done) = (|| formatted(FLAG_FORMATTING), || formatted(0));
        assert_eq!(classify(&[Blank, Blank]), Found::Blank);
        // Cut between the superblocks (drive 0's is written and synced first) or before drive
        // 0's finishing write.
        assert_eq!(classify(&[marked(), Blank]), Found::UnfinishedFormat);
        assert_eq!(classify(&[marked(), marked()]), Found::UnfinishedFormat);
        // A marked drive beside a blank drive 0 is another store's (drives 1 and up keep the
        // mark after a format finishes): refused, never formatted over. So is one of another
        // store beside an unfinished drive 0.
        assert_eq!(classify(&[Blank, marked()]), Found::Mixed { blank: 1 });
        let mut other = formatted(FLAG_FORMATTING);
        if let Probe::Formatted(sb) = &mut other {
            sb.store_id = 2;
        }
        assert_eq!(classify(&[marked(), other]), Found::Store);
        // Finished: drive 0 unmarked (the others keep their mark).
        assert_eq!(classify(&[done(), marked()]), Found::Store);
        assert_eq!(classify(&[done(), done()]), Found::Store);
        // A blank drive beside a finished store, or a finished drive beside a blank drive 0.
        assert_eq!(classify(&[done(), Blank]), Found::Mixed { blank: 1 });
        assert_eq!(classify(&[Blank, done()]), Found::Mixed { blank: 1 });
    }

    #[test]
    fn out_of_range_and_shared_extents_are_dropped() {
        let records = vec![
            (commit("a", 0, 1), 1),
            (commit("b", 0, 1), 2),
            (commit("c", 99, 1), 3),
            (commit("d", 5, 1), 0),
        ];
        let live = rebuild(records, false, &[8], 1 << 20, |_| true);
        let mut keys: Vec<&[u8]> = live.iter().map(|c| &*c.key).collect();
        keys.sort();
        assert_eq!(keys, vec![b"b".as_slice(), b"d".as_slice()]);
    }
}
