//! Direct mode's gets for sending (`Store::get_parts`): values read into the drives' own
//! registered buffers and handed out as those buffers, verified first; the usual read when no
//! buffers can be spared or the value is too large for the path.

mod common;

use common::{TempDir, corrupt_value, direct_config, file_config};
use memkv_store::{Store, checksum::xxh3_64};

fn value(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(7919)) as u8)
        .collect()
}

#[test]
fn values_come_back_from_the_drive_buffers_in_order() {
    let dir = TempDir::on_disk("leased-gets");
    // 1 MiB extents over two drives: 2.5 MB spans three extents on both drives and ends inside
    // a sector; 5 MiB needs five buffers, more than one get may hold.
    let store = Store::open(direct_config(&dir, 2, 64 << 20, 1 << 20)).unwrap();
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        1 << 20,
        (1 << 20) + 1,
        2_500_000,
        5 << 20,
    ];
    for (n, &len) in sizes.iter().enumerate() {
        let bytes = value(len, n as u32);
        let key = format!("k{n}");
        store.put(key.as_bytes(), &bytes).unwrap();
        let got = store.get_parts(key.as_bytes()).unwrap().unwrap();
        assert_eq!(got.len(), len as u64);
        assert_eq!(got.checksum(), xxh3_64(&bytes));
        assert!(
            got.to_vec() == bytes,
            "{key} ({len} bytes) came back different"
        );
        let parts: Vec<usize> = got.parts().map(<[u8]>::len).collect();
        if len <= 4 << 20 {
            assert!(got.is_leased(), "{len} bytes fit the drive buffers");
            assert_eq!(
                parts.len(),
                len.div_ceil(1 << 20),
                "one part per 1 MiB buffer"
            );
        } else {
            assert!(!got.is_leased(), "{len} bytes take the usual path");
        }
    }
    assert!(store.get_parts(b"absent").unwrap().is_none());
}

#[test]
fn a_get_that_finds_no_spare_buffers_reads_the_usual_way_and_buffers_come_back() {
    let dir = TempDir::on_disk("leased-gets-busy");
    let store = Store::open(direct_config(&dir, 1, 64 << 20, 4 << 20)).unwrap();
    let bytes = value(4 << 20, 1);
    store.put(b"big", &bytes).unwrap();
    // Each held answer keeps four of the drive's 32 buffers; the drive keeps 16 for itself, so
    // the fifth get finds none to spare.
    let held: Vec<_> = (0..4)
        .map(|_| store.get_parts(b"big").unwrap().unwrap())
        .collect();
    assert!(held.iter().all(|v| v.is_leased()));
    let fifth = store.get_parts(b"big").unwrap().unwrap();
    assert!(!fifth.is_leased(), "no buffers to spare: the usual read");
    assert!(fifth.to_vec() == bytes);
    // Puts filled in place find none either, and still store through the usual path.
    assert!(store.put_in_place(b"other", 1 << 20).unwrap().is_none());
    store.put(b"other", &value(1 << 20, 2)).unwrap();
    drop(held);
    let again = store.get_parts(b"big").unwrap().unwrap();
    assert!(
        again.is_leased(),
        "the buffers came back when the answers dropped"
    );
    assert!(again.to_vec() == bytes);
}

#[test]
fn a_corrupt_value_is_counted_dropped_and_never_handed_out() {
    let dir = TempDir::on_disk("leased-gets-corrupt");
    let cfg = direct_config(&dir, 1, 64 << 20, 1 << 20);
    let store = Store::open(cfg.clone()).unwrap();
    let bytes = value(3 << 20, 3);
    store.put(b"v", &bytes).unwrap();
    store.flush().unwrap();
    // Test double for media corruption: one byte of the value's second megabyte flipped on the
    // drive file (O_DIRECT reads see it: the kernel writes the page back before they read).
    corrupt_value(&cfg, &bytes[(1 << 20) + 100..(1 << 20) + 164]);
    assert!(store.get_parts(b"v").unwrap().is_none());
    assert_eq!(store.stats().checksum_failures, 1);
    assert!(store.get(b"v").unwrap().is_none(), "dropped from the index");
}

