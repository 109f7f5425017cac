//! Accounting of a staging region cut into equal chunks: a value takes one contiguous run of
//! chunks (a peer's RDMA WRITE or READ names one remote range), found first-fit. Pure
//! bookkeeping, so it is tested without a device; [`crate::remote_staging`] puts memory
//! behind it.

/// Which chunks of a region are in use.
#[derive(Debug, Clone)]
pub struct ChunkMap {
    used: Vec<bool>,
    in_use: usize,
    /// Where the next search starts: just after the last run handed out, so runs are spread
    /// over the region and a freed run is not reused at once (a late peer write lands in
    /// memory nobody holds, rather than in the next value).
    next: usize,
}

impl ChunkMap {
    pub fn new(chunks: usize) -> Self {
        Self {
            used: vec![false; chunks],
            in_use: 0,
            next: 0,
        }
    }

    /// Chunks in the region.
    pub fn total(&self) -> usize {
        self.used.len()
    }

    /// Chunks held by runs.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// The first chunk of a free run of `n` chunks, now marked used; `None` when no run that
    /// long is free. A run of zero chunks is always available (at chunk 0) and holds nothing.
    pub fn allocate(&mut self, n: usize) -> Option<usize> {
        let total = self.used.len();
        if n == 0 {
            return Some(0);
        }
        if n > total - self.in_use {
            return None;
        }
        // Two passes: runs starting at `next` or later, then those starting before it (a run
        // never wraps around the end).
        let start = self
            .find(n, self.next, total)
            .or_else(|| self.find(n, 0, self.next))?;
        self.used[start..start + n].fill(true);
        self.in_use += n;
        self.next = if start + n == total { 0 } else { start + n };
        Some(start)
    }

    /// First start in `from..limit` (runs may extend past `limit`) of `n` free chunks.
    fn find(&self, n: usize, from: usize, limit: usize) -> Option<usize> {
        let total = self.used.len();
        let mut start = from;
        while start < limit && start + n <= total {
            match self.used[start..start + n].iter().rposition(|&u| u) {
                // Skip past the last used chunk of the window: no run can start before it.
                Some(last_used) => start += last_used + 1,
                None => return Some(start),
            }
        }
        None
    }

    /// Returns the run of `n` chunks at `first`.
    ///
    /// # Panics
    ///
    /// When the run is not wholly in use: freeing twice is a bookkeeping bug, and going on
    /// would hand one chunk to two values.
    pub fn free(&mut self, first: usize, n: usize) {
        if n == 0 {
            return;
        }
        let run = &mut self.used[first..first + n];
        assert!(
            run.iter().all(|&u| u),
            "staging chunks {first}..{} freed but not all in use",
            first + n
        );
        run.fill(false);
        self.in_use -= n;
    }

    /// The longest run of free chunks (what the largest value that fits now needs).
    pub fn largest_free_run(&self) -> usize {
        self.used
            .split(|&u| u)
            .map(<[bool]>::len)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_contiguous_disjoint_and_counted() {
        let mut map = ChunkMap::new(8);
        let a = map.allocate(3).unwrap();
        let b = map.allocate(2).unwrap();
        let c = map.allocate(3).unwrap();
        let mut starts = [(a, 3), (b, 2), (c, 3)];
        starts.sort();
        assert_eq!(starts, [(0, 3), (3, 2), (5, 3)]);
        assert_eq!((map.in_use(), map.total()), (8, 8));
        assert_eq!(map.allocate(1), None, "full");
        map.free(b, 2);
        assert_eq!(map.in_use(), 6);
        assert_eq!(map.largest_free_run(), 2);
        assert_eq!(map.allocate(3), None, "two free chunks do not hold three");
        assert_eq!(map.allocate(2), Some(3));
    }

    #[test]
    fn free_space_split_in_pieces_does_not_hold_a_longer_run() {
        let mut map = ChunkMap::new(6);
        let runs: Vec<usize> = (0..6).map(|_| map.allocate(1).unwrap()).collect();
        map.free(runs[1], 1);
        map.free(runs[3], 1);
        map.free(runs[5], 1);
        assert_eq!(map.in_use(), 3);
        assert_eq!(map.largest_free_run(), 1);
        assert_eq!(map.allocate(2), None);
        map.free(runs[4], 1);
        assert_eq!(map.allocate(3), Some(3));
    }

    #[test]
    fn searching_wraps_around_to_runs_before_the_cursor() {
        let mut map = ChunkMap::new(4);
        let first = map.allocate(2).unwrap();
        let second = map.allocate(1).unwrap();
        map.free(first, 2);
        // The cursor is at chunk 3: one free chunk there, two at the start.
        assert_eq!(map.allocate(2), Some(0));
        assert_eq!(map.allocate(1), Some(3));
        map.free(second, 1);
        assert_eq!(map.allocate(1), Some(2));
        assert_eq!(map.in_use(), 4);
    }

    #[test]
    fn empty_runs_and_oversized_requests() {
        let mut map = ChunkMap::new(2);
        assert_eq!(map.allocate(0), Some(0));
        map.free(0, 0);
        assert_eq!(map.in_use(), 0);
        assert_eq!(map.allocate(3), None);
        assert_eq!(ChunkMap::new(0).allocate(1), None);
    }

    #[test]
    #[should_panic(expected = "freed but not all in use")]
    fn freeing_a_free_run_is_a_bug() {
        let mut map = ChunkMap::new(2);
        let a = map.allocate(1).unwrap();
        map.free(a, 1);
        map.free(a, 1);
    }

    #[test]
    fn any_sequence_keeps_the_count_and_never_overlaps() {
        // A small deterministic walk over allocations and frees, checked against a model.
        let mut map = ChunkMap::new(16);
        let mut held: Vec<(usize, usize)> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed % 3 == 0 && !held.is_empty() {
                let (first, n) = held.swap_remove((seed as usize / 3) % held.len());
                map.free(first, n);
            } else {
                let n = 1 + (seed as usize >> 8) % 5;
                if let Some(first) = map.allocate(n) {
                    assert!(first + n <= 16);
                    for &(f, m) in &held {
                        assert!(first + n <= f || f + m <= first, "overlap");
                    }
                    held.push((first, n));
                }
            }
            assert_eq!(map.in_use(), held.iter().map(|&(_, n)| n).sum::<usize>());
        }
    }
}
