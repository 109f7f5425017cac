//! Direct mode's puts filled in place (`Store::put_in_place`): values read piece by piece into
//! the drives' own buffers, then committed like any put.

mod common;

use common::{TempDir, direct_config, file_config};
use memkv_store::{DirectPut, Store, StoreError};

fn value(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8)
        .collect()
}

/// Fills `put` with `bytes` the way a socket reader does: each piece as it is handed out.
fn fill(put: &mut DirectPut, bytes: &[u8]) -> usize {
    let mut at = 0;
    let mut pieces = 0;
    while let Some(piece) = put.next_piece() {
        let n = piece.len();
        piece.copy_from_slice(&bytes[at..at + n]);
        at += n;
        pieces += 1;
        put.piece_filled();
    }
    assert_eq!(at, bytes.len(), "the pieces cover the value exactly");
    pieces
}

#[test]
fn values_filled_in_place_read_back_and_survive_reopen() {
    let dir = TempDir::on_disk("in-place");
    // 1 MiB extents over two drives: a 2.5 MB value spans three extents (and both drives),
    // and its last piece ends inside a 4 KiB sector.
    let cfg = direct_config(&dir, 2, 64 << 20, 1 << 20);
    let sizes = [1usize, 4095, 4096, 1 << 20, (1 << 20) + 1, 2_500_000];
    {
        let store = Store::open(cfg.clone()).unwrap();
        for (n, &len) in sizes.iter().enumerate() {
            let bytes = value(len, n as u32);
            let key = format!("k{n}");
            let mut put = store
                .put_in_place(key.as_bytes(), len as u64)
                .unwrap()
                .unwrap();
            assert_eq!(put.len(), len as u64);
            let pieces = fill(&mut put, &bytes);
            assert_eq!(
                pieces,
                len.div_ceil(1 << 20),
                "one piece per buffer of {len} bytes"
            );
            put.commit(memkv_store::checksum::xxh3_64(&bytes)).unwrap();
            assert!(*store.get(key.as_bytes()).unwrap().unwrap() == bytes[..]);
        }
        // A second put of a key replaces it.
        let again = value(10_000, 99);
        let mut put = store.put_in_place(b"k0", 10_000).unwrap().unwrap();
        fill(&mut put, &again);
        put.commit(memkv_store::checksum::xxh3_64(&again)).unwrap();
        store.close().unwrap();
    }
    let store = Store::open(cfg).unwrap();
    for (n, &len) in sizes.iter().enumerate().skip(1) {
        let got = store.get(format!("k{n}").as_bytes()).unwrap().unwrap();
        assert!(
            *got == value(len, n as u32)[..],
            "k{n} changed across a reopen"
        );
    }
    assert!(*store.get(b"k0").unwrap().unwrap() == value(10_000, 99)[..]);
}

#[test]
fn a_wrong_checksum_or_an_abandoned_fill_stores_nothing_and_frees_the_room() {
    let dir = TempDir::on_disk("in-place-refused");
    let cfg = direct_config(&dir, 1, 32 << 20, 1 << 20);
    let store = Store::open(cfg).unwrap();
    let used = |s: &Store| s.stats().per_device[0].used;
    let bytes = value(3 << 20, 7);

    let mut put = store
        .put_in_place(b"bad", bytes.len() as u64)
        .unwrap()
        .unwrap();
    fill(&mut put, &bytes);
    match put.commit(memkv_store::checksum::xxh3_64(&bytes) ^ 1) {
        Err(StoreError::ChecksumMismatch { .. }) => {}
        other => panic!("expected ChecksumMismatch, got {other:?}"),
    }
    assert!(!store.exists(b"bad"));
    assert_eq!(used(&store), 0, "a refused value's extents were not freed");

    // Half filled, then dropped (a client that went away mid-value).
    let mut put = store
        .put_in_place(b"gone", bytes.len() as u64)
        .unwrap()
        .unwrap();
    let piece = put.next_piece().unwrap();
    piece.fill(1);
    put.piece_filled();
    assert!(used(&store) > 0);
    drop(put);
    assert_eq!(used(&store), 0);
    assert!(!store.exists(b"gone"));

    // Committed before every piece was filled: refused, nothing stored.
    let mut put = store
        .put_in_place(b"short", bytes.len() as u64)
        .unwrap()
        .unwrap();
    put.next_piece().unwrap().fill(2);
    put.piece_filled();
    let e = put.commit(0).unwrap_err().to_string();
    assert!(e.contains("still empty"), "{e}");
    assert!(!store.exists(b"short"));
    assert_eq!(used(&store), 0);
}

#[test]
fn fills_hold_at_most_half_a_drives_buffers_and_other_modes_decline() {
    let dir = TempDir::on_disk("in-place-leases");
    let store = Store::open(direct_config(&dir, 1, 64 << 20, 1 << 20)).unwrap();
    // A drive has 32 buffers of 1 MiB and lends 16 to fills: four 4 MiB values take them all.
    let held: Vec<DirectPut> = (0..4)
        .map(|i| {
            store
                .put_in_place(format!("slow{i}").as_bytes(), 4 << 20)
                .unwrap()
                .expect("buffers to spare")
        })
        .collect();
    assert!(store.put_in_place(b"one-more", 1).unwrap().is_none());
    // The usual path still writes meanwhile (its buffers are the ones kept back).
    store.put(b"usual", &value(2 << 20, 3)).unwrap();
    drop(held);
    assert!(store.put_in_place(b"one-more", 1).unwrap().is_some());
    // Bad keys and oversized values are refused by name, as any put.
    assert!(store.put_in_place(b"", 1).is_err());
    assert!(matches!(
        store.put_in_place(b"huge", 1 << 40),
        Err(StoreError::TooLarge { .. })
    ));

    let dir = TempDir::new("in-place-file");
    let file_mode = Store::open(file_config(&dir, 1, 32 << 20, 1 << 20)).unwrap();
    assert!(file_mode.put_in_place(b"k", 10).unwrap().is_none());
    let memory = Store::open(memkv_store::StoreConfig::memory(8 << 20)).unwrap();
    assert!(memory.put_in_place(b"k", 10).unwrap().is_none());
}
