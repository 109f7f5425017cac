//! Memory mode's `unsafe` (slices of the arena mapping handed out by blocks, reservations,
//! zero-copy reads and pins) exercised at sizes Miri can interpret: scripts/miri runs this file
//! under Miri, which checks every access against the aliasing rules; `cargo test` runs it too.
//! Each test holds a view of arena bytes while the store reuses the space around it, the case
//! the SAFETY notes in src/arena argue about.

use std::time::Duration;

use memkv_store::{EvictionPolicy, Store, StoreConfig, StoreMode, checksum};

const GRANULE: u64 = 64 << 10;

/// Four granules of 64 KiB (the smallest the config allows).
fn small_store(eviction: EvictionPolicy) -> Store {
    let mut cfg = StoreConfig::memory(4 * GRANULE);
    cfg.mode = StoreMode::Memory {
        max_size: 4 * GRANULE,
        block_size: GRANULE,
    };
    cfg.eviction = eviction;
    // Long leases: under Miri the clock runs on executed instructions, and a minute of it
    // passes while these tests run.
    cfg.pin_lease = Duration::from_secs(3600);
    Store::open(cfg).unwrap()
}

fn value(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn a_read_keeps_its_bytes_while_the_key_is_overwritten_and_deleted() {
    let store = small_store(EvictionPolicy::Lru);
    store.put(b"k", &value(1, 3000)).unwrap();
    let old = store.get(b"k").unwrap().unwrap();
    store.put(b"k", &value(2, 3000)).unwrap();
    // The old block may not be reused while `old` holds it: fill the store with other values.
    for i in 0..8u8 {
        store.put(&[b'x', i], &value(i, 2000)).unwrap();
    }
    store.delete(b"k").unwrap();
    assert_eq!(&*old, &value(1, 3000)[..]);
    assert_eq!(old.checksum(), checksum(&value(1, 3000)));
    drop(old);
    assert!(store.get(b"k").unwrap().is_none());
}

#[test]
fn reservations_fill_in_pieces_commit_and_abort() {
    let store = small_store(EvictionPolicy::None);
    let v = value(9, GRANULE as usize + 100);
    let mut r = store.allocate(b"big", v.len() as u64).unwrap();
    for (i, piece) in v.chunks(7000).enumerate() {
        r.write_at((i * 7000) as u64, piece).unwrap();
    }
    store.commit(r, checksum(&v)).unwrap();
    assert_eq!(&*store.get(b"big").unwrap().unwrap(), &v[..]);

    // Filled through the slice, as the TCP reader does, hashed as it lands.
    let small = value(3, 5000);
    let mut r = store.allocate(b"small", small.len() as u64).unwrap();
    let slice = r.as_mut_slice().expect("memory-mode reservation");
    slice[..2500].copy_from_slice(&small[..2500]);
    r.hash_filled(2500);
    r.as_mut_slice().unwrap()[2500..].copy_from_slice(&small[2500..]);
    r.hash_filled(small.len());
    store.commit(r, checksum(&small)).unwrap();
    assert_eq!(&*store.get(b"small").unwrap().unwrap(), &small[..]);

    let r = store.allocate(b"gone", 4000).unwrap();
    let id = r.id();
    drop(r);
    store.abort(id).unwrap();
    assert!(store.get(b"gone").unwrap().is_none());
    assert_eq!(store.stats().open_reservations, 0);
}

#[test]
fn a_pinned_value_survives_overwrite_and_eviction_until_released() {
    let store = small_store(EvictionPolicy::Lru);
    let v = value(5, 2 * GRANULE as usize);
    store.put(b"p", &v).unwrap();
    let pin = store
        .lookup(b"p", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let view = store.get(b"p").unwrap().unwrap();
    assert_eq!(view.arena_offset(), Some(pin.arena_offset));
    // Overwrite it and push other values through the rest of the arena.
    store.put(b"p", &value(6, 1000)).unwrap();
    for i in 0..6u8 {
        store.put(&[b'e', i], &value(i, GRANULE as usize)).unwrap();
    }
    assert_eq!(&*view, &v[..], "pinned bytes changed under their reader");
    // Released now, or, under Miri, whose clock runs on executed instructions, maybe already
    // expired: either way no pin is left once expired ones are reaped.
    let _ = store.release(pin.pin_id);
    store.reap_expired();
    drop(view);
    // The new value may have been evicted meanwhile; if not, it is the new one.
    if let Some(now) = store.get(b"p").unwrap() {
        assert_eq!(&*now, &value(6, 1000)[..]);
    }
    assert_eq!(store.stats().active_pins, 0);
}
