//! Set-up shared by the store benches: the scratch directory, the payload, and a file-mode
//! store with a plain file beside it to compare against.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use memkv_store::{DriveConfig, Store, StoreConfig, StoreMode};

/// `MEMKV_BENCH_DIR` (default: the system temp dir) / `memkv-store-{tag}-{pid}`, created.
pub fn bench_dir(tag: &str) -> PathBuf {
    let base = std::env::var_os("MEMKV_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("memkv-store-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `len` bytes of a fixed, non-trivial pattern.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

/// A file-mode store on one 1 GiB drive with 4 MiB extents in `dir`, and a 64 MiB plain file
/// beside it for the `pwrite` / `pread` baseline.
pub fn file_store_and_plain(dir: &std::path::Path) -> (Store, File) {
    let mut cfg = StoreConfig::file(vec![DriveConfig {
        path: dir.join("drive0"),
        size: Some(1 << 30),
    }]);
    if let StoreMode::File { block_size, .. } = &mut cfg.mode {
        *block_size = 4 << 20;
    }
    let store = Store::open(cfg).unwrap();
    let plain = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("plain"))
        .unwrap();
    plain.set_len(64 << 20).unwrap();
    (store, plain)
}
