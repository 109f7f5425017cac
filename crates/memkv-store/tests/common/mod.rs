//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod fault_drive;
pub mod rng;
pub mod versioned;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memkv_store::{DriveConfig, StoreConfig, StoreMode};

/// A scratch directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!(
            "memkv-store-{tag}-{}-{n}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    /// A scratch directory under the build's target directory, a disk filesystem even where
    /// the system temp dir is tmpfs (direct mode's O_DIRECT needs one).
    pub fn on_disk(tag: &str) -> Self {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let p = base.join(format!("memkv-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn file_config(dir: &TempDir, drives: usize, size: u64, block_size: u64) -> StoreConfig {
    let drives = (0..drives)
        .map(|i| DriveConfig {
            path: dir.path().join(format!("drive{i}")),
            size: Some(size),
        })
        .collect();
    let mut cfg = StoreConfig::file(drives);
    if let StoreMode::File { block_size: b, .. } = &mut cfg.mode {
        *b = block_size;
    }
    cfg
}

/// Direct mode over drive files in `dir` (which must be on a disk filesystem: O_DIRECT is
/// refused by tmpfs; see [`TempDir::on_disk`]).
pub fn direct_config(dir: &TempDir, drives: usize, size: u64, block_size: u64) -> StoreConfig {
    let mut cfg = file_config(dir, drives, size, block_size);
    if let StoreMode::File { drives, block_size } = cfg.mode {
        cfg.mode = StoreMode::Direct { drives, block_size };
    }
    cfg
}

fn drive_paths(cfg: &StoreConfig) -> Vec<PathBuf> {
    match cfg.mode.drives() {
        Some((drives, _)) => drives.iter().map(|d| d.path.clone()).collect(),
        None => vec![],
    }
}

/// Flips one byte of the first occurrence of `needle` in the drives' data (test double for
/// media corruption).
pub fn corrupt_value(cfg: &StoreConfig, needle: &[u8]) {
    for p in drive_paths(cfg) {
        let bytes = std::fs::read(&p).unwrap();
        // Skip the superblock and journal pages: only data extents start past 1 MiB.
        if let Some(pos) = bytes[1 << 20..]
            .windows(needle.len())
            .position(|w| w == needle)
        {
            let at = (pos + (1 << 20)) as u64;
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.write_all_at(&[bytes[at as usize] ^ 0xff], at).unwrap();
            return;
        }
    }
    panic!("value not found on any drive");
}

/// Rewrites drive 0's superblock version field as one newer than this build writes
/// (checksum left as is: the version must be refused before the checksum is looked at).
pub fn bump_format_version(cfg: &StoreConfig) {
    let p = &drive_paths(cfg)[0];
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(&(memkv_store::FILE_FORMAT_VERSION + 1).to_le_bytes(), 8)
        .unwrap();
}

/// Each drive's superblock format version.
pub fn format_versions(cfg: &StoreConfig) -> Vec<u32> {
    drive_paths(cfg)
        .iter()
        .map(|p| {
            let mut v = [0u8; 4];
            std::fs::File::open(p)
                .unwrap()
                .read_exact_at(&mut v, 8)
                .unwrap();
            u32::from_le_bytes(v)
        })
        .collect()
}

/// Rewrites every drive's superblock as `version`, checksum included (the superblock is 96
/// bytes: its last 8 are the xxh3 of the rest).
pub fn set_format_version(cfg: &StoreConfig, version: u32) {
    for p in drive_paths(cfg) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let mut sb = [0u8; 96];
        f.read_exact_at(&mut sb, 0).unwrap();
        sb[8..12].copy_from_slice(&version.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&sb[..88]);
        sb[88..].copy_from_slice(&sum.to_le_bytes());
        f.write_all_at(&sb, 0).unwrap();
    }
}
