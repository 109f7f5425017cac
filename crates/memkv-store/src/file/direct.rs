//! Direct mode's drives: a block device (or, for tests and trials, a regular file) opened with
//! O_DIRECT, read and written through io_uring with registered, aligned buffers
//! ([`DirectRing`]). Nothing goes through the page cache, so what a sync acknowledges is on the
//! device, and a read costs one DMA and one copy (hashed in the same pass).
//!
//! Callers address bytes, as with file drives; requests are cut into aligned pieces of at most
//! one buffer, up to [`BUFFERS`] of them in flight. A write that starts or ends inside a 4 KiB
//! sector first reads that sector (values own whole extents and the journal has one writer, so
//! nobody else writes the same sector meanwhile).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::io::ExtentIo;
use crate::arena::{BufferLease, DIRECT_ALIGN, DirectRing, Direction, InFlight, IncrementalXxh3};

/// Registered buffers per drive: the most requests in flight on one drive.
pub(crate) const BUFFERS: usize = 32;
/// Bytes per buffer, so one request moves at most this much.
pub(crate) const BUFFER_SIZE: usize = 1 << 20;

/// Buffers a drive keeps for its own reads and writes: leases handed out to be filled from a
/// socket ([`ExtentIo::try_lease`]) never take the last half.
const LEASE_RESERVE: usize = BUFFERS / 2;

const ALIGN: u64 = DIRECT_ALIGN as u64;

pub(crate) struct DirectDrive {
    file: File,
    block_device: bool,
    ring: DirectRing,
    path: PathBuf,
    len: u64,
}

impl DirectDrive {
    /// Opens `path` with O_DIRECT. A block device keeps its size (`size`, when given, must not
    /// exceed it); a regular file is created or grown as in file mode. The usable length is
    /// rounded down to whole 4 KiB sectors.
    pub fn open(path: &Path, size: Option<u64>, default_size: u64) -> io::Result<Self> {
        check_kind(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(!is_block_device(path))
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| refine_open_error(path, e))?;
        let len = super::io::drive_len(&file, size, default_size)?;
        let ring = DirectRing::new(&file, BUFFERS, BUFFER_SIZE)?;
        let block_device = file.metadata()?.file_type().is_block_device();
        Ok(DirectDrive {
            file,
            block_device,
            ring,
            path: path.to_owned(),
            len: len / ALIGN * ALIGN,
        })
    }

    fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: {len} bytes at {offset} run past the drive's {} bytes",
                    self.path.display(),
                    self.len
                ),
            ));
        }
        Ok(())
    }

    /// A buffer for the next request: at once when one is free, else (with nothing of ours in
    /// flight) by waiting for one. `None`: wait for one of ours first. Never blocking while we
    /// hold buffers is what keeps concurrent callers from starving each other of buffers.
    fn next_buffer(&self, ours_in_flight: usize) -> Option<BufferLease> {
        if ours_in_flight == 0 {
            Some(self.ring.acquire())
        } else if ours_in_flight < BUFFERS / 2 {
            self.ring.try_acquire()
        } else {
            None
        }
    }

    /// Reads `[offset, offset + len)` in aligned pieces, several in flight, handing each piece's
    /// wanted bytes to `sink` in order (`sink(position in the range, bytes)`).
    fn read_pieces(
        &self,
        offset: u64,
        len: usize,
        mut sink: impl FnMut(usize, &[u8]),
    ) -> io::Result<()> {
        self.check_range(offset, len)?;
        let mut pieces = aligned_pieces(offset, len, self.ring.buffer_size())
            .into_iter()
            .peekable();
        let mut queue: VecDeque<(Piece, InFlight)> = VecDeque::new();
        loop {
            while pieces.peek().is_some() {
                let Some(lease) = self.next_buffer(queue.len()) else {
                    break;
                };
                let p = pieces.next().expect("peeked");
                let flight = self
                    .ring
                    .submit(lease, Direction::Read, p.start, p.len, 0)?;
                queue.push_back((p, flight));
            }
            let Some((p, flight)) = queue.pop_front() else {
                return Ok(());
            };
            let lease = flight.wait()?;
            sink(p.at, &lease.bytes()[p.skip..p.skip + p.take]);
        }
    }

    /// Fills the sector at `buffer_at` of `lease` with the drive's sector at `at`.
    fn read_sector(
        &self,
        lease: BufferLease,
        at: u64,
        buffer_at: usize,
    ) -> io::Result<BufferLease> {
        self.ring
            .submit(lease, Direction::Read, at, DIRECT_ALIGN, buffer_at)?
            .wait()
    }
}