#[test]
fn file_mode_answers_the_usual_way() {
    let dir = TempDir::new("leased-gets-file");
    let store = Store::open(file_config(&dir, 1, 16 << 20, 1 << 20)).unwrap();
    let bytes = value(1 << 20, 4);
    store.put(b"f", &bytes).unwrap();
    let got = store.get_parts(b"f").unwrap().unwrap();
    assert!(!got.is_leased());
    assert!(got.to_vec() == bytes);
}

#[test]
fn a_batch_reads_what_fits_the_buffers_at_once_and_the_rest_the_usual_way() {
    let dir = TempDir::on_disk("leased-gets-batch");
    let store = Store::open(direct_config(&dir, 2, 128 << 20, 1 << 20)).unwrap();
    // 24 values of 2.5 MB: three buffers each, 72 in all, where the two drives spare 32.
    let values: Vec<(String, Vec<u8>)> = (0..24u32)
        .map(|i| (format!("b{i}"), value(2_500_000, 100 + i)))
        .collect();
    for (k, v) in &values {
        store.put(k.as_bytes(), v).unwrap();
    }
    let mut keys: Vec<&[u8]> = values.iter().map(|(k, _)| k.as_bytes()).collect();
    keys.insert(3, b"absent");
    keys.insert(7, b"");
    let got = store.get_parts_batch(&keys, u64::MAX);
    assert_eq!(got.len(), keys.len());
    assert!(
        got[3].as_ref().unwrap().is_none(),
        "an absent key is a miss"
    );
    assert!(got[7].is_err(), "an empty key is refused");
    let found: Vec<_> = got
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 7)
        .map(|(_, r)| r.unwrap().unwrap())
        .collect();
    for ((k, v), got) in values.iter().zip(&found) {
        assert!(got.to_vec() == *v, "{k} came back different");
    }
    let leased = found.iter().filter(|v| v.is_leased()).count();
    assert!(
        (1..values.len()).contains(&leased),
        "some values leased, the rest read the usual way: {leased} of {}",
        values.len()
    );
}

/// A batch answer has room for so many bytes of values: a value that does not fit in what the
/// earlier ones left is refused without being read, in every mode, and a smaller one after it
/// still fits.
#[test]
fn a_batch_reads_values_only_while_they_fit_its_answer() {
    let dir = TempDir::on_disk("leased-gets-room");
    let direct = TempDir::on_disk("leased-gets-room-direct");
    let configs = [
        memkv_store::StoreConfig::memory(32 << 20),
        file_config(&dir, 1, 32 << 20, 1 << 20),
        direct_config(&direct, 1, 32 << 20, 1 << 20),
    ];
    for config in configs {
        let mode = format!("{:?}", config.mode);
        let store = Store::open(config).unwrap();
        let (big, small) = (value(1 << 20, 1), value(1000, 2));
        store.put(b"big", &big).unwrap();
        store.put(b"small", &small).unwrap();
        let keys: [&[u8]; 6] = [b"big", b"big", b"big", b"small", b"absent", b""];
        let got = store.get_parts_batch(&keys, (5 << 19) + 1000);
        let outcome: Vec<String> = got
            .iter()
            .map(|r| match r {
                Ok(Some(v)) => format!("{} bytes", v.len()),
                Ok(None) => "miss".into(),
                Err(memkv_store::StoreError::TooLarge { len, limit, .. }) => {
                    format!("no room for {len} in {limit}")
                }
                Err(e) => e.to_string(),
            })
            .collect();
        assert_eq!(
            outcome,
            [
                "1048576 bytes",
                "1048576 bytes",
                "no room for 1048576 in 525288",
                "1000 bytes",
                "miss",
                "bad request: key must not be empty",
            ],
            "{mode}"
        );
        assert!(got[3].as_ref().unwrap().as_ref().unwrap().to_vec() == small);
    }
}
