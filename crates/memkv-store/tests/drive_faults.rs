//! A drive that starts failing I/O goes offline on its own: its values read as misses (counted
//! per drive), new values go to the other drives, and the store keeps serving. The failure is
//! made for real: the drive file is truncated under the running store (a test double for a
//! drive that vanished), so its reads come back short.

mod common;

use common::{TempDir, direct_config, file_config};
use memkv_store::{FileReads, Store, StoreConfig};

fn run(config: StoreConfig, second_drive: std::path::PathBuf) {
    let store = Store::open(config).unwrap();
    // One extent each, so every value lives on one drive.
    let value = |i: usize| vec![i as u8; 200_000];
    for i in 0..16 {
        store.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    let before = store.stats();
    assert!(
        before.per_device.iter().all(|d| d.online && d.used > 0),
        "{before:?}"
    );
    // Drive 1 keeps its superblock and nothing after it.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&second_drive)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let mut found = 0;
    let mut missed = 0;
    for i in 0..16 {
        match store.get(format!("k{i}").as_bytes()).unwrap() {
            Some(v) => {
                assert!(*v == value(i)[..], "k{i}: wrong bytes served");
                found += 1;
            }
            None => missed += 1,
        }
    }
    assert!(found > 0 && missed > 0, "found {found}, missed {missed}");
    let stats = store.stats();
    assert!(stats.per_device[0].online, "{stats:?}");
    assert!(!stats.per_device[1].online, "{stats:?}");
    assert!(
        stats.per_device[1].read_errors >= missed as u64,
        "{stats:?}"
    );
    assert_eq!(
        stats.checksum_failures, 0,
        "an unreadable drive is not corruption"
    );
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
