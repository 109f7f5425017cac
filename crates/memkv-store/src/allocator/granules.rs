//! Free granule runs: a coalescing free list indexed by start and by size for best fit.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(super) struct GranuleMap {
    pub by_start: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    pub used: u64,
}

impl GranuleMap {
    pub fn new(total: u64) -> Self {
        let mut map = Self::default();
        if total > 0 {
            map.insert_free(0, total);
        }
        map
    }

    /// Start of the smallest free run of at least `count` granules, now taken.
    pub fn take(&mut self, count: u64) -> Option<u64> {
        let &(size, start) = self.by_size.range((count, 0)..).next()?;
        self.by_size.remove(&(size, start));
        self.by_start.remove(&start);
        if size > count {
            self.insert_free(start + count, size - count);
        }
        self.used += count;
        Some(start)
    }

    fn insert_free(&mut self, start: u64, count: u64) {
        self.by_start.insert(start, count);
        self.by_size.insert((count, start));
    }

    pub fn give_back(&mut self, mut start: u64, mut count: u64) {
        self.used -= count;
        if let Some((&prev, &prev_len)) = self.by_start.range(..start).next_back()
            && prev + prev_len == start
        {
            self.by_start.remove(&prev);
            self.by_size.remove(&(prev_len, prev));
            start = prev;
            count += prev_len;
        }
        if let Some(&next_len) = self.by_start.get(&(start + count)) {
            self.by_start.remove(&(start + count));
            self.by_size.remove(&(next_len, start + count));
            count += next_len;
        }
        self.insert_free(start, count);
    }
}
