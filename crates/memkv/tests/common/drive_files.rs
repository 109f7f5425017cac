//! Drive files and `memkv setup` runs for the setup tests.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh folder for drive files on a disk filesystem (O_DIRECT: not tmpfs).
pub fn scratch(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("setup-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A 64 MiB drive file (sparse: zeros).
pub fn drive(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    p
}

/// Writes `bytes` at `at` (a signature where a tool would look for it: a test double).
pub fn poke(path: &Path, at: u64, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, at)
        .unwrap();
}

pub fn peek(path: &Path, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, at)
        .unwrap();
    buf
}

/// Runs `memkv setup ARGS`.
pub fn setup(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("setup")
        .args(args)
        .output()
        .unwrap()
}

/// stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn memkv_superblock(path: &Path) -> bool {
    peek(path, 0, 8) == b"MEMKVSB\0"
}
