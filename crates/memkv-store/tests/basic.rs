//! End-to-end behaviour of the public API in both modes.

mod common;

use std::time::Duration;

use common::{TempDir, direct_config, file_config};
use memkv_store::{EvictionPolicy, Store, StoreConfig, StoreError, StoreMode, checksum};

fn every_mode(dir: &TempDir, direct_dir: &TempDir) -> Vec<(&'static str, Store)> {
    vec![
        (
            "memory",
            Store::open(StoreConfig::memory(16 << 20)).unwrap(),
        ),
        (
            "file",
            Store::open(file_config(dir, 2, 64 << 20, 1 << 20)).unwrap(),
        ),
        (
            "direct",
            Store::open(direct_config(direct_dir, 2, 64 << 20, 1 << 20)).unwrap(),
        ),
    ]
}

#[test]
fn put_get_delete_and_two_phase() {
    let dir = TempDir::new("basic");
    for (mode, store) in every_mode(&dir, &TempDir::on_disk(&format!("{}-direct", line!()))) {
        store.put(b"a", b"hello").unwrap();
        assert_eq!(&*store.get(b"a").unwrap().unwrap(), b"hello", "{mode}");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        store.put(b"big", &big).unwrap();
        let mut buf = Vec::new();
        assert_eq!(
            store.read_into(b"big", &mut buf).unwrap(),
            Some(checksum(&big))
        );
        assert!(buf == big, "{mode}");
        let mut slice = vec![0u8; 4 << 20];
        let (n, sum) = store.read_into_slice(b"big", &mut slice).unwrap().unwrap();
        assert!(
            n == big.len() && slice[..n] == big[..] && sum == checksum(&big),
            "{mode}"
        );
        assert!(matches!(
            store.read_into_slice(b"big", &mut [0u8; 100]),
            Err(StoreError::TooLarge { limit: 100, .. })
        ));
        assert!(
            store
                .read_into_slice(b"nope", &mut slice)
                .unwrap()
                .is_none()
        );
        store.put(b"empty", b"").unwrap();
        assert_eq!(store.get(b"empty").unwrap().unwrap().len(), 0);

        let mut r = store.allocate(b"two", 10).unwrap();
        r.write_at(0, b"01234").unwrap();
        r.write_at(5, b"56789").unwrap();
        assert!(!store.exists(b"two"), "{mode}: reservation visible");
        assert!(store.get(b"two").unwrap().is_none());
        let e = store.commit(r, 42).unwrap_err();
        assert!(
            matches!(e, StoreError::ChecksumMismatch { .. }),
            "{mode}: {e}"
        );
        assert!(!store.exists(b"two"));

        let mut r = store.allocate(b"two", 10).unwrap();
        r.write_at(5, b"56789").unwrap();
        r.write_at(0, b"01234").unwrap();
        store.commit(r, checksum(b"0123456789")).unwrap();
        assert_eq!(&*store.get(b"two").unwrap().unwrap(), b"0123456789");

        // A value written whole in one call (a TCP put) is hashed in one pass: still verified.
        let whole: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut r = store.allocate(b"whole", whole.len() as u64).unwrap();
        r.write_at(0, &whole).unwrap();
        let e = store.commit(r, checksum(&whole) ^ 1).unwrap_err();
        assert!(
            matches!(e, StoreError::ChecksumMismatch { .. }),
            "{mode}: {e}"
        );
        let mut r = store.allocate(b"whole", whole.len() as u64).unwrap();
        r.write_at(0, &whole).unwrap();
        store.commit(r, checksum(&whole)).unwrap();
        assert_eq!(&*store.get(b"whole").unwrap().unwrap(), &whole[..]);
        assert!(store.delete(b"whole").unwrap());

        // Commit by id after the handle is dropped; abort; unknown ids.
        let mut r = store.allocate(b"byid", 3).unwrap();
        r.write_at(0, b"xyz").unwrap();
        let id = r.id();
        drop(r);
        store.commit_id(id, checksum(b"xyz")).unwrap();
        assert_eq!(&*store.get(b"byid").unwrap().unwrap(), b"xyz");
        assert!(matches!(
            store.commit_id(id, 0),
            Err(StoreError::UnknownReservation(_))
        ));
        let r = store.allocate(b"gone", 3).unwrap();
        let id = r.id();
        drop(r);
        store.abort(id).unwrap();
        assert!(matches!(
            store.abort(id),
            Err(StoreError::UnknownReservation(_))
        ));

        assert!(store.delete(b"a").unwrap());
        assert!(!store.delete(b"a").unwrap());
        assert!(!store.exists(b"a"));
        let results = store.exists_batch(&[b"big", b"a", b"two"]);
        assert_eq!(results, vec![true, false, true]);
        let s = store.stats();
        assert_eq!(s.blocks, 4, "{mode}: {s:?}");
        assert!(
            s.used_bytes >= s.value_bytes && s.usable_bytes <= s.raw_bytes,
            "{s:?}"
        );
        assert!(matches!(
            store.put(&[7; 1025], b"x"),
            Err(StoreError::TooLarge {
                what: "key",
                limit: 1024,
                ..
            })
        ));
        assert!(matches!(
            store.put(b"huge", &vec![0; 200 << 20]),
            Err(StoreError::TooLarge { what: "value", .. })
        ));
        store.close().unwrap();
    }
}

