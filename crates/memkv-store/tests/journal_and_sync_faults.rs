//! Drives that fail or lie: a data drive whose sync fails (as Linux's page cache fails it: the
//! dirty pages are dropped), and intact-looking metadata a damaged or hostile drive can hold
//! (a superblock with impossible geometry, a journal record naming an extent twice). The
//! simulated drives here are test doubles.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::fault_drive::sim_drives;
use memkv_store::{DriveConfig, DriveIo, Store, StoreConfig, StoreMode};

const BLOCK: u64 = 64 << 10;
/// Superblock and journal (2 MiB), then 24 extents.
const DRIVE_BYTES: usize = (2 << 20) + 24 * BLOCK as usize;

fn config(drives: usize) -> StoreConfig {
    let mut config = StoreConfig::direct(
        (0..drives)
            .map(|i| DriveConfig {
                path: format!("sim-drive-{i}").into(),
                size: None,
            })
            .collect(),
    );
    if let StoreMode::Direct { block_size, .. } = &mut config.mode {
        *block_size = BLOCK;
    }
    config
}

fn open_on(drives: &[Arc<dyn DriveIo>]) -> memkv_store::Result<Store> {
    Store::open_on_drives(config(drives.len()), drives.to_vec())
}

fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = common::rng::Rng(seed);
    (0..len.div_ceil(8))
        .flat_map(|_| rng.next().to_le_bytes())
        .take(len)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A failed sync of a data drive (commit.rs, run_batch).

/// A drive with a page cache as Linux keeps one: a write lands in the cache; a sync writes
/// the dirty pages back. When the writeback fails, the sync returns EIO and the pages are
/// marked clean all the same (the kernel does not keep failed pages dirty), so a later sync
/// succeeds without ever writing them: what a power loss then leaves lacks them. This is what
/// `fdatasync` does on ext4/xfs (FileDrive::sync) and, at the device level, what a failed
/// FLUSH means for writes sitting in a volatile cache (DirectDrive::sync).
struct PageCacheDrive {
    name: PathBuf,
    state: Mutex<Pages>,
    fail_next_sync: AtomicBool,
}

struct Pages {
    /// What readers see (the page cache over the medium).
    cached: Vec<u8>,
    /// What the medium holds: what survives a power loss.
    durable: Vec<u8>,
    /// Writes not yet written back, in order.
    dirty: Vec<(u64, Vec<u8>)>,
}

impl PageCacheDrive {
    fn new(name: &str, bytes: usize) -> Arc<Self> {
        Arc::new(PageCacheDrive {
            name: name.into(),
            state: Mutex::new(Pages {
                cached: vec![0; bytes],
                durable: vec![0; bytes],
                dirty: Vec::new(),
            }),
            fail_next_sync: AtomicBool::new(false),
        })
    }

    /// What survives a power loss now: only what a successful sync wrote back.
    fn durable(&self) -> Vec<u8> {
        self.state.lock().unwrap().durable.clone()
    }

    fn find(&self, needle: &[u8]) -> bool {
        let s = self.state.lock().unwrap();
        s.cached[2 << 20..]
            .windows(needle.len())
            .any(|w| w == needle)
    }
}

