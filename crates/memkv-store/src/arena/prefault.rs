//! Populating the arena's pages up front, so that first writes into it (puts, RDMA WRITEs into
//! reservations) do not take a page fault and zero a page each on the data path.
//!
//! MADV_POPULATE_WRITE (Linux 5.14+) faults the pages in writable without touching their
//! contents, so it is safe while the store serves: a page already in use is left as it is. On
//! older kernels (EINVAL) each page gets one atomic `fetch_add(0)` on a byte instead: an
//! indivisible read-modify-write that stores back the value it read, so a concurrent writer's
//! store to that byte is never lost.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use memmap2::Advice;

use super::{ArenaBacking, HUGE_2M, MemoryArena};

/// Most threads [`crate::Store::prefault`] accepts.
pub const MAX_PREFAULT_THREADS: usize = 256;

/// How the pages were populated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefaultMethod {
    /// `madvise(MADV_POPULATE_WRITE)`.
    PopulateWrite,
    /// One atomic read-modify-write of a byte per page (kernels before 5.14).
    Touch,
    /// Nothing to populate (file mode has no arena).
    NotNeeded,
}

/// What a prefault did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefaultReport {
    /// Arena bytes now backed by memory (the whole arena; pages already present count too).
    pub bytes: u64,
    pub elapsed: Duration,
    /// Threads that did the work (at most the number asked for).
    pub threads: usize,
    pub method: PrefaultMethod,
}

/// Bytes per `madvise` call, so one call never runs for long.
const STEP: usize = 1 << 30;

impl MemoryArena {
    /// Populates every page of the arena, split over up to `threads` threads
    /// (`1..=MAX_PREFAULT_THREADS`, checked by the caller).
    pub fn prefault(&self, threads: usize) -> io::Result<PrefaultReport> {
        let started = Instant::now();
        // Split on hugepage boundaries so no huge page is shared between two threads.
        let align = match self.backing {
            ArenaBacking::ExplicitHugepages { page_size } => page_size as usize,
            _ => HUGE_2M as usize,
        };
        let units = self.len.div_ceil(align);
        let per_part_units = units.div_ceil(threads.clamp(1, units.max(1))).max(1);
        // Rounding up can leave the last threads nothing: only as many as have a part.
        let parts = units.div_ceil(per_part_units).max(1);
        let per_part = per_part_units * align;
        let results: Vec<io::Result<PrefaultMethod>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..parts)
                .map(|i| {
                    let start = (i * per_part).min(self.len);
                    let end = ((i + 1) * per_part).min(self.len);
                    s.spawn(move || self.populate(start, end))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("prefault thread panicked"))
                .collect()
        });
        let mut method = PrefaultMethod::PopulateWrite;
        for r in results {
            if r? == PrefaultMethod::Touch {
                method = PrefaultMethod::Touch;
            }
        }
        Ok(PrefaultReport {
            bytes: self.len as u64,
            elapsed: started.elapsed(),
            threads: parts,
            method,
        })
    }

    fn populate(&self, start: usize, end: usize) -> io::Result<PrefaultMethod> {
        let mut at = start;
        while at < end {
            let n = (end - at).min(STEP);
            match self.map.advise_range(Advice::PopulateWrite, at, n) {
                Ok(()) => at += n,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.touch(at, end);
                    return Ok(PrefaultMethod::Touch);
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("populating arena bytes {at}..{}: {e}", at + n),
                    ));
                }
            }
        }
        Ok(PrefaultMethod::PopulateWrite)
    }

    /// Faults in `[start, end)` by an atomic `fetch_add(0)` on one byte of every page.
    pub(super) fn touch(&self, start: usize, end: usize) {
        let stride = match self.backing {
            ArenaBacking::ExplicitHugepages { page_size } => page_size as usize,
            _ => page_size(),
        };
        let base = self.map.as_mut_ptr();
        let mut at = start;
        while at < end {
            // SAFETY: `at < end <= self.len`, so the byte lies inside the live mapping, which
            // `self` keeps alive for this call; a `u8` is always aligned. Other threads (and
            // remote RDMA writers) may write this byte concurrently without atomics; mixing
            // such accesses is outside Rust's memory model, as for the arena's remote writers
            // already, but on the hardware an atomic read-modify-write is indivisible against
            // any other store, so adding 0 keeps whatever value the byte holds and loses no
            // concurrent write.
            let byte = unsafe { AtomicU8::from_ptr(base.add(at)) };
            // The compiler turns a visible `fetch_add(0)` into a plain load, which faults in
            // the shared zero page rather than a page of our own; hide the operand.
            byte.fetch_add(std::hint::black_box(0), Ordering::Relaxed);
            at += stride;
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::arena::ArenaBlock;

    /// Pages of `[start, end)` of the arena that are resident, by mincore(2).
    fn resident_pages(arena: &MemoryArena, start: usize, end: usize) -> usize {
        let page = page_size();
        let mut vec = vec![0u8; (end - start).div_ceil(page)];
        // SAFETY: the range lies inside the live mapping (page-aligned: `start` is a multiple
        // of the page size in every caller) and `vec` has one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                arena.map.as_mut_ptr().add(start).cast(),
                end - start,
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        vec.iter().filter(|&&v| v & 1 != 0).count()
    }

    fn pattern(i: usize) -> u8 {
        (i * 31 % 251) as u8
    }

    #[test]
    fn populates_every_page_and_keeps_contents() {
        let arena = MemoryArena::new(16 << 20, 2 << 20, false).unwrap();
        let mut block = ArenaBlock::allocate(&arena, 3 << 20).unwrap();
        for (i, b) in block.as_mut_slice().iter_mut().enumerate() {
            *b = pattern(i);
        }
        let pages = arena.len / page_size();
        assert!(
            resident_pages(&arena, 0, arena.len) < pages,
            "fresh arena fully resident"
        );
        let report = arena.prefault(3).unwrap();
        assert_eq!(report.bytes, 16 << 20);
        assert_eq!(report.threads, 3);
        assert_ne!(report.method, PrefaultMethod::NotNeeded);
        assert_eq!(resident_pages(&arena, 0, arena.len), pages);
        assert!(
            block
                .as_slice()
                .iter()
                .enumerate()
                .all(|(i, &b)| b == pattern(i))
        );
        // More threads than 2 MiB units: one unit each.
        assert_eq!(arena.prefault(64).unwrap().threads, 8);
    }

    /// The fallback touch, run while another thread keeps writing the same block: every byte
    /// ends with the writer's last value.
    #[test]
    fn touch_fallback_keeps_concurrent_writes() {
        let arena = MemoryArena::new(8 << 20, 2 << 20, true).unwrap();
        let mut block = ArenaBlock::allocate(&arena, 4 << 20).unwrap();
        let stop = AtomicBool::new(false);
        let last = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut round = 0u8;
                while !stop.load(Ordering::Relaxed) || round < 3 {
                    round = round.wrapping_add(1);
                    block.as_mut_slice().fill(round);
                }
                round
            });
            for _ in 0..20 {
                arena.touch(0, arena.len);
            }
            stop.store(true, Ordering::Relaxed);
            writer.join().unwrap()
        });
        assert!(block.as_slice().iter().all(|&b| b == last));
        assert_eq!(
            resident_pages(&arena, 0, arena.len),
            arena.len / page_size()
        );
    }
}