#[test]
fn reservation_lease_expires_and_space_returns() {
    let mut cfg = StoreConfig::memory(4 << 20);
    cfg.reservation_lease = Duration::from_millis(20);
    cfg.eviction = EvictionPolicy::None;
    let store = Store::open(cfg).unwrap();
    let r = store.allocate(b"k", 4 << 20).unwrap();
    let id = r.id();
    drop(r);
    assert!(matches!(
        store.allocate(b"k2", 1 << 20),
        Err(StoreError::Full(_))
    ));
    std::thread::sleep(Duration::from_millis(30));
    // Allocation reclaims the expired reservation on its own.
    let r2 = store.allocate(b"k2", 1 << 20).unwrap();
    assert!(matches!(
        store.commit_id(id, 0),
        Err(StoreError::LeaseExpired(_))
    ));
    drop(r2);
}

#[test]
fn eviction_lru_and_none_and_pins() {
    let mut cfg = StoreConfig::memory(8 << 20);
    cfg.eviction = EvictionPolicy::None;
    let store = Store::open(cfg.clone()).unwrap();
    for i in 0..4u8 {
        store.put(&[i], &vec![i; 2 << 20]).unwrap();
    }
    assert!(matches!(
        store.put(b"x", &[1; 2 << 20]),
        Err(StoreError::Full(_))
    ));

    cfg.eviction = EvictionPolicy::Lru;
    let store = Store::open(cfg).unwrap();
    for i in 0..4u8 {
        store.put(&[i], &vec![i; 2 << 20]).unwrap();
    }
    let pin = store.lookup(&[0], Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(pin.len, 2 << 20);
    let held = store.get(&[1]).unwrap().unwrap();
    for i in 10..20u8 {
        store.put(&[i], &vec![i; 2 << 20]).unwrap();
    }
    assert!(store.exists(&[0]), "pinned block was evicted");
    // Evicting a block a reader still holds would free nothing until the reader drops it.
    assert!(store.exists(&[1]), "a block a reader holds was evicted");
    assert!(store.stats().evictions >= 4);
    // An overwrite repoints the index; the reader keeps the old bytes, unchanged.
    store.put(&[1], &vec![9; 2 << 20]).unwrap();
    assert!(held.iter().all(|&b| b == 1), "bytes changed under a reader");
    drop(held);
    assert!(store.release(pin.pin_id));
    assert!(!store.release(pin.pin_id));
    // The old bytes of [1] were freed with their reader: room for one more.
    store.put(b"y", &[2; 2 << 20]).unwrap();
    // With everything pinned nothing can be evicted.
    let keys: Vec<Vec<u8>> = (0..20u8).map(|k| vec![k]).chain([b"y".to_vec()]).collect();
    let pins: Vec<_> = keys
        .iter()
        .filter_map(|k| store.lookup(k, Duration::from_secs(5)).unwrap())
        .collect();
    assert_eq!(pins.len(), 4);
    assert!(matches!(
        store.put(b"z", &[3; 2 << 20]),
        Err(StoreError::Full(_))
    ));
    for p in &pins {
        assert!(store.release(p.pin_id));
    }
    store.put(b"z", &[3; 2 << 20]).unwrap();
    let info = store.arena().unwrap();
    assert_eq!(info.len, 8 << 20);
    assert!(!info.ptr.is_null());
}

#[test]
fn file_mode_survives_reopen_and_detects_corruption() {
    let dir = TempDir::new("reopen");
    survives_reopen_and_detects_corruption(file_config(&dir, 2, 64 << 20, 1 << 20));
}

#[test]
fn direct_mode_survives_reopen_and_detects_corruption() {
    let dir = TempDir::on_disk("reopen-direct");
    survives_reopen_and_detects_corruption(direct_config(&dir, 2, 64 << 20, 1 << 20));
}

fn survives_reopen_and_detects_corruption(cfg: StoreConfig) {
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i * 7) as u8).collect();
    {
        let store = Store::open(cfg.clone()).unwrap();
        store.put(b"k1", &big).unwrap();
        store.put(b"k2", b"small").unwrap();
        store.put(b"k3", b"gone").unwrap();
        store.delete(b"k3").unwrap();
    }
    let store = Store::open(cfg.clone()).unwrap();
    assert!(*store.get(b"k1").unwrap().unwrap() == big[..]);
    assert_eq!(&*store.get(b"k2").unwrap().unwrap(), b"small");
    assert!(!store.exists(b"k3"));
    let s = store.stats();
    assert_eq!(s.per_device.len(), 2);
    assert!(
        s.per_device.iter().all(|d| d.used > 0),
        "not striped: {s:?}"
    );
    drop(store);

    // Flip a byte inside k2's data: the read is a miss, counted, and the value dropped.
    common::corrupt_value(&cfg, b"small");
    let store = Store::open(cfg.clone()).unwrap();
    assert!(store.get(b"k2").unwrap().is_none());
    assert_eq!(store.stats().checksum_failures, 1);
    assert!(!store.exists(b"k2"));
    drop(store);
    let store = Store::open(cfg).unwrap();
    assert!(!store.exists(b"k2"), "dropped value came back");
    assert!(store.exists(b"k1"));
}

