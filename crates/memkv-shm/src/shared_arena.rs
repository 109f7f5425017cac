//! A client's mapping of a server's arena, and bounds-checked copies in and out of it.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use memmap2::{Advice, MmapOptions, MmapRaw};

/// Why a mapping or a copy was refused.
#[derive(Debug)]
pub enum MapError {
    Io(io::Error),
    /// The descriptor is smaller than the arena the server announced.
    TooShort {
        file: u64,
        announced: u64,
    },
    /// The descriptor's size is not sealed against shrinking: a copy into a mapping whose file
    /// shrank would kill this process (SIGBUS) instead of failing.
    NotSealed,
    /// A range the server named lies outside the arena.
    OutOfBounds {
        offset: u64,
        len: u64,
        arena: u64,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot map the server's arena: {e}"),
            Self::TooShort { file, announced } => write!(
                f,
                "the server's arena file holds {file} bytes, fewer than the {announced} announced"
            ),
            Self::NotSealed => write!(
                f,
                "the server's arena file is not sealed against shrinking (F_SEAL_SHRINK): not mapped"
            ),
            Self::OutOfBounds { offset, len, arena } => write!(
                f,
                "{len} bytes at arena offset {offset} lie outside the {arena}-byte arena"
            ),
        }
    }
}

impl std::error::Error for MapError {}

impl From<io::Error> for MapError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Largest arena in 4 KiB pages whose page tables a client fills when it maps it.
const POPULATE_MAX: u64 = 4 << 30;

/// A server's arena mapped into this process, shared with the server and its other local
/// clients. Which ranges may be touched, and when, is the protocol's business (a reservation
/// between Allocate and Commit, a pin between Lookup and Release); this type checks only that
/// each copy stays inside the mapping.
pub struct SharedArena {
    map: MmapRaw,
    len: u64,
}

impl fmt::Debug for SharedArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArena")
            .field("len", &self.len)
            .finish()
    }
}

/// Prefaults the page tables of `map`'s first `len` bytes, `POPULATE_STEP` at a time.
/// `MAP_POPULATE` did it in one go, holding the process's mmap lock throughout (a 1 GiB arena:
/// 0.1 s on a quiet machine, seconds on a busy one), and every mmap and munmap in the process
/// waited behind it: a large allocation, a freed buffer, so the client's own operations over
/// TCP stalled for the whole attach. Between steps they go on.
fn populate_in_steps(map: &MmapRaw, len: usize, page: usize) {
    // A step covers whole pages, hugepages included.
    let step = POPULATE_STEP.max(page);
    let mut offset = 0;
    while offset < len {
        let n = step.min(len - offset);
        if map.advise_range(Advice::PopulateWrite, offset, n).is_err() {
            // A kernel before 5.14 lacks it: pages then fault in as they are used.
            return;
        }
        offset += n;
    }
}

/// How much of an arena one prefault step covers: a few milliseconds of holding the lock.
const POPULATE_STEP: usize = 16 << 20;

