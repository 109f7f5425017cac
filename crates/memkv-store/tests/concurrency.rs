//! Many threads hammer overlapping keys with puts, two-phase commits, reads, pins, deletes and
//! (through a small store) evictions. Values describe themselves (key, version, length and a
//! pattern derived from them), so any torn or mixed read is detected.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::versioned::{make, verify};
use common::{TempDir, direct_config, file_config};
use memkv_store::{Store, StoreConfig, StoreError, checksum};

const KEYS: u64 = 12;

fn hammer(store: Arc<Store>, threads: u64, ops: u64, max_len: u64) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut state = t.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
                let mut rand = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                let mut buf = Vec::new();
                let mut full = 0u64;
                for i in 0..ops {
                    let key = rand() % KEYS;
                    let kb = key.to_le_bytes();
                    let version = (t << 32) | i;
                    match rand() % 10 {
                        0..=2 => {
                            let v = make(key, version, (rand() % max_len) as usize);
                            match store.put(&kb, &v) {
                                Err(StoreError::Full(_)) => full += 1,
                                other => other.unwrap(),
                            }
                        }
                        3 => {
                            let v = make(key, version, (rand() % max_len) as usize);
                            let mut r = match store.allocate(&kb, v.len() as u64) {
                                Err(StoreError::Full(_)) => {
                                    full += 1;
                                    continue;
                                }
                                other => other.unwrap(),
                            };
                            for (n, c) in v.chunks(65_536).enumerate() {
                                r.write_at((n * 65_536) as u64, c).unwrap();
                            }
                            store.commit(r, checksum(&v)).unwrap();
                        }
                        4..=6 => {
                            if let Some(v) = store.get(&kb).unwrap() {
                                verify(key, &v, v.checksum());
                                // Held across other threads' overwrites and evictions.
                                std::thread::yield_now();
                                verify(key, &v, v.checksum());
                            }
                        }
                        7 => {
                            if let Some(sum) = store.read_into(&kb, &mut buf).unwrap() {
                                verify(key, &buf, sum);
                            }
                        }
                        8 => {
                            if store.arena().is_some()
                                && let Some(p) = store.lookup(&kb, Duration::from_secs(1)).unwrap()
                            {
                                assert!(p.len >= 24);
                                store.release(p.pin_id);
                            }
                        }
                        _ => {
                            store.delete(&kb).unwrap();
                        }
                    }
                }
                full
            })
        })
        .collect();
    let full: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // Full is a legal answer only while every byte is held by in-flight writers or readers;
    // it must stay rare.
    assert!(
        full * 50 < threads * ops,
        "{full} of {} writes found the store full",
        threads * ops
    );
    let s = store.stats();
    assert_eq!(s.checksum_failures, 0);
    assert_eq!(s.open_reservations, 0);
    assert_eq!(s.active_pins, 0);
    let mut buf = Vec::new();
    for key in 0..KEYS {
        if let Some(sum) = store.read_into(&key.to_le_bytes(), &mut buf).unwrap() {
            verify(key, &buf, sum);
        }
    }
}

#[test]
fn memory_mode_no_torn_reads_under_eviction() {
    // 16 MiB for 12 keys of up to 1.5 MiB plus 8 writers' reservations: puts keep evicting
    // while others read.
    let store = Arc::new(Store::open(StoreConfig::memory(16 << 20)).unwrap());
    hammer(Arc::clone(&store), 8, 600, 1_500_000);
    assert!(
        store.stats().evictions > 0,
        "the workload was meant to evict"
    );
}

#[test]
fn memory_mode_small_values() {
    let store = Arc::new(Store::open(StoreConfig::memory(8 << 20)).unwrap());
    hammer(store, 8, 5000, 5000);
}

#[test]
fn file_mode_no_torn_reads() {
    let dir = TempDir::new("concurrency");
    let store = Arc::new(Store::open(file_config(&dir, 2, 24 << 20, 256 << 10)).unwrap());
    hammer(Arc::clone(&store), 6, 250, 700_000);
    drop(store);
    // Whatever was last committed survives a restart intact.
    let store = Store::open(file_config(&dir, 2, 24 << 20, 256 << 10)).unwrap();
    let mut buf = Vec::new();
    for key in 0..KEYS {
        if let Some(sum) = store.read_into(&key.to_le_bytes(), &mut buf).unwrap() {
            verify(key, &buf, sum);
        }
    }
    assert_eq!(store.stats().checksum_failures, 0);
}

#[test]
fn direct_mode_no_torn_reads() {
    let dir = TempDir::on_disk("concurrency-direct");
    let store = Arc::new(Store::open(direct_config(&dir, 2, 24 << 20, 256 << 10)).unwrap());
    hammer(Arc::clone(&store), 6, 250, 700_000);
    drop(store);
    let store = Store::open(direct_config(&dir, 2, 24 << 20, 256 << 10)).unwrap();
    let mut buf = Vec::new();
    for key in 0..KEYS {
        if let Some(sum) = store.read_into(&key.to_le_bytes(), &mut buf).unwrap() {
            verify(key, &buf, sum);
        }
    }
    assert_eq!(store.stats().checksum_failures, 0);
}