#[test]
fn file_mode_refuses_newer_format_and_wrong_geometry() {
    let dir = TempDir::new("version");
    let cfg = file_config(&dir, 1, 32 << 20, 1 << 20);
    drop(Store::open(cfg.clone()).unwrap());
    let mut wrong = cfg.clone();
    if let memkv_store::StoreMode::File { block_size, .. } = &mut wrong.mode {
        *block_size = 2 << 20;
    }
    let e = Store::open(wrong).err().unwrap().to_string();
    assert!(e.contains("storage.block_size"), "{e}");
    common::bump_format_version(&cfg);
    match Store::open(cfg) {
        Err(StoreError::UnsupportedVersion { found, supported }) => {
            assert_eq!(found, memkv_store::FILE_FORMAT_VERSION + 1);
            assert_eq!(supported, memkv_store::FILE_FORMAT_VERSION);
        }
        other => panic!("expected UnsupportedVersion, got {:?}", other.err()),
    }
}

#[test]
fn file_mode_reads_a_format_1_store_and_upgrades_its_drives() {
    let dir = TempDir::new("upgrade");
    let cfg = file_config(&dir, 2, 32 << 20, 1 << 20);
    let store = Store::open(cfg.clone()).unwrap();
    store.put(b"kept", &[7; 3000]).unwrap();
    drop(store);
    common::set_format_version(&cfg, 1);
    let store = Store::open(cfg.clone()).unwrap();
    assert_eq!(store.get(b"kept").unwrap().unwrap().as_ref(), &[7; 3000]);
    store.put(b"after", &[8; 100]).unwrap();
    drop(store);
    let current = memkv_store::FILE_FORMAT_VERSION;
    assert_eq!(common::format_versions(&cfg), vec![current, current]);
    let store = Store::open(cfg).unwrap();
    assert!(store.exists(b"kept") && store.exists(b"after"));
}