impl DriveIo for PageCacheDrive {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let s = self.state.lock().unwrap();
        let at = offset as usize;
        if at + buf.len() > s.cached.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        buf.copy_from_slice(&s.cached[at..at + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock().unwrap();
        let at = offset as usize;
        if at + buf.len() > s.cached.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        s.cached[at..at + buf.len()].copy_from_slice(buf);
        s.dirty.push((offset, buf.to_vec()));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock().unwrap();
        let dirty = std::mem::take(&mut s.dirty);
        if self.fail_next_sync.swap(false, Ordering::SeqCst) {
            // Writeback failed; the pages are clean now and will not be written again.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        for (at, bytes) in dirty {
            let at = at as usize;
            s.durable[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.state.lock().unwrap().cached.len() as u64
    }

    fn path(&self) -> &Path {
        &self.name
    }
}

/// A value whose bytes were written to a data drive before that drive's sync failed (for
/// another value's batch) must not be acknowledged by a later batch whose sync of the drive
/// succeeds: the failed writeback dropped its bytes. The drive goes out of service at the
/// failed sync, the later commit is refused, and acknowledged values survive a power loss.
#[test]
fn a_commit_acknowledged_after_its_drive_failed_a_sync_survives_a_power_loss() {
    let d0 = PageCacheDrive::new("sim-drive-0", DRIVE_BYTES);
    let d1 = PageCacheDrive::new("sim-drive-1", DRIVE_BYTES);
    let drives: Vec<Arc<dyn DriveIo>> = vec![d0.clone(), d1.clone()];
    let store = open_on(&drives).unwrap();
    let len = 30_000;
    // Extents go round robin from drive 0: "pad" on drive 0, "b" on drive 1.
    store.put(b"pad", &value(1, len)).unwrap();
    let vb = value(2, len);
    let mut r = store.allocate(b"b", len as u64).unwrap();
    r.write_at(0, &vb).unwrap();
    assert!(d1.find(&vb[..64]), "b's bytes are on drive 1");
    // Another put on drive 1: its batch's sync of drive 1 fails (and with it the writeback
    // of b's bytes, written before it). That put fails, alone, as designed.
    d1.fail_next_sync.store(true, Ordering::SeqCst);
    let mut failed = 0;
    for i in 0..2 {
        if store
            .put(format!("a{i}").as_bytes(), &value(10 + i, len))
            .is_err()
        {
            failed += 1;
        }
    }
    assert_eq!(failed, 1, "the put whose batch met the failed sync fails");
    // Drive 1 went out of service at its failed sync: b, committed now, is refused (a sync
    // of the drive would succeed, with b's bytes dropped from the cache unwritten).
    assert!(!store.stats().per_device[1].online);
    let committed = store.commit(r, memkv_store::checksum(&vb));
    assert!(committed.is_err(), "b is refused, not acknowledged");
    assert!(store.get(b"b").unwrap().is_none());
    // New values go to drive 0 and are acknowledged.
    store.put(b"c", &value(3, len)).unwrap();
    // Power loss: what the drives hold durably.
    drop(store);
    let (_, drives) = sim_drives(vec![d0.durable(), d1.durable()]);
    let store = open_on(&drives).unwrap();
    assert!(*store.get(b"c").unwrap().unwrap() == value(3, len)[..]);
    assert!(*store.get(b"pad").unwrap().unwrap() == value(1, len)[..]);
}

// ---------------------------------------------------------------------------------------------
// Damaged or hostile superblocks (superblock.rs, open.rs).

/// Superblock field offsets (superblock.rs's layout).
const SB_EXTENTS: usize = 64;
const SB_DATA_OFFSET: usize = 56;
const SB_JOURNAL_HALF: usize = 80;
const SB_SUM: usize = 88;

/// Images of a freshly formatted two-drive store holding one value, cleanly closed.
fn formatted_images() -> Vec<Vec<u8>> {
    let (drives, io) = sim_drives(vec![vec![0; DRIVE_BYTES]; 2]);
    let store = open_on(&io).unwrap();
    store.put(b"k", &value(5, 1000)).unwrap();
    store.close().unwrap();
    drop(store);
    drives.iter().map(|d| d.current_image()).collect()
}

/// Rewrites one u64 field of a superblock, checksum included (a hostile or buggy writer's
/// superblock: intact, but its geometry makes no sense).
fn set_sb_field(image: &mut [u8], at: usize, v: u64) {
    image[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&image[..SB_SUM]);
    image[SB_SUM..SB_SUM + 8].copy_from_slice(&sum.to_le_bytes());
}

/// Opening drives whose superblock checksums but holds impossible geometry must be refused
/// with an error naming it, never a panic (arithmetic overflow on unchecked fields).
#[test]
fn an_intact_superblock_with_impossible_geometry_is_refused_not_a_panic() {
    let base = formatted_images();
    let cases: [(&str, usize, usize, u64); 3] = [
        ("drive 1 extents", 1, SB_EXTENTS, u64::MAX / BLOCK + 2),
        ("drive 0 data_offset", 0, SB_DATA_OFFSET, u64::MAX - 4096),
        (
            "drive 0 journal_half_len",
            0,
            SB_JOURNAL_HALF,
            u64::MAX - 100,
        ),
    ];
    let mut panicked = Vec::new();
    for (what, drive, field, v) in cases {
        let mut images = base.clone();
        set_sb_field(&mut images[drive], field, v);
        let (_, drives) = sim_drives(images);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open_on(&drives).map(|_| ())
        }));
        match opened {
            Ok(Err(_)) => {}
            Ok(Ok(())) => panicked.push(format!("{what} = {v}: opened")),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panicked.push(format!("{what} = {v}: panicked: {msg}"));
            }
        }
    }
    assert!(panicked.is_empty(), "{panicked:#?}");
}

