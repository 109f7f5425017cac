//! File-mode reads through the drive mapping (one pass that copies and hashes): bit-exact
//! values of awkward lengths across extents and drives, and corruption caught even in a range
//! that earlier reads already mapped.

mod common;

use common::{TempDir, file_config};
use memkv_store::{FileReads, Store, checksum};

fn value(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn awkward_lengths_read_back_exactly() {
    let dir = TempDir::new("file-reads");
    let block = 64 << 10;
    let store = Store::open(file_config(&dir, 3, 32 << 20, block)).unwrap();
    let lens = [
        1,
        240,
        241,
        1025,
        block as usize - 1,
        block as usize,
        block as usize + 1,
        3 * block as usize + 4097,
        1_000_003,
    ];
    for (i, &len) in lens.iter().enumerate() {
        let v = value(len, i as u32);
        let key = format!("k{i}");
        store.put(key.as_bytes(), &v).unwrap();
        for _ in 0..2 {
            let got = store.get(key.as_bytes()).unwrap().unwrap();
            assert!(*got == v[..], "len {len}");
            assert_eq!(got.checksum(), checksum(&v));
            let mut buf = vec![0; len + 7];
            let (n, sum) = store
                .read_into_slice(key.as_bytes(), &mut buf)
                .unwrap()
                .unwrap();
            assert_eq!((n, sum), (len, checksum(&v)));
            assert!(buf[..n] == v[..], "slice len {len}");
        }
    }
    assert_eq!(store.stats().checksum_failures, 0);
}

#[test]
fn corruption_after_reads_is_still_caught() {
    corruption_after_reads_is_caught_with(FileReads::Mapped);
}

#[test]
fn corruption_is_caught_with_pread_reads_too() {
    corruption_after_reads_is_caught_with(FileReads::Pread);
}

fn corruption_after_reads_is_caught_with(reads: FileReads) {
    let dir = TempDir::new("file-reads-corrupt");
    let mut cfg = file_config(&dir, 2, 32 << 20, 1 << 20);
    cfg.file_reads = reads;
    let store = Store::open(cfg.clone()).unwrap();
    let mut v = value(2_500_000, 9);
    let marker = b"corrupt-me-here";
    v[1_600_000..1_600_000 + marker.len()].copy_from_slice(marker);
    store.put(b"big", &v).unwrap();
    for _ in 0..3 {
        assert!(*store.get(b"big").unwrap().unwrap() == v[..]);
    }
    // The drive bytes change under the open store (test double for media corruption).
    common::corrupt_value(&cfg, marker);
    assert!(store.get(b"big").unwrap().is_none());
    assert_eq!(store.stats().checksum_failures, 1);
    assert!(!store.exists(b"big"));
    let mut buf = Vec::new();
    assert_eq!(store.read_into(b"big", &mut buf).unwrap(), None);
    assert_eq!(store.stats().checksum_failures, 1);
}