#[test]
fn pins_expire_and_stop_blocking_eviction() {
    let mut cfg = StoreConfig::memory(4 << 20);
    cfg.pin_lease = Duration::from_millis(20);
    let store = Store::open(cfg).unwrap();
    store.put(b"a", &vec![1; 2 << 20]).unwrap();
    store.put(b"b", &vec![2; 2 << 20]).unwrap();
    // The requested lease is capped at the configured 20 ms.
    let pa = store
        .lookup(b"a", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let pb = store
        .lookup(b"b", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_ne!(pa.arena_offset, pb.arena_offset);
    assert_eq!(pa.checksum, checksum(&vec![1; 2 << 20]));
    assert_eq!(store.stats().active_pins, 2);
    // Both values pinned: no room, nothing evictable (after a short grace period).
    assert!(matches!(
        store.put(b"c", &[3; 2 << 20]),
        Err(StoreError::Full(_))
    ));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(store.reap_expired(), 2);
    assert!(!store.release(pa.pin_id), "expired pin still releasable");
    store.put(b"c", &[3; 2 << 20]).unwrap();
    assert_eq!(store.stats().evictions, 1);
    assert!(
        store
            .lookup(b"missing", Duration::from_secs(1))
            .unwrap()
            .is_none()
    );
}

#[test]
fn checked_puts_store_only_values_that_match_their_checksum() {
    let dir = TempDir::new("checked");
    for (mode, store) in every_mode(&dir, &TempDir::on_disk(&format!("{}-direct", line!()))) {
        let value = vec![5u8; 4096];
        store.put(b"kept", b"old").unwrap();
        let used = store.stats().used_bytes;
        let results = store.put_batch_checked(&[
            (b"good", &value, checksum(&value)),
            (b"kept", &value, checksum(&value) ^ 1),
            (b"", &value, checksum(&value)),
        ]);
        assert!(results[0].is_ok(), "{mode}: {:?}", results[0]);
        assert!(
            matches!(results[1], Err(StoreError::ChecksumMismatch { .. })),
            "{mode}: {:?}",
            results[1]
        );
        assert!(results[2].is_err(), "{mode}: an empty key was stored");
        assert_eq!(&*store.get(b"good").unwrap().unwrap(), &value[..], "{mode}");
        assert_eq!(&*store.get(b"kept").unwrap().unwrap(), b"old", "{mode}");
        store.delete(b"good").unwrap();
        assert_eq!(
            store.stats().used_bytes,
            used,
            "{mode}: a refused value kept its room"
        );
    }
}

#[test]
fn batches_and_mode_specific_calls() {
    let dir = TempDir::new("batch");
    for (mode, store) in every_mode(&dir, &TempDir::on_disk(&format!("{}-direct", line!()))) {
        let items: Vec<(&[u8], &[u8])> = vec![(b"x", b"1"), (b"y", b"22"), (&[0; 2000], b"bad")];
        let put = store.put_batch(&items);
        assert!(put[0].is_ok() && put[1].is_ok(), "{mode}");
        assert!(matches!(
            put[2],
            Err(StoreError::TooLarge { what: "key", .. })
        ));
        let got = store.get_batch(&[b"x", b"y", b"z"]);
        assert_eq!(&**got[0].as_ref().unwrap().as_ref().unwrap(), b"1");
        assert_eq!(&**got[1].as_ref().unwrap().as_ref().unwrap(), b"22");
        assert!(got[2].as_ref().unwrap().is_none());
        let del = store.delete_batch(&[b"x", b"z"]);
        assert!(*del[0].as_ref().unwrap() && !*del[1].as_ref().unwrap());
        assert_eq!(store.exists_batch(&[b"x", b"y"]), vec![false, true]);
        if mode != "memory" {
            assert!(store.arena().is_none());
            assert!(matches!(
                store.lookup(b"y", Duration::from_secs(1)),
                Err(StoreError::BadRequest(_))
            ));
            let mut r = store.allocate(b"r", 4).unwrap();
            assert!(r.as_mut_slice().is_none() && r.arena_offset().is_none());
            assert!(
                r.write_at(2, b"abc").is_err(),
                "write past the reservation accepted"
            );
        } else {
            let mut r = store.allocate(b"r", 4).unwrap();
            assert!(r.arena_offset().is_some());
            r.as_mut_slice().unwrap().copy_from_slice(b"abcd");
            store.commit(r, checksum(b"abcd")).unwrap();
            let v = store.get(b"r").unwrap().unwrap();
            assert!(v.arena_offset().is_some());
        }
        store.close().unwrap();
        assert!(matches!(
            store.put(b"after", b"close"),
            Err(StoreError::BadRequest(_))
        ));
    }
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Store>();
    send_sync::<memkv_store::ValueRef>();
    send::<memkv_store::Reservation>();
}

/// The final write before a shutdown, whose bytes later go bad on the medium: after a clean
/// close (the journal sealed) it reads as a checksum failure and a miss; without one, replay
/// cannot tell it from a put a crash cut short, and the key keeps its previous value.
#[test]
fn a_clean_close_keeps_the_last_write_from_rolling_back_when_its_bytes_go_bad() {
    for close in [true, false] {
        let dir = TempDir::new(&format!("seal-{close}"));
        let cfg = file_config(&dir, 1, 32 << 20, 1 << 20);
        let store = Store::open(cfg.clone()).unwrap();
        store.put(b"k", b"the older value").unwrap();
        store.put(b"k", b"the newest value").unwrap();
        if close {
            store.close().unwrap();
        }
        drop(store);
        common::corrupt_value(&cfg, b"the newest value");
        let store = Store::open(cfg).unwrap();
        let got = store.get(b"k").unwrap();
        if close {
            assert!(got.is_none(), "a bad value is a miss");
            assert_eq!(store.stats().checksum_failures, 1);
        } else {
            assert_eq!(got.as_deref(), Some(&b"the older value"[..]));
        }
    }
}

/// Commit, Abort and Release name their reservation or pin by id, and any client may send
/// them: the ids must not let one client work out another's from its own.
#[test]
fn reservation_and_pin_ids_do_not_follow_from_each_other() {
    let store = Store::open(StoreConfig::memory(8 << 20)).unwrap();
    let mine = store.allocate(b"mine", 3).unwrap().id();
    let theirs = store.allocate(b"theirs", 3).unwrap().id();
    for guess in [mine.wrapping_add(1), mine.wrapping_sub(1), mine ^ 1] {
        assert_ne!(guess, theirs);
        assert!(matches!(
            store.abort(guess),
            Err(StoreError::UnknownReservation(_))
        ));
    }
    store.put(b"a", b"1").unwrap();
    let pin_a = store.lookup(b"a", Duration::from_secs(5)).unwrap().unwrap();
    let pin_b = store.lookup(b"a", Duration::from_secs(5)).unwrap().unwrap();
    assert_ne!(pin_a.pin_id.wrapping_add(1), pin_b.pin_id);
    assert!(!store.release(pin_a.pin_id.wrapping_add(1)));
    assert!(store.release(pin_b.pin_id));
}

const GRANULE: u64 = 64 << 10;

/// A memory store of `granules` granules whose reservations outlive the test.
fn granule_store(granules: u64, eviction: EvictionPolicy) -> Store {
    let mut cfg = StoreConfig::memory(granules * GRANULE);
    cfg.mode = StoreMode::Memory {
        max_size: granules * GRANULE,
        block_size: GRANULE,
    };
    cfg.eviction = eviction;
    cfg.reservation_lease = Duration::from_secs(600);
    Store::open(cfg).unwrap()
}

/// When puts in progress (RDMA writes in flight) hold the rest of the arena, evicting cannot
/// make room: the put is refused `Full` at once, and the cached values stay (they used to be
/// evicted one after another on the way to the same refusal).
#[test]
fn a_put_that_cannot_fit_does_not_evict_unrelated_values() {
    let s = granule_store(4, EvictionPolicy::Lru);
    s.put(b"keep", &vec![7u8; GRANULE as usize]).unwrap();
    // Three in-flight writers hold the other three granules (parked, as the server parks them).
    let ids: Vec<u64> = (0..3u8)
        .map(|i| s.allocate(&[b'r', i], GRANULE).unwrap().id())
        .collect();
    // Two contiguous granules cannot be found even with "keep" gone.
    let err = s.put(b"big", &vec![1u8; 2 * GRANULE as usize]).unwrap_err();
    assert!(matches!(err, StoreError::Full(_)), "{err}");
    assert!(
        s.exists(b"keep"),
        "a put that failed anyway evicted an unrelated value ({} evictions)",
        s.stats().evictions
    );
    for id in ids {
        s.abort(id).unwrap();
    }
}

/// A reservation taken before `close` is refused at commit, by handle or by id, like any
/// other write after close (it used to be published).
#[test]
fn a_commit_after_close_is_refused() {
    let s = granule_store(4, EvictionPolicy::Lru);
    let v = vec![3u8; 1000];
    let mut r = s.allocate(b"late", v.len() as u64).unwrap();
    r.write_at(0, &v).unwrap();
    let parked = s.allocate(b"late2", v.len() as u64).unwrap();
    let parked_id = parked.id();
    drop(parked);
    s.close().unwrap();
    assert!(s.put(b"x", b"y").is_err(), "put after close is refused");
    let by_handle = s.commit(r, checksum(&v));
    let by_id = s.commit_id_copied(parked_id, checksum(&[0u8; 1000]));
    assert!(
        by_handle.is_err() && by_id.is_err(),
        "commits after close accepted: {by_handle:?} {by_id:?}; store has late={} late2={}",
        s.exists(b"late"),
        s.exists(b"late2")
    );
}

#[test]
fn a_batch_naming_one_key_twice_keeps_the_later_value_even_after_a_reopen() {
    let dir = TempDir::new("twice");
    let direct_dir = TempDir::on_disk(&format!("{}-direct", line!()));
    let first = vec![1u8; 300_000];
    let second = vec![2u8; 200_000];
    for (mode, store) in every_mode(&dir, &direct_dir) {
        let results = store.put_batch_checked(&[
            (b"k", &first, checksum(&first)),
            (b"other", b"x", checksum(b"x")),
            (b"k", &second, checksum(&second)),
        ]);
        assert!(results.iter().all(|r| r.is_ok()), "{mode}: {results:?}");
        assert!(*store.get(b"k").unwrap().unwrap() == second[..], "{mode}");
        let plain = store.put_batch(&[(b"p", b"one"), (b"p", b"two")]);
        assert!(plain.iter().all(|r| r.is_ok()), "{mode}: {plain:?}");
        assert_eq!(&*store.get(b"p").unwrap().unwrap(), b"two", "{mode}");
        store.close().unwrap();
    }
    for (mode, cfg) in [
        ("file", file_config(&dir, 2, 64 << 20, 1 << 20)),
        ("direct", direct_config(&direct_dir, 2, 64 << 20, 1 << 20)),
    ] {
        let store = Store::open(cfg).unwrap();
        assert!(
            *store.get(b"k").unwrap().unwrap() == second[..],
            "{mode}: the earlier item came back after a reopen"
        );
        assert_eq!(&*store.get(b"p").unwrap().unwrap(), b"two", "{mode}");
    }
}
