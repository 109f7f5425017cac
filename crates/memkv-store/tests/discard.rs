//! Batch discard of freed extents: drive files' allocated blocks shrink once deleted values'
//! extents are discarded, values written meanwhile are intact, and discarded extents are
//! reused. (That an extent reused before its discard is never discarded is a unit test of the
//! extent allocator.)

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use memkv_store::Store;

const EXTENT: u64 = 256 << 10;

/// Blocks (512 bytes) the filesystem holds for the store's drive files.
fn allocated(dir: &TempDir) -> u64 {
    std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks())
        .sum()
}

fn check(direct: bool) {
    let dir = TempDir::on_disk(if direct {
        "discard-direct"
    } else {
        "discard-file"
    });
    let config = if direct {
        direct_config(&dir, 2, 16 << 20, EXTENT)
    } else {
        file_config(&dir, 2, 16 << 20, EXTENT)
    };
    let store = Store::open(config).unwrap();
    let value = vec![0x5au8; EXTENT as usize];
    for i in 0..16 {
        store.put(format!("k{i}").as_bytes(), &value).unwrap();
    }
    store.flush().unwrap();
    let full = allocated(&dir);
    for i in 0..16 {
        assert!(store.delete(format!("k{i}").as_bytes()).unwrap());
    }
    // Written between the deletes and the discard.
    store.put(b"kept", &value).unwrap();
    let discarded = store.discard_freed();
    if discarded == 0 {
        // The filesystem under the test's temporary folder punches no holes (some network
        // filesystems): nothing more to measure here.
        eprintln!("discard: skipped: {} takes no discards", dir.0.display());
        return;
    }
    assert_eq!(discarded, 16);
    let after = allocated(&dir);
    // Sixteen extents gone; "kept" and the journal's delete records took a little back.
    assert!(
        after + 14 * EXTENT / 512 <= full,
        "allocated blocks {full} -> {after}: sixteen extents of {EXTENT} bytes should have gone"
    );
    assert!(store.get(b"kept").unwrap().unwrap()[..] == value[..]);
    assert_eq!(store.discard_freed(), 0, "each extent is discarded once");
    // Discarded extents are free again.
    for i in 0..16 {
        store.put(format!("again{i}").as_bytes(), &value).unwrap();
    }
    assert!(store.get(b"again15").unwrap().unwrap()[..] == value[..]);
}

#[test]
fn freed_extents_of_drive_files_are_punched_out() {
    check(false);
}

#[test]
fn freed_extents_of_direct_mode_drive_files_are_punched_out() {
    check(true);
}
