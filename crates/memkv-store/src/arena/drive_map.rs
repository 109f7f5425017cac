//! Read-only shared mappings of file-mode drive files, so that a read copies and hashes a
//! value straight out of the page cache in one pass (`pread` would copy it and a second pass
//! would hash it).
//!
//! A file mapping turns I/O failures into SIGBUS on access: a page past the end of a file that
//! someone truncated, or one that cannot be read back from the device. So the first read of a
//! range populates it with MADV_POPULATE_READ (Linux 5.14+), which reports those cases as an
//! error and faults the pages in bulk (far cheaper than a fault per page). Populating costs a
//! page-table walk per 4 KiB page even when everything is mapped already (about as long as
//! copying the page), so it is done once per 64 KiB chunk: a read populates the whole chunks
//! its range overlaps (they lie inside the value's own extents, which start on chunk
//! boundaries), a bitmap remembers them, and later reads copy straight away. On kernels without
//! MADV_POPULATE_READ the mapping is never read and reads go through `pread`.
//!
//! What is left to SIGBUS, as with any mapped-file store: another process truncating a drive
//! file (drive files belong to the store, which sizes the mapping to the file at open and only
//! ever grows files), or the device failing to read back a page that the kernel reclaimed after
//! it was populated.
//!
//! Costs of the mapping: address space for the whole drive (where mapping fails, `pread` is
//! used), page tables for the pages read through it (8 bytes per 4 KiB) and a bit per 64 KiB.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memmap2::{Advice, MmapOptions, MmapRaw};

use super::IncrementalXxh3;

/// Granule of the "already populated" bitmap (the smallest file-mode block size, so extents
/// start on chunk boundaries).
const CHUNK: usize = 64 << 10;

pub(crate) struct DriveMap {
    map: MmapRaw,
    /// Cleared when the kernel lacks MADV_POPULATE_READ; reads then fall back to `pread`.
    populate_works: AtomicBool,
    /// One bit per chunk that a read has populated whole.
    populated: Box<[AtomicU64]>,
}

impl DriveMap {
    /// Maps the first `len` bytes of `file`, or `None` (with a debug log) when that is not
    /// possible; the drive is then read with `pread` only.
    pub fn new(file: &File, len: u64) -> Option<Self> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        match MmapOptions::new().len(len).map_raw_read_only(file) {
            Ok(map) => Some(Self {
                map,
                populate_works: AtomicBool::new(true),
                populated: (0..len.div_ceil(CHUNK).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }),
            Err(e) => {
                tracing::debug!(error = %e, len, "drive file not mapped; reads use pread");
                None
            }
        }
    }

    fn is_populated(&self, chunk: usize) -> bool {
        self.populated[chunk / 64].load(Ordering::Relaxed) & (1 << (chunk % 64)) != 0
    }

