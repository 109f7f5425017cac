//! Telling a drive that a byte range holds nothing any more, so it can reclaim the space:
//! `BLKDISCARD` on a block device (an SSD then knows the blocks are free, which keeps its
//! write amplification down), a punched hole on a regular file (its blocks go back to the
//! filesystem; the file keeps its size and the range reads as zeros).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `_IO(0x12, 119)`: discard a `[start, length]` byte range of a block device.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// Discards `len` bytes at `offset` of `file`, a block device when `block_device`.
pub(crate) fn discard_range(
    file: &File,
    block_device: bool,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let fd = file.as_raw_fd();
    let done = if block_device {
        let range: [u64; 2] = [offset, len];
        // SAFETY: BLKDISCARD reads two u64 (start, length) from the pointer, which points at
        // `range`, alive for the call; `fd` is open for as long as `file` is borrowed.
        unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) }
    } else {
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("discard range {offset}+{len} exceeds off_t"),
            ));
        };
        // SAFETY: fallocate takes plain integers; `fd` is open for as long as `file` is
        // borrowed. KEEP_SIZE with PUNCH_HOLE leaves the file's length alone.
        unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
        }
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

    #[test]
    fn a_punched_hole_gives_the_blocks_back_and_reads_as_zeros() {
        let path = std::env::temp_dir().join(format!("memkv-discard-{}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all_at(&vec![7u8; 4 << 20], 0).unwrap();
        file.sync_all().unwrap();
        let before = file.metadata().unwrap().blocks();
        match discard_range(&file, false, 1 << 20, 2 << 20) {
            Ok(()) => {}
            // A filesystem without hole punching (some network filesystems): nothing to check.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return,
            Err(e) => panic!("{e}"),
        }
        let after = file.metadata().unwrap().blocks();
        assert!(
            after + (2 << 20) / 512 <= before,
            "{before} -> {after} blocks"
        );
        assert_eq!(file.metadata().unwrap().len(), 4 << 20, "the size stays");
        let mut buf = vec![1u8; 4096];
        file.read_exact_at(&mut buf, 1 << 20).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        file.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        let _ = std::fs::remove_file(&path);
    }
}
