//! File and direct mode on block devices: loop devices over scratch files (a test double for
//! NVMe namespaces), where this process may make them; where it may not (no root, no loop
//! driver), the test says so and checks nothing. A block device's metadata gives no length and
//! it cannot be resized, so a drive's size comes from the device itself.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TempDir;
use memkv_store::{DriveConfig, Store, StoreConfig, StoreMode};

/// A loop device over a file, detached when dropped.
struct Loop(PathBuf);

impl Loop {
    fn attach(backing: &Path) -> Option<Loop> {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(backing)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "no loop device ({}); skipped",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Loop(PathBuf::from(
            String::from_utf8_lossy(&out.stdout).trim(),
        )))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

fn value(i: u32) -> Vec<u8> {
    (0..300_000u32)
        .map(|j| (j ^ i.wrapping_mul(31)) as u8)
        .collect()
}

/// Stores values on `device`, reopens the store, and reads them back.
fn round_trip(device: &Path, direct: bool) {
    let drives = vec![DriveConfig {
        path: device.to_owned(),
        size: None,
    }];
    let config = || {
        let mut cfg = StoreConfig::file(drives.clone());
        if direct && let StoreMode::File { drives, block_size } = cfg.mode {
            cfg.mode = StoreMode::Direct { drives, block_size };
        }
        cfg
    };
    let store = Store::open(config()).unwrap_or_else(|e| panic!("open {device:?}: {e}"));
    for i in 0..20 {
        store.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    store.close().unwrap();
    drop(store);
    let store = Store::open(config()).unwrap();
    for i in 0..20 {
        let got = store.get(format!("k{i}").as_bytes()).unwrap();
        match got {
            Some(v) => assert!(
                *v == value(i)[..],
                "k{i} on {device:?} (direct: {direct}): other bytes"
            ),
            None => panic!(
                "k{i} on {device:?} (direct: {direct}): missing; {:?}",
                store.stats()
            ),
        }
    }
}

#[test]
fn file_and_direct_mode_serve_a_block_device() {
    let dir = TempDir::on_disk("loop");
    for direct in [false, true] {
        let backing = dir.path().join(format!("device-{direct}"));
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
        let Some(device) = Loop::attach(&backing) else {
            return;
        };
        round_trip(&device.0, direct);
    }
}
