//! Medium values (between the largest slab class and one granule) take a contiguous run of
//! pages (1/64 granule) inside a granule shared with other medium values. A 64-bit map per
//! granule tracks its pages; granules are indexed by their longest free run for best fit.

use std::collections::{BTreeSet, HashMap};

pub(super) const PAGES_PER_GRANULE: u32 = 64;

#[derive(Default)]
pub(super) struct PageMap {
    /// Used-page bitmap per medium granule.
    pub maps: HashMap<u64, u64>,
    /// `(longest free run, granule)` for granules with a free page.
    by_run: BTreeSet<(u32, u64)>,
}

impl PageMap {
    /// A run of `pages` pages in an existing medium granule: `(granule, first page)`.
    pub fn take(&mut self, pages: u32) -> Option<(u64, u32)> {
        let &(run, granule) = self.by_run.range((pages, 0)..).next()?;
        let map = self.maps[&granule];
        let first = find_run(map, pages).expect("indexed run exists");
        self.update(granule, map, map | mask(first, pages), run);
        Some((granule, first))
    }

    /// Adds a fresh granule and takes `pages` from its start.
    pub fn take_in_new(&mut self, granule: u64, pages: u32) -> (u64, u32) {
        let map = mask(0, pages);
        self.maps.insert(granule, map);
        self.by_run.insert((longest_run(map), granule));
        (granule, 0)
    }

    /// Frees pages; returns `true` when the granule became empty (and was dropped from here).
    pub fn give_back(&mut self, granule: u64, first: u32, pages: u32) -> bool {
        let map = self.maps[&granule];
        let new = map & !mask(first, pages);
        if new == 0 {
            self.by_run.remove(&(longest_run(map), granule));
            self.maps.remove(&granule);
            return true;
        }
        self.update(granule, map, new, longest_run(map));
        false
    }

    fn update(&mut self, granule: u64, _old: u64, new: u64, old_run: u32) {
        self.by_run.remove(&(old_run, granule));
        self.maps.insert(granule, new);
        let run = longest_run(new);
        if run > 0 {
            self.by_run.insert((run, granule));
        }
    }
}

fn mask(first: u32, pages: u32) -> u64 {
    if pages >= 64 {
        u64::MAX
    } else {
        ((1u64 << pages) - 1) << first
    }
}

fn longest_run(map: u64) -> u32 {
    let (mut best, mut cur) = (0, 0);
    for i in 0..PAGES_PER_GRANULE {
        if map & (1 << i) == 0 {
            cur += 1;
            best = best.max(cur);
        } else {
            cur = 0;
        }
    }
    best
}

/// Lowest start of `pages` consecutive free pages.
fn find_run(map: u64, pages: u32) -> Option<u32> {
    (0..=PAGES_PER_GRANULE - pages).find(|&s| map & mask(s, pages) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_masks() {
        assert_eq!(longest_run(0), 64);
        assert_eq!(longest_run(u64::MAX), 0);
        assert_eq!(longest_run(0b1000_0001), 56);
        assert_eq!(find_run(0b0110, 2), Some(3));
        let mut m = PageMap::default();
        assert_eq!(m.take_in_new(7, 40), (7, 0));
        assert_eq!(m.take(30), None);
        assert_eq!(m.take(20), Some((7, 40)));
        assert!(!m.give_back(7, 0, 40));
        assert_eq!(m.take(40), Some((7, 0)));
        assert!(!m.give_back(7, 40, 20));
        assert!(m.give_back(7, 0, 40));
    }
}
