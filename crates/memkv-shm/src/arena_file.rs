//! The memfd behind a shareable arena.

use std::fs::File;
use std::io;

use rustix::fs::{MemfdFlags, SealFlags};

/// A memfd of `len` bytes, its size sealed. `huge_page`: back it with explicit hugepages of
/// that size (the caller checked enough are free; `len` must be a multiple).
///
/// The seals matter: a client holding the descriptor could otherwise shrink the file under
/// the server's mapping, and the server would die of SIGBUS on its next access.
pub fn create(name: &str, len: u64, huge_page: Option<u64>) -> io::Result<File> {
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    if let Some(page) = huge_page {
        flags |= MemfdFlags::HUGETLB | huge_page_flag(page)?;
    }
    let fd = rustix::fs::memfd_create(name, flags)?;
    rustix::fs::ftruncate(&fd, len)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(File::from(fd))
}

fn huge_page_flag(page: u64) -> io::Result<MemfdFlags> {
    Ok(match page {
        p if p == 2 << 20 => MemfdFlags::HUGE_2MB,
        p if p == 1 << 30 => MemfdFlags::HUGE_1GB,
        p => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("hugepage size {p} is neither 2 MiB nor 1 GiB"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_cannot_shrink() {
        let file = create("memkv-test", 1 << 20, None).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 20);
        let err = file.set_len(4096).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc_eperm()));
        assert!(file.set_len(2 << 20).is_err(), "growing is sealed too");
    }

    fn libc_eperm() -> i32 {
        rustix::io::Errno::PERM.raw_os_error()
    }
}