    fn mark_populated(&self, chunks: Range<usize>) {
        for c in chunks {
            self.populated[c / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
        }
    }

    /// Populates the chunks overlapping `[start, end)` that are not known to be populated.
    /// `Ok(false)`: the kernel cannot.
    fn populate(&self, start: usize, end: usize) -> io::Result<bool> {
        let chunks = start / CHUNK..end.div_ceil(CHUNK);
        let mut c = chunks.start;
        while c < chunks.end {
            if self.is_populated(c) {
                c += 1;
                continue;
            }
            // One call for the run of chunks up to the next populated one.
            let mut run_end = c + 1;
            while run_end < chunks.end && !self.is_populated(run_end) {
                run_end += 1;
            }
            let from = c * CHUNK;
            let to = (run_end * CHUNK).min(self.map.len());
            match self.map.advise_range(Advice::PopulateRead, from, to - from) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::info!("MADV_POPULATE_READ unsupported; file-mode reads use pread");
                    self.populate_works.store(false, Ordering::Relaxed);
                    return Ok(false);
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("drive bytes {from}..{to} unreadable: {e}"),
                    ));
                }
            }
            self.mark_populated(c..run_end);
            c = run_end;
        }
        Ok(true)
    }

    /// Copies the drive bytes at `offset` into `value[range]`, feeding them to `hash` in the
    /// same pass. `Ok(false)`: the mapping cannot be used (nothing was copied); read with
    /// `pread` instead.
    pub fn copy_hashed(
        &self,
        offset: u64,
        value: &mut [u8],
        range: Range<usize>,
        hash: &mut IncrementalXxh3,
    ) -> io::Result<bool> {
        if !self.populate_works.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let n = range.len();
        let start = usize::try_from(offset)
            .ok()
            .filter(|s| s.checked_add(n).is_some_and(|end| end <= self.map.len()))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "read of {n} bytes at {offset} exceeds the drive's {} bytes",
                        self.map.len()
                    ),
                )
            })?;
        if n == 0 {
            return Ok(true);
        }
        if !self.populate(start, start + n)? {
            return Ok(false);
        }
        // SAFETY: `start + n <= self.map.len()` (checked above), so the range lies inside the
        // live mapping, which `self` owns and keeps alive for this borrow. Its pages have been
        // populated from the file, so access does not fault with SIGBUS short of the cases in
        // the module notes. The store writes a drive's bytes only into extents nobody reads:
        // the caller holds the value whose extents these are, and extents are reused only
        // after their last holder drops, so nothing the store does changes these bytes while
        // the slice lives.
        let src = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), n) };
        hash.copy_in(value, range.start, src);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    #[test]
    fn copies_and_hashes_what_pwrite_wrote() {
        let dir = std::env::temp_dir().join(format!("memkv-drive-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("drive");
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let len = 3 << 20;
        file.set_len(len).unwrap();
        let map = DriveMap::new(&file, len).unwrap();
        let data: Vec<u8> = (0..2_500_000u32).map(|i| (i * 7 % 253) as u8).collect();
        file.write_all_at(&data, 4096).unwrap();

        let mut value = vec![0; data.len() + 100];
        let mut hash = IncrementalXxh3::new(value.len());
        value[..100].fill(9);
        hash.advance(&value[..100]);
        let r = 100..value.len();
        if !map.copy_hashed(4096, &mut value, r, &mut hash).unwrap() {
            // Kernel before 5.14: the mapping is never read (the pread path is tested elsewhere).
            assert!(value[100..].iter().all(|&b| b == 0), "nothing copied");
            return;
        }
        assert_eq!(&value[100..], &data[..]);
        assert_eq!(hash.finish(&value), xxhash_rust::xxh3::xxh3_64(&value));
        // The chunks the read overlapped are remembered, no others.
        let last = (4096 + data.len()) / CHUNK;
        assert!((0..=last).all(|c| map.is_populated(c)));
        assert!(!map.is_populated(last + 1));

        // Rewritten bytes show through the mapping (one page cache).
        file.write_all_at(&[1, 2, 3], 4096).unwrap();
        let mut small = vec![0; 3];
        let mut hash = IncrementalXxh3::new(3);
        assert!(map.copy_hashed(4096, &mut small, 0..3, &mut hash).unwrap());
        assert_eq!(small, [1, 2, 3]);

        let mut hash = IncrementalXxh3::new(10);
        let past_end = map.copy_hashed(len - 5, &mut [0; 10], 0..10, &mut hash);
        assert_eq!(past_end.unwrap_err().kind(), io::ErrorKind::InvalidInput);

        // Truncated behind the store's back: reading a range not yet populated is an error,
        // not SIGBUS (the drive's last chunk was never read).
        file.set_len(1 << 20).unwrap();
        let mut hash = IncrementalXxh3::new(8192);
        let gone = map.copy_hashed(len - 8192, &mut [0; 8192], 0..8192, &mut hash);
        assert!(gone.is_err(), "{gone:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