// ---------------------------------------------------------------------------------------------
// A journal record naming one extent twice (open.rs, rebuild).

/// rebuild drops entries whose extents a newer entry claims, but not an entry that names the
/// same extent twice itself (an intact record from a buggy or hostile writer). The extent is
/// then adopted twice, freed twice when the value goes, and handed to two new values: an
/// acknowledged put's bytes are overwritten by another's.
#[test]
fn a_record_naming_one_extent_twice_never_gives_that_extent_to_two_values() {
    let (drives, io) = sim_drives(vec![vec![0; DRIVE_BYTES]; 2]);
    let store = open_on(&io).unwrap();
    let key = b"dup-extent-key";
    // Two extents, one per drive.
    store.put(key, &value(7, BLOCK as usize + 1000)).unwrap();
    store.close().unwrap();
    drop(store);
    let mut images: Vec<Vec<u8>> = drives.iter().map(|d| d.current_image()).collect();
    // Rewrite each copy of the key's commit record so that its second extent is its first,
    // checksum included.
    let j = &mut images[0];
    let mut patched = 0;
    let mut at = 4096;
    while let Some(p) = j[at..2 << 20].windows(key.len()).position(|w| w == key) {
        let pos = at + p;
        at = pos + 1;
        let start = pos - 42;
        if u16::from_le_bytes([j[pos - 2], j[pos - 1]]) as usize != key.len() || j[start + 12] != 1
        {
            continue;
        }
        let body_len = u32::from_le_bytes(j[start + 8..start + 12].try_into().unwrap()) as usize;
        let ext = pos + key.len() + 20;
        assert_eq!(body_len, 2 + key.len() + 20 + 16);
        let first: [u8; 8] = j[ext..ext + 8].try_into().unwrap();
        j[ext + 8..ext + 16].copy_from_slice(&first);
        let sum = xxhash_rust::xxh3::xxh3_64(&j[start + 8..start + 40 + body_len]);
        j[start..start + 8].copy_from_slice(&sum.to_le_bytes());
        patched += 1;
    }
    assert!(patched >= 1, "the key's record was found in the journal");
    let (_drives, io) = sim_drives(images);
    let mut cfg = config(2);
    cfg.eviction = memkv_store::EvictionPolicy::None;
    let store = Store::open_on_drives(cfg, io).unwrap();
    // Reading the value finds it corrupt (its first block read twice) and drops it, which
    // frees its extents: the doubled one twice.
    assert!(store.get(key).unwrap().is_none());
    // Fill the store, one extent a value: every free extent is handed out, the doubled one
    // twice.
    let values: Vec<Vec<u8>> = (0..60).map(|i| value(100 + i, 1000)).collect();
    let stored: Vec<usize> = (0..values.len())
        .filter(|&i| store.put(format!("v{i}").as_bytes(), &values[i]).is_ok())
        .collect();
    assert!(stored.len() >= 40, "{stored:?}");
    let lost: Vec<usize> = stored
        .iter()
        .copied()
        .filter(|&i| {
            store
                .get(format!("v{i}").as_bytes())
                .unwrap()
                .is_none_or(|got| *got != values[i][..])
        })
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged puts {lost:?} lost: two values were given the same extent"
    );
}
