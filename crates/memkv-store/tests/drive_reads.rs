//! Drive-backed reads (file and direct mode) that fail or race: a bad value read several times
//! at once counts once against its drive, and gets into the drives' own buffers
//! (`Store::get_parts_batch`) and the usual verified reads racing with overwrites, deletes,
//! puts filled in place and the discard of freed extents never return other bytes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::versioned::{make, verify};
use common::{TempDir, corrupt_value, direct_config, file_config};
use memkv_store::{DRIVE_ERROR_LIMIT, FileReads, Store, StoreConfig, StoreError, checksum};

fn value(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(7919)) as u8)
        .collect()
}

/// Cuts the drive file at `path` off at `at` (rounded down to a sector): a test double for an
/// unreadable range of the drive (reads there come back short, an I/O error). Everything
/// before `at` stays readable.
fn cut_off(path: &std::path::Path, at: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(at / 4096 * 4096)
        .unwrap();
}

fn find(path: &std::path::Path, needle: &[u8]) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    bytes[1 << 20..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| (p + (1 << 20)) as u64)
        .expect("value on the drive")
}

/// One unreadable value named several times in one batch get (a client's batch may repeat a
/// key) has every repetition's read in flight before the first fails. Each failure counted
/// against the drive, so `DRIVE_ERROR_LIMIT` repetitions of one bad range took the whole
/// drive offline and every other value on it read as a miss. The error now counts once, for
/// the read whose delete drops the value (as when many clients read one bad hot block).
#[test]
fn one_bad_value_repeated_in_a_batch_does_not_take_its_drive_offline() {
    let dir = TempDir::on_disk("reads-repeat-bad");
    // 1 MiB extents over two drives; values of one extent each go round robin: d0, keep (drive
    // 1, its first extent), d0b, bad (drive 1, its second extent).
    let store = Store::open(direct_config(&dir, 2, 32 << 20, 1 << 20)).unwrap();
    let keep = value(300_000, 1);
    let bad = value(300_000, 2);
    store.put(b"d0", &value(300_000, 3)).unwrap();
    store.put(b"keep", &keep).unwrap();
    store.put(b"d0b", &value(300_000, 4)).unwrap();
    store.put(b"bad", &bad).unwrap();
    let drive1 = dir.path().join("drive1");
    let keep_at = find(&drive1, &keep[..64]);
    let bad_at = find(&drive1, &bad[..64]);
    assert!(keep_at < bad_at, "keep lies before bad on drive 1");
    // The range holding "bad" becomes unreadable; "keep" stays readable.
    cut_off(&drive1, bad_at);

    let keys: Vec<&[u8]> = vec![b"bad"; DRIVE_ERROR_LIMIT as usize + 2];
    for got in store.get_parts_batch(&keys, u64::MAX) {
        assert!(got.unwrap().is_none(), "an unreadable value is a miss");
    }
    let stats = store.stats();
    assert!(
        stats.per_device[1].online,
        "one unreadable value (named {} times in one batch) took drive 1 offline: \
         read_errors {} (a bad range drops its value and the drive keeps serving)",
        keys.len(),
        stats.per_device[1].read_errors
    );
    let got = store.get_parts(b"keep").unwrap();
    assert!(
        got.is_some_and(|v| v.to_vec() == keep),
        "drive 1's readable value is served"
    );
}

/// The same for a corrupt value: named several times in one batch, it is one checksum failure
/// (it was counted once per repetition).
#[test]
fn one_corrupt_value_repeated_in_a_batch_is_counted_once() {
    let dir = TempDir::on_disk("reads-repeat-corrupt");
    let cfg = direct_config(&dir, 1, 32 << 20, 1 << 20);
    let store = Store::open(cfg.clone()).unwrap();
    let mut v = value(300_000, 5);
    let marker = b"corrupt-me-here!";
    v[100_000..100_000 + marker.len()].copy_from_slice(marker);
    store.put(b"v", &v).unwrap();
    corrupt_value(&cfg, marker);
    for got in store.get_parts_batch(&[b"v", b"v", b"v"], u64::MAX) {
        assert!(got.unwrap().is_none(), "never handed out");
    }
    assert!(!store.exists(b"v"), "dropped");
    assert_eq!(
        store.stats().checksum_failures,
        1,
        "one corrupt value is one checksum failure"
    );
}

