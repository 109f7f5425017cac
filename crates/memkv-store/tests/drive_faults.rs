//! A drive that starts failing I/O goes offline on its own once it reaches
//! `DRIVE_ERROR_LIMIT` errors: its values read as misses (counted per drive), new values go to
//! the other drives, and the store keeps serving. Below the limit an error is a bad sector:
//! the value on it is counted and dropped, or the put writing it fails, and the drive stays in
//! service.
//!
//! The whole-drive failure is made for real: the drive file is truncated under the running
//! store (a test double for a drive that vanished), so its reads come back short. Bad sectors
//! come from the simulated drive of tests/common/fault_drive.rs, failing chosen byte ranges.
//! Writes that fail for real on a direct-mode drive come from its file made immutable under
//! the running store.

mod common;

use std::sync::Arc;

use common::fault_drive::{Failing, FaultDrive, sim_drives};
use common::rng::Rng;
use common::{TempDir, direct_config, file_config};
use memkv_store::{
    DRIVE_ERROR_LIMIT, DriveConfig, FileReads, Store, StoreConfig, StoreMode, StoreStats,
};

fn run(config: StoreConfig, second_drive: std::path::PathBuf) {
    let store = Store::open(config).unwrap();
    // One extent each, so every value lives on one drive.
    let value = |i: usize| vec![i as u8; 200_000];
    // Striped round robin: 12 values on drive 1, more than its error limit.
    for i in 0..24 {
        store.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    let before = store.stats();
    assert!(
        before.per_device.iter().all(|d| d.online && d.used > 0),
        "{before:?}"
    );
    vanish(&second_drive);
    let mut found = 0;
    let mut missed = 0;
    for i in 0..24 {
        match store.get(format!("k{i}").as_bytes()).unwrap() {
            Some(v) => {
                assert!(*v == value(i)[..], "k{i}: wrong bytes served");
                found += 1;
            }
            None => missed += 1,
        }
    }
    let stats = store.stats();
    assert_misses_of_a_vanished_second_drive(&stats, found, missed);
    assert!(stats.per_device[0].online, "{stats:?}");
    assert!(!stats.per_device[1].online, "{stats:?}");
    // New values land on the drive that still works, and read back.
    for i in 100..110 {
        store.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
        assert!(*store.get(format!("k{i}").as_bytes()).unwrap().unwrap() == value(i)[..]);
    }
}

#[test]
fn a_failing_drive_goes_offline_in_direct_mode() {
    let dir = TempDir::on_disk("faults-direct");
    let config = direct_config(&dir, 2, 32 << 20, 256 << 10);
    run(config, dir.path().join("drive1"));
}

#[test]
fn a_failing_drive_goes_offline_in_file_mode() {
    let dir = TempDir::new("faults-file");
    let mut config = file_config(&dir, 2, 32 << 20, 256 << 10);
    config.file_reads = FileReads::Pread;
    run(config, dir.path().join("drive1"));
}

const BLOCK: u64 = 64 << 10;
/// Superblock and journal (2 MiB), then 24 extents.
const SIM_DRIVE_BYTES: usize = (2 << 20) + 24 * BLOCK as usize;

/// A direct-mode store on two simulated drives holding `images` (blank ones are formatted).
fn open_simulated(images: Vec<Vec<u8>>) -> (Store, Vec<Arc<FaultDrive>>) {
    let (drives, io) = sim_drives(images);
    let mut config = StoreConfig::direct(
        (0..drives.len())
            .map(|i| DriveConfig {
                path: format!("sim-drive-{i}").into(),
                size: None,
            })
            .collect(),
    );
    if let StoreMode::Direct { block_size, .. } = &mut config.mode {
        *block_size = BLOCK;
    }
    (Store::open_on_drives(config, io).unwrap(), drives)
}

/// 30 000 bytes no other value shares a 64-byte run with.
fn sim_value(i: usize) -> Vec<u8> {
    let mut rng = Rng(i as u64 + 1);
    (0..30_000 / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect()
}

/// Where `value` starts on a drive, past the metadata.
fn find(drive: &FaultDrive, value: &[u8]) -> Option<u64> {
    let image = drive.current_image();
    image[2 << 20..]
        .windows(64)
        .position(|w| w == &value[..64])
        .map(|p| (p + (2 << 20)) as u64)
}

/// A data drive (not the journal's) that dies fails its writes and its syncs alike. Its puts
/// fail, it goes offline at its error limit, and the store keeps storing on the other drive:
/// a failed sync of a data drive fails that drive's commits alone, where it used to count as
/// a failed journal write and turn the whole store read-only.
#[test]
fn a_dying_data_drive_fails_its_own_puts_not_the_whole_store() {
    let (store, drives) = open_simulated(vec![vec![0; SIM_DRIVE_BYTES]; 2]);
    store.put(b"before", &sim_value(0)).unwrap();
    drives[1].fail_range(2 << 20..SIM_DRIVE_BYTES as u64, Failing::Writes);
    drives[1].fail_syncs();
    let outcomes: Vec<_> = (0..2 * DRIVE_ERROR_LIMIT as usize + 6)
        .map(|i| store.put(format!("k{i}").as_bytes(), &sim_value(i + 1)))
        .collect();
    let stats = store.stats();
    let stored = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(
        stored > DRIVE_ERROR_LIMIT as usize,
        "the puts on drive 0 are stored; outcomes: {outcomes:?}\nstats: {stats:?}"
    );
    assert!(
        !stats.per_device[1].online && stats.per_device[0].online,
        "{stats:?}"
    );
    // New puts keep working, on the drive still in service.
    store.put(b"after", &sim_value(99)).unwrap();
    // Every stored value reads back and the refused ones are absent, before and after a
    // restart (their journaled commits were superseded).
    let stored: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
    let check = |store: &Store| {
        for (i, &ok) in stored.iter().enumerate() {
            let got = store.get(format!("k{i}").as_bytes()).unwrap();
            match ok {
                true => assert!(*got.expect("stored") == sim_value(i + 1)[..], "k{i}"),
                false => assert!(got.is_none(), "k{i} was refused but is served"),
            }
        }
        assert!(*store.get(b"after").unwrap().unwrap() == sim_value(99)[..]);
    };
    check_across_restart(store, &drives, check);
}

#[test]
fn a_bad_sector_drops_its_value_and_the_drive_keeps_serving() {
    let (store, drives) = open_simulated(vec![vec![0; SIM_DRIVE_BYTES]; 2]);
    for i in 0..8 {
        store
            .put(format!("k{i}").as_bytes(), &sim_value(i))
            .unwrap();
    }
    let victim = sim_value(3);
    let (d, at) = drives
        .iter()
        .enumerate()
        .find_map(|(d, drive)| find(drive, &victim).map(|at| (d, at)))
        .expect("k3 is on a drive");
    // One unreadable sector in the middle of k3.
    drives[d].fail_range(at + 8192..at + 8193, Failing::Reads);
    assert!(
        store.get(b"k3").unwrap().is_none(),
        "an unreadable value is a miss"
    );
    let stats = store.stats();
    assert_eq!(stats.per_device[d].read_errors, 1, "{stats:?}");
    assert!(
        stats.per_device.iter().all(|s| s.online),
        "one bad sector is not a dead drive: {stats:?}"
    );
    assert_eq!(
        stats.blocks, 7,
        "the unreadable value is dropped: {stats:?}"
    );
    assert_eq!(
        stats.checksum_failures, 0,
        "an unreadable value is not a corrupt one"
    );
    for i in (0..8).filter(|&i| i != 3) {
        assert!(*store.get(format!("k{i}").as_bytes()).unwrap().unwrap() == sim_value(i)[..]);
    }
    // The drop was journaled: after a restart (the sector readable again, say, after a
    // remap) the value stays gone rather than coming back from a stale record.
    store.close().unwrap();
    let images = drives.iter().map(|d| d.current_image()).collect();
    drop(store);
    let (store, _) = open_simulated(images);
    assert!(store.get(b"k3").unwrap().is_none());
    assert_eq!(store.stats().blocks, 7);
}

#[test]
fn failing_writes_fail_their_puts_until_the_drive_goes_offline() {
    let (store, drives) = open_simulated(vec![vec![0; SIM_DRIVE_BYTES]; 2]);
    // Every data extent of drive 1 refuses writes.
    drives[1].fail_range(2 << 20..SIM_DRIVE_BYTES as u64, Failing::Writes);
    let mut failed = 0;
    let mut stored = Vec::new();
    for i in 0..(2 * DRIVE_ERROR_LIMIT as usize + 6) {
        match store.put(format!("k{i}").as_bytes(), &sim_value(i)) {
            Ok(()) => stored.push(i),
            Err(e) => {
                assert!(
                    e.to_string().contains("storage.drives[1]"),
                    "the error names the drive: {e}"
                );
                failed += 1;
            }
        }
    }
    let stats = store.stats();
    assert_eq!(failed, DRIVE_ERROR_LIMIT, "{stats:?}");
    assert_eq!(
        stats.per_device[1].write_errors, DRIVE_ERROR_LIMIT,
        "{stats:?}"
    );
    assert!(
        !stats.per_device[1].online && stats.per_device[0].online,
        "{stats:?}"
    );
    // Once drive 1 is out, every put lands on drive 0 and every stored value reads back.
    assert!(stored.len() > DRIVE_ERROR_LIMIT as usize, "{stored:?}");
    for i in stored {
        assert!(*store.get(format!("k{i}").as_bytes()).unwrap().unwrap() == sim_value(i)[..]);
    }
    assert!(drives[1].failed_requests() >= DRIVE_ERROR_LIMIT);
}

/// A put's commit record is journaled while its bytes are still being written; when the bytes
/// then fail to land, the same batch must restore the key's previous state, in the index and
/// in what a restart replays.
#[test]
fn a_put_whose_bytes_fail_leaves_the_key_as_it_was_across_a_restart() {
    let (store, drives) = open_simulated(vec![vec![0; SIM_DRIVE_BYTES]; 2]);
    store.put(b"kept", &sim_value(100)).unwrap();
    drives[1].fail_range(2 << 20..SIM_DRIVE_BYTES as u64, Failing::Writes);
    let mut expected = sim_value(100);
    let mut failed = Vec::new();
    for i in 0..6 {
        let value = sim_value(200 + i);
        match store.put(b"kept", &value) {
            Ok(()) => expected = value,
            Err(_) => failed.push(i),
        }
        let fresh = format!("fresh{i}");
        if store.put(fresh.as_bytes(), &sim_value(300 + i)).is_err() {
            failed.push(100 + i);
        }
    }
    assert!(
        !failed.is_empty(),
        "some writes landed on the failing drive"
    );
    let check = |store: &Store| {
        assert!(*store.get(b"kept").unwrap().unwrap() == expected[..]);
        for i in 0..6 {
            let got = store.get(format!("fresh{i}").as_bytes()).unwrap();
            assert_eq!(got.is_some(), !failed.contains(&(100 + i)), "fresh{i}");
        }
    };
    check_across_restart(store, &drives, check);
}

/// A batch's values are written at once under one group commit: each item gets its own
/// outcome, the ones that landed are served (and replayed after a restart), the others are not.
#[test]
fn a_batch_put_reports_each_value_and_keeps_the_ones_that_landed() {
    let (store, drives) = open_simulated(vec![vec![0; SIM_DRIVE_BYTES]; 2]);
    let values: Vec<Vec<u8>> = (0..10).map(|i| sim_value(400 + i)).collect();
    let keys: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| (k.as_bytes(), &v[..]))
        .collect();
    assert!(store.put_batch(&items[..5]).iter().all(Result::is_ok));
    drives[1].fail_range(2 << 20..SIM_DRIVE_BYTES as u64, Failing::Writes);
    let outcomes = store.put_batch(&items[5..]);
    let landed: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
    assert!(
        landed.contains(&true) && landed.contains(&false),
        "{outcomes:?}"
    );
    let check = |store: &Store| {
        for (i, (k, v)) in keys.iter().zip(&values).enumerate() {
            let got = store.get(k.as_bytes()).unwrap();
            if i < 5 || landed[i - 5] {
                assert!(*got.expect(k) == v[..], "{k}");
            } else {
                assert!(got.is_none(), "{k} failed, so it is not served");
            }
        }
    };
    check_across_restart(store, &drives, check);
}

/// Runs `check` on `store`, then again on a store reopened from its drives' images after a
/// clean close (what replay rebuilds).
fn check_across_restart(store: Store, drives: &[Arc<FaultDrive>], check: impl Fn(&Store)) {
    check(&store);
    store.close().unwrap();
    let images = drives.iter().map(|d| d.current_image()).collect();
    drop(store);
    let (store, _) = open_simulated(images);
    check(&store);
}

/// A put filled in place whose write fails on the drive is answered with the error, and the
/// store goes on: its group commit is not left waiting for bytes that will never land. The
/// failure is real: the second drive file is made immutable (`chattr +i`) while the store holds
/// it open, so the kernel refuses its O_DIRECT writes with EPERM (the first drive, which holds
/// the journal, keeps working). Needs root and a filesystem with the immutable flag; elsewhere
/// the test says it was skipped.
#[test]
fn a_failed_write_of_a_put_in_place_fails_that_put_alone() {
    let dir = TempDir::on_disk("in-place-write-fails");
    let config = direct_config(&dir, 2, 32 << 20, 1 << 20);
    let second = dir.path().join("drive1");
    let store = Arc::new(Store::open(config).unwrap());
    store.put(b"before", b"kept").unwrap();
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(&second)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("skipped: chattr +i is not available here (needs root and ext4 or the like)");
        return;
    }
    let value = vec![7u8; 300_000];
    // Extents go to the drives in turn: of two puts, one lands on the immutable drive.
    let outcomes: Vec<Option<memkv_store::Result<()>>> = [b"first", b"other"]
        .into_iter()
        .map(|key| put_in_place_within(&store, key, &value, std::time::Duration::from_secs(20)))
        .collect();
    assert!(chattr("-i"), "chattr -i failed: remove the flag by hand");
    let outcomes: Vec<memkv_store::Result<()>> = outcomes
        .into_iter()
        .map(|o| o.expect("a put whose write failed never returned"))
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| o.is_err()).count(),
        1,
        "{outcomes:?}"
    );
    for (key, outcome) in [b"first", b"other"].iter().zip(&outcomes) {
        let got = store.get(*key).unwrap();
        match outcome {
            Ok(()) => assert!(*got.unwrap() == value[..]),
            Err(_) => assert!(got.is_none(), "a refused put is not served"),
        }
    }
    assert!(*store.get(b"before").unwrap().unwrap() == b"kept"[..]);
    // The store still takes puts on both drives.
    for i in 0..4 {
        let key = format!("after{i}");
        store.put(key.as_bytes(), &value).unwrap();
        assert!(*store.get(key.as_bytes()).unwrap().unwrap() == value[..]);
    }
}