impl ExtentIo for DirectDrive {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_pieces(offset, buf.len(), |at, bytes| {
            buf[at..at + bytes.len()].copy_from_slice(bytes)
        })
    }

    fn read_hashed_at(
        &self,
        offset: u64,
        value: &mut [u8],
        range: Range<usize>,
        hash: &mut IncrementalXxh3,
    ) -> io::Result<bool> {
        let start = range.start;
        self.read_pieces(offset, range.len(), |at, bytes| {
            hash.copy_in(value, start + at, bytes)
        })?;
        Ok(true)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check_range(offset, data.len())?;
        let mut flights: VecDeque<InFlight> = VecDeque::new();
        for p in aligned_pieces(offset, data.len(), self.ring.buffer_size()) {
            let mut lease = loop {
                match self.next_buffer(flights.len()) {
                    Some(lease) => break lease,
                    None => drop(flights.pop_front().expect("ours in flight").wait()?),
                }
            };
            let piece_end = p.start + p.len as u64;
            if p.skip > 0 {
                lease = self.read_sector(lease, p.start, 0)?;
            }
            let tail_partial = p.skip + p.take < p.len;
            if tail_partial && !(p.skip > 0 && p.len == DIRECT_ALIGN) {
                lease = self.read_sector(lease, piece_end - ALIGN, p.len - DIRECT_ALIGN)?;
            }
            lease.bytes_mut()[p.skip..p.skip + p.take].copy_from_slice(&data[p.at..p.at + p.take]);
            flights.push_back(
                self.ring
                    .submit(lease, Direction::Write, p.start, p.len, 0)?,
            );
        }
        for f in flights {
            f.wait()?;
        }
        Ok(())
    }

    fn try_lease(&self) -> Option<BufferLease> {
        self.ring.try_acquire_keeping(LEASE_RESERVE)
    }

    fn write_leased(&self, lease: BufferLease, offset: u64, len: usize) -> io::Result<InFlight> {
        self.check_range(offset, len)?;
        self.ring.submit(lease, Direction::Write, offset, len, 0)
    }

    fn read_leased(&self, lease: BufferLease, offset: u64, len: usize) -> io::Result<InFlight> {
        self.check_range(offset, len)?;
        self.ring.submit(lease, Direction::Read, offset, len, 0)
    }

    fn sync(&self) -> io::Result<()> {
        // O_DIRECT writes bypass the page cache but may sit in the device's volatile cache.
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        // Extents are whole sectors, and nothing is in flight on a freed extent.
        crate::arena::discard_range(&self.file, self.block_device, offset, len)
    }
}

/// An aligned run of the drive and which of its bytes the caller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    /// Aligned drive offset and length of the I/O.
    start: u64,
    len: usize,
    /// Bytes of the I/O before the wanted ones, and how many are wanted.
    skip: usize,
    take: usize,
    /// Where the wanted bytes sit in the caller's range.
    at: usize,
}

/// Cuts `[offset, offset + len)` into aligned I/Os of at most `max` bytes.
fn aligned_pieces(offset: u64, len: usize, max: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    let end = offset + len as u64;
    let mut start = offset / ALIGN * ALIGN;
    while start < end {
        let io_end = (start + max as u64).min(end.div_ceil(ALIGN) * ALIGN);
        let want_from = offset.max(start);
        let want_to = end.min(io_end);
        out.push(Piece {
            start,
            len: (io_end - start) as usize,
            skip: (want_from - start) as usize,
            take: (want_to - want_from) as usize,
            at: (want_from - offset) as usize,
        });
        start = io_end;
    }
    out
}

fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Refuses, by what it is, a path that is neither a block device nor a regular file (nor
/// missing, to be created): opening a character device such as `/dev/null` with O_DIRECT fails
/// with an error that would blame the filesystem.
fn check_kind(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = meta.file_type();
    let what = if kind.is_char_device() {
        "a character device"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_socket() {
        "a socket"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}: a direct-mode drive is a block device or a regular file",
            path.display()
        ),
    ))
}

fn refine_open_error(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::EINVAL) {
        return io::Error::new(
            e.kind(),
            format!(
                "{}: the filesystem refuses O_DIRECT (tmpfs does): put direct-mode drive files on a disk filesystem, or use storage.mode file",
                path.display()
            ),
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_character_device_is_refused_by_what_it_is() {
        let err = DirectDrive::open(Path::new("/dev/null"), None, 1 << 20)
            .err()
            .expect("/dev/null is no drive");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            err.to_string(),
            "/dev/null is a character device: a direct-mode drive is a block device or a regular file"
        );
    }

    #[test]
    fn pieces_cover_unaligned_ranges_exactly() {
        let p = aligned_pieces(100, 10, 1 << 20);
        assert_eq!(
            p,
            vec![Piece {
                start: 0,
                len: 4096,
                skip: 100,
                take: 10,
                at: 0
            }]
        );
        let p = aligned_pieces(4096, 8192, 4096);
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|x| x.skip == 0 && x.take == 4096));
    }

    proptest! {
        #[test]
        fn pieces_tile_the_range(offset in 0u64..1 << 24, len in 1usize..3 << 20, max_pages in 1usize..300) {
            let max = max_pages * DIRECT_ALIGN;
            let pieces = aligned_pieces(offset, len, max);
            let mut covered = 0;
            for p in &pieces {
                prop_assert_eq!(p.start % ALIGN, 0);
                prop_assert_eq!(p.len % DIRECT_ALIGN, 0);
                prop_assert!(p.len <= max);
                prop_assert!(p.skip + p.take <= p.len);
                prop_assert_eq!(p.at, covered);
                prop_assert_eq!(p.start + p.skip as u64, offset + covered as u64);
                covered += p.take;
            }
            prop_assert_eq!(covered, len);
        }
    }

    fn scratch(name: &str) -> PathBuf {
        // O_DIRECT needs a disk filesystem: the build's target directory is one even where /tmp
        // is tmpfs.
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp/direct-drive");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn unaligned_writes_and_reads_round_trip_and_keep_neighbours() {
        let path = scratch("roundtrip");
        let drive = DirectDrive::open(&path, Some(8 << 20), 0).unwrap();
        let base: Vec<u8> = (0..(6 << 20)).map(|i| (i % 251) as u8).collect();
        drive.write_at(0, &base).unwrap();
        let patch: Vec<u8> = (0..(2 << 20) + 123)
            .map(|i| (i % 13) as u8 ^ 0x5a)
            .collect();
        drive.write_at(4095, &patch).unwrap();
        let mut expect = base.clone();
        expect[4095..4095 + patch.len()].copy_from_slice(&patch);
        let mut got = vec![0u8; base.len()];
        drive.read_at(0, &mut got).unwrap();
        assert!(got == expect, "bytes differ after an unaligned write");
        let mut small = [0u8; 7];
        drive.read_at(4093, &mut small).unwrap();
        assert_eq!(&small[..], &expect[4093..4100]);
        drive.sync().unwrap();
        let mut hashed = vec![0u8; 300_000];
        let mut h = IncrementalXxh3::new(hashed.len());
        assert!(
            drive
                .read_hashed_at(10, &mut hashed, 0..300_000, &mut h)
                .unwrap()
        );
        assert_eq!(
            h.finish(&hashed),
            xxhash_rust::xxh3::xxh3_64(&expect[10..300_010])
        );
        let err = drive.read_at((8 << 20) - 2, &mut small).unwrap_err();
        assert!(err.to_string().contains("run past"), "{err}");
        std::fs::remove_file(path).unwrap();
    }
}