// ---- Races: reads against overwrites, deletes, puts in place, evictions and discards. ----

const KEYS: u64 = 10;

fn race(config: StoreConfig, direct: bool) {
    let store = Arc::new(Store::open(config).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // The server's reaper, as fast as it goes.
    let reaper = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut discarded = 0;
            while !stop.load(Ordering::Relaxed) {
                discarded += store.discard_freed();
                std::thread::yield_now();
            }
            discarded
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut state = (t + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
                let mut rand = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                for i in 0..300u64 {
                    let key = rand() % KEYS;
                    let kb = key.to_le_bytes();
                    let version = (t << 32) | i;
                    let len = (rand() % 1_500_000) as usize;
                    match rand() % 8 {
                        0 | 1 => match store.put(&kb, &make(key, version, len)) {
                            Ok(()) | Err(StoreError::Full(_)) => {}
                            Err(e) => panic!("put: {e}"),
                        },
                        2 => {
                            let v = make(key, version, len);
                            match store.put_in_place(&kb, v.len() as u64).unwrap() {
                                Some(mut put) => {
                                    let mut at = 0;
                                    while let Some(piece) = put.next_piece() {
                                        let n = piece.len();
                                        piece.copy_from_slice(&v[at..at + n]);
                                        at += n;
                                        put.piece_filled();
                                    }
                                    put.commit(checksum(&v)).unwrap();
                                }
                                None => {
                                    let _ = store.put(&kb, &v);
                                }
                            }
                        }
                        3 | 4 => {
                            let other = (rand() % KEYS).to_le_bytes();
                            let keys: [&[u8]; 4] = [&kb, &other, &kb, &other];
                            let held: Vec<_> = store
                                .get_parts_batch(&keys, u64::MAX)
                                .into_iter()
                                .map(|r| r.unwrap())
                                .collect();
                            // Held across other threads' overwrites, deletes and discards.
                            std::thread::yield_now();
                            for (k, got) in keys.iter().zip(held) {
                                if let Some(v) = got {
                                    let k = u64::from_le_bytes((*k).try_into().unwrap());
                                    verify(k, &v.to_vec(), v.checksum());
                                }
                            }
                        }
                        5 => {
                            if let Some(v) = store.get(&kb).unwrap() {
                                verify(key, &v, v.checksum());
                            }
                        }
                        6 => {
                            let _ = store.evict_one();
                        }
                        _ => {
                            store.delete(&kb).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let discarded = reaper.join().unwrap();
    let s = store.stats();
    assert_eq!(s.checksum_failures, 0, "direct {direct}: {s:?}");
    assert!(
        s.per_device.iter().all(|d| d.online && d.read_errors == 0),
        "{s:?}"
    );
    for key in 0..KEYS {
        if let Some(v) = store.get(&key.to_le_bytes()).unwrap() {
            verify(key, &v, v.checksum());
        }
    }
    eprintln!("direct {direct}: {discarded} extents discarded while racing");
}

#[test]
fn direct_mode_reads_race_overwrites_deletes_and_discards() {
    let dir = TempDir::on_disk("reads-race-direct");
    race(direct_config(&dir, 2, 24 << 20, 256 << 10), true);
}

#[test]
fn mapped_file_reads_race_overwrites_deletes_and_discards() {
    let dir = TempDir::on_disk("reads-race-file");
    let mut cfg = file_config(&dir, 2, 24 << 20, 256 << 10);
    cfg.file_reads = FileReads::Mapped;
    race(cfg, false);
}
