//! Small files: reading settings with a size limit that holds for any kind of file, and naming
//! the temporary file that is renamed or linked into place.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Reads the text of `path`, refusing it (`ErrorKind::InvalidData`, the message naming
/// `limit`) once more than `limit` bytes arrive. The limit is enforced on the read itself, not
/// on `metadata().len()`: that is 0 for pipes, FIFOs and devices (`MEMKV_CONFIG=<(...)`,
/// /dev/zero), which would otherwise be read without bound.
pub fn read_to_string_limited(path: &Path, limit: u64) -> io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the limit of {limit} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not valid UTF-8"))
}

/// A fresh name beside `path` (same directory, so a rename or link into place is atomic),
/// unique within this process and against other processes.
pub fn temp_path_for(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_at_the_limit_is_read_and_one_byte_more_is_refused() {
        let dir = std::env::temp_dir().join(format!("memkv-config-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, "x".repeat(16)).unwrap();
        assert_eq!(read_to_string_limited(&path, 16).unwrap().len(), 16);
        let err = read_to_string_limited(&path, 15).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("limit of 15 bytes"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_device_without_a_length_is_held_to_the_limit() {
        let err = read_to_string_limited(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(err.to_string().contains("limit of 1024 bytes"), "{err}");
    }
}