impl SharedArena {
    /// Maps the first `announced` bytes of the arena file `fd`, read-write and shared.
    pub fn map(fd: OwnedFd, announced: u64) -> Result<SharedArena, MapError> {
        let file = File::from(fd);
        // Every bounds check below rests on the size staying put.
        let sealed = rustix::fs::fcntl_get_seals(&file)
            .is_ok_and(|seals| seals.contains(rustix::fs::SealFlags::SHRINK));
        if !sealed {
            return Err(MapError::NotSealed);
        }
        let size = file.metadata()?.len();
        if size < announced || announced == 0 {
            return Err(MapError::TooShort {
                file: size,
                announced,
            });
        }
        let len = usize::try_from(announced).map_err(|_| MapError::TooShort {
            file: size,
            announced,
        })?;
        // Prefault the page tables of a small arena (or one in hugepages) now: otherwise every
        // first copy into or out of a page takes a fault, which a short-lived engine keeps
        // paying. A large arena in 4 KiB pages would cost page tables (0.2 % of its size) and
        // seconds here, so it is left to fault in as it is used. So is an arena whose server
        // has not allocated all of it (`memory.prefault: false`): prefaulting would allocate
        // the rest, charged to this process's memory cgroup (an engine's container limit).
        let meta = file.metadata()?;
        let page = std::os::unix::fs::MetadataExt::blksize(&meta);
        let allocated = std::os::unix::fs::MetadataExt::blocks(&meta).saturating_mul(512);
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        if allocated >= announced && (announced <= POPULATE_MAX || page >= 2 << 20) {
            populate_in_steps(&map, len, page as usize);
        }
        Ok(SharedArena {
            map,
            len: announced,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true: a mapping holds at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MapError> {
        let out = || MapError::OutOfBounds {
            offset,
            len: len as u64,
            arena: self.len,
        };
        let end = offset.checked_add(len as u64).ok_or_else(out)?;
        if end > self.len {
            return Err(out());
        }
        Ok(offset as usize)
    }

    /// Copies `src` to `offset` and returns its xxh3-64, hashed in the same pass.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<u64, MapError> {
        let start = self.check(offset, src.len())?;
        if src.is_empty() {
            return Ok(memkv_checksum::xxh3(src));
        }
        // SAFETY: `check` keeps [start, start + len) inside the live mapping, which `self`
        // owns for as long as the slice lives. The range is a reservation the server gave
        // this client (Allocate): until Commit or Abort nobody else reads or writes it, so the
        // slice aliases no other reference, in this process or (by the protocol) in another.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(start), src.len()) };
        Ok(memkv_checksum::copy_and_xxh3(dst, src))
    }

    /// Copies the bytes at `offset` into `dst` (all of it) and returns the xxh3-64 of what was
    /// copied, so a check against the stored checksum covers exactly the caller's bytes.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<u64, MapError> {
        let start = self.check(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(memkv_checksum::xxh3(dst));
        }
        // SAFETY: in bounds as in `write`. The range holds a committed value pinned for this
        // client (Lookup): the server neither frees nor rewrites it until Release. A client
        // that outlives its pin's lease may find it rewritten by another process; the copy
        // reads each byte once and returns the hash of what it read, which the caller checks.
        let src = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), dst.len()) };
        Ok(memkv_checksum::copy_and_xxh3(dst, src))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn arena(len: u64) -> (File, SharedArena) {
        let file = crate::arena_file::create("memkv-test", len, None).unwrap();
        let fd = file.as_fd().try_clone_to_owned().unwrap();
        (file, SharedArena::map(fd, len).unwrap())
    }

    fn allocated_bytes(file: &File) -> u64 {
        std::os::unix::fs::MetadataExt::blocks(&file.metadata().unwrap()) * 512
    }

    #[test]
    fn mapping_allocates_none_of_an_arena_its_server_left_unallocated() {
        // A server with `memory.prefault: false`: prefaulting it here would allocate the whole
        // arena, charged to the client's memory cgroup.
        let (file, a) = arena(8 << 20);
        assert_eq!(allocated_bytes(&file), 0);
        a.write(0, &[1u8; 4096]).unwrap();
        // A 4 KiB page, or a 2 MiB one where shmem gets transparent hugepages.
        let allocated = allocated_bytes(&file);
        assert!(
            (4096..=2 << 20).contains(&allocated),
            "{allocated} bytes allocated"
        );
    }

    #[test]
    fn an_arena_its_server_allocated_is_mapped_and_used_as_before() {
        let file = crate::arena_file::create("memkv-test", 8 << 20, None).unwrap();
        // The server's prefault, as MADV_POPULATE_WRITE or first writes leave it.
        rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, 8 << 20).unwrap();
        assert_eq!(allocated_bytes(&file), 8 << 20);
        let a = SharedArena::map(file.as_fd().try_clone_to_owned().unwrap(), 8 << 20).unwrap();
        let mut back = [7u8; 64];
        a.read(4 << 20, &mut back).unwrap();
        assert_eq!(back, [0u8; 64]);
        assert_eq!(allocated_bytes(&file), 8 << 20);
    }

    #[test]
    fn bytes_written_by_one_mapping_are_read_by_another() {
        let (file, a) = arena(1 << 20);
        let b = SharedArena::map(file.as_fd().try_clone_to_owned().unwrap(), 1 << 20).unwrap();
        let value: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let sum = a.write(4096, &value).unwrap();
        assert_eq!(sum, memkv_checksum::xxh3(&value));
        let mut back = vec![0u8; value.len()];
        assert_eq!(b.read(4096, &mut back).unwrap(), sum);
        assert_eq!(back, value);
    }

    #[test]
    fn ranges_outside_the_arena_are_refused() {
        let (_file, a) = arena(1 << 20);
        let err = a.write((1 << 20) - 10, &[0u8; 11]).unwrap_err();
        assert!(matches!(err, MapError::OutOfBounds { .. }), "{err}");
        let err = a.read(u64::MAX, &mut [0u8; 1]).unwrap_err();
        assert!(
            err.to_string().contains("outside the 1048576-byte arena"),
            "{err}"
        );
        assert!(
            a.read(1 << 20, &mut []).is_ok(),
            "an empty range at the end is inside"
        );
    }

    #[test]
    fn a_file_shorter_than_announced_is_refused() {
        let file = crate::arena_file::create("memkv-test", 4096, None).unwrap();
        let err = SharedArena::map(file.as_fd().try_clone_to_owned().unwrap(), 8192).unwrap_err();
        assert!(
            err.to_string().contains("fewer than the 8192 announced"),
            "{err}"
        );
    }

    /// A range rewritten by another process while it is copied out (a pin whose lease ran out,
    /// its space reused) must never pass the checksum check with other bytes than the ones
    /// hashed: the checksum returned is that of the bytes the caller got. It used to hash a
    /// second read of the arena for values up to 240 bytes and for the last 1 to 1024 bytes of
    /// longer ones, so the caller could get one value's bytes under another's checksum.
    #[test]
    fn a_range_rewritten_during_a_read_never_passes_with_other_bytes() {
        for len in [200usize, 4096 + 100] {
            let (file, writer) = arena(1 << 20);
            let reader =
                SharedArena::map(file.as_fd().try_clone_to_owned().unwrap(), 1 << 20).unwrap();
            // Two values that differ only in their last bytes, as one rewritten in place.
            let a = vec![0x11u8; len];
            let mut b = a.clone();
            b[len - 50..].fill(0x22);
            let (sum_a, sum_b) = (memkv_checksum::xxh3(&a), memkv_checksum::xxh3(&b));
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        writer.write(0, &a).unwrap();
                        writer.write(0, &b).unwrap();
                    }
                });
                let mut dst = vec![0u8; len];
                let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
                let mut wrong = 0u64;
                while std::time::Instant::now() < until {
                    let sum = reader.read(0, &mut dst).unwrap();
                    if (sum == sum_a && dst != a) || (sum == sum_b && dst != b) {
                        wrong += 1;
                    }
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                assert_eq!(
                    wrong, 0,
                    "{len}-byte reads passed their checksum with other bytes"
                );
            });
        }
    }

    /// A file that could shrink under the mapping would turn a later in-bounds copy into a
    /// SIGBUS that kills the client: such a file is not mapped.
    #[test]
    fn a_file_whose_size_is_not_sealed_is_refused() {
        let fd = rustix::fs::memfd_create("memkv-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 1 << 20).unwrap();
        let err = SharedArena::map(fd, 1 << 20).unwrap_err();
        assert!(matches!(err, MapError::NotSealed), "{err}");
    }
}
