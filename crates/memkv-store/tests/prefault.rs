//! `Store::prefault`: populates the arena while the store serves, changes no value, refuses
//! bad thread counts and does nothing in file mode.

mod common;

use common::{TempDir, file_config};
use memkv_store::{ArenaBacking, PrefaultMethod, Store, StoreConfig, StoreError};

#[test]
fn prefault_while_serving_keeps_every_value() {
    let store = Store::open(StoreConfig::memory(32 << 20)).unwrap();
    let value = |i: u32, len: usize| -> Vec<u8> {
        (0..len as u32)
            .map(|j| (j ^ i.wrapping_mul(97)) as u8)
            .collect()
    };
    for i in 0..8 {
        store
            .put(format!("k{i}").as_bytes(), &value(i, 300_000))
            .unwrap();
    }
    let report = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for round in 0..40u32 {
                let i = 8 + round % 4;
                store
                    .put(format!("k{i}").as_bytes(), &value(i, 200_000))
                    .unwrap();
            }
        });
        let report = store.prefault(4).unwrap();
        writer.join().unwrap();
        report
    });
    assert_eq!(report.bytes, 32 << 20);
    assert!((1..=4).contains(&report.threads));
    assert!(matches!(
        report.method,
        PrefaultMethod::PopulateWrite | PrefaultMethod::Touch
    ));
    for i in 0..12 {
        let len = if i < 8 { 300_000 } else { 200_000 };
        let got = store.get(format!("k{i}").as_bytes()).unwrap().unwrap();
        assert!(*got == value(i, len)[..], "k{i} changed");
    }
}

#[test]
fn prefault_checks_threads_and_skips_file_mode() {
    let store = Store::open(StoreConfig::memory(4 << 20)).unwrap();
    for bad in [0, 257] {
        let e = store.prefault(bad).unwrap_err();
        assert!(
            matches!(&e, StoreError::BadRequest(m) if m.contains("prefault threads") && m.contains("256")),
            "{e}"
        );
    }
    let dir = TempDir::new("prefault");
    let store = Store::open(file_config(&dir, 1, 16 << 20, 1 << 20)).unwrap();
    let report = store.prefault(2).unwrap();
    assert_eq!(
        (report.bytes, report.method),
        (0, PrefaultMethod::NotNeeded)
    );
}

/// Rounding leaves the last threads nothing to do: an 18 MiB arena (nine 2 MiB units) over 4
/// threads is cut into parts of three, so three threads work, and the report says three (it
/// said four).
#[test]
fn prefault_reports_only_the_threads_that_worked() {
    let s = Store::open(StoreConfig::memory(18 << 20)).unwrap();
    if let Some(ArenaBacking::ExplicitHugepages { page_size }) = s.arena().map(|a| a.backing)
        && page_size != 2 << 20
    {
        return; // other split units: the arithmetic below does not apply
    }
    let report = s.prefault(4).unwrap();
    assert_eq!(report.bytes, 18 << 20);
    assert_eq!(
        report.threads, 3,
        "nine units in parts of three: three threads worked"
    );
}