/// Puts `value` under `key` through the in-place path on a thread; `None` when it has not
/// returned within `limit` (a hang).
fn put_in_place_within(
    store: &Arc<Store>,
    key: &[u8],
    value: &[u8],
    limit: std::time::Duration,
) -> Option<memkv_store::Result<()>> {
    let (store, key, value) = (Arc::clone(store), key.to_vec(), value.to_vec());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let checksum = xxhash_rust::xxh3::xxh3_64(&value);
        let mut fill = store
            .put_in_place(&key, value.len() as u64)
            .unwrap()
            .expect("a fresh store has room and buffers");
        let mut at = 0;
        while let Some(piece) = fill.next_piece() {
            let n = piece.len();
            piece.copy_from_slice(&value[at..at + n]);
            at += n;
            fill.piece_filled();
        }
        let _ = tx.send(fill.commit(checksum));
    });
    rx.recv_timeout(limit).ok()
}

/// Gets read into the drive's own buffers (`Store::get_parts`, the path a direct-mode server
/// sends from) treat a drive that vanished as the usual read does: its values are misses
/// counted as read errors, never corruption and never wrong bytes, and the other drive's
/// values are served.
#[test]
fn gets_into_the_drives_buffers_miss_the_values_of_a_vanished_drive() {
    let dir = TempDir::on_disk("leased-gets-vanished");
    let store = Store::open(direct_config(&dir, 2, 32 << 20, 1 << 20)).unwrap();
    let value = |i: usize| vec![i as u8 + 1; 300_000];
    for i in 0..8 {
        store.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    vanish(&dir.path().join("drive1"));
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let (mut found, mut missed) = (0, 0);
    for (i, got) in store
        .get_parts_batch(&keys, u64::MAX)
        .into_iter()
        .enumerate()
    {
        match got.unwrap() {
            Some(parts) => {
                assert!(
                    parts.parts().flatten().copied().eq(value(i)),
                    "k{i}: wrong bytes"
                );
                found += 1;
            }
            None => missed += 1,
        }
    }
    assert_misses_of_a_vanished_second_drive(&store.stats(), found, missed);
}

/// Makes the drive file at `path` vanish under a running store: it keeps its superblock and
/// nothing after it, so reads past that come back short.
fn vanish(path: &std::path::Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(4096)
        .unwrap();
}

/// Some values were served and some missed, and every miss is a read error on drive 1: an
/// unreadable drive is not corruption.
fn assert_misses_of_a_vanished_second_drive(stats: &StoreStats, found: usize, missed: usize) {
    assert!(found > 0 && missed > 0, "found {found}, missed {missed}");
    assert!(
        stats.per_device[1].read_errors >= missed as u64,
        "{stats:?}"
    );
    assert_eq!(stats.checksum_failures, 0, "{stats:?}");
}
