//! Arena bookkeeping: which `(offset, length)` ranges are handed out. No memory is touched here.
//!
//! Three tiers, so no value wastes more than a fraction of its size:
//! * values of at least one granule take a contiguous run of granules (best fit, coalescing);
//! * medium values (above 1/16 granule) take a run of 1/64-granule pages inside a shared
//!   granule ([`pages`]);
//! * small values take a slot of the nearest size class (four per power of two, so rounding
//!   wastes under 25%), carved from slabs of one or more granules sized so little is left over.
//!
//! Emptied slabs and page granules go back to the granule pool.

mod granules;
mod pages;

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use granules::GranuleMap;
use pages::{PAGES_PER_GRANULE, PageMap};

const MIN_CLASS: u64 = 64;
const MAX_SLAB_GRANULES: u64 = 8;

/// Which unit holds each granule: a unit is what goes back to the free granules at once (a
/// slab, a medium granule, a granule of a large value's run), so evicting every value in a unit
/// frees its granules.
pub(crate) struct Occupancy {
    /// Per granule: the first granule of its unit, or [`Occupancy::FREE`].
    pub unit: Vec<u32>,
    /// Per unit (at its first granule): the bytes handed out in it.
    pub bytes: Vec<u64>,
}

impl Occupancy {
    pub const FREE: u32 = u32::MAX;
}

/// One handed-out range: 12 bytes, since every stored block carries one (the index's cost
/// per block is what #16 shrinks). Where it starts and what it reserves are derived from its
/// kind and the allocator's geometry ([`Allocator::offset`], [`Allocator::reserved`]) rather
/// than stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allocation {
    kind: AllocKind,
}

/// Granule numbers are `u32` ([`MAX_GRANULES`]); pages within a granule and size classes fit a
/// byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllocKind {
    Empty,
    Granules { start: u32, count: u32 },
    Pages { granule: u32, first: u8, count: u8 },
    Slot { class: u8, slab: u32, slot: u32 },
}

/// The most granules an allocator manages (granule numbers are stored in 32 bits).
pub(crate) const MAX_GRANULES: u64 = u32::MAX as u64;

/// Counters for stats and fragmentation reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes handed to values (class or granule-rounded sizes).
    pub reserved_bytes: u64,
    /// Granules in use, by large values or by slabs.
    pub granules_used: u64,
    pub granules_total: u64,
}

/// A slab's free slots: those never handed out (`fresh..slots`, a count, not a list: a list of
/// every slot cost 4 bytes per stored value, and kept them once the slab filled) and those given
/// back since.
#[derive(Default)]
struct Slab {
    fresh: u32,
    freed: Vec<u32>,
}

impl Slab {
    fn take(&mut self, slots: u32) -> Option<u32> {
        self.freed.pop().or_else(|| {
            (self.fresh < slots).then(|| {
                self.fresh += 1;
                self.fresh - 1
            })
        })
    }

    fn free_slots(&self, slots: u32) -> u32 {
        self.freed.len() as u32 + (slots - self.fresh)
    }
}

struct SlabClass {
    slab_granules: u64,
    slots_per_slab: u32,
    slabs: HashMap<u64, Slab>,
    /// Slabs with a free slot, lowest first so live slots pack into few slabs.
    partial: BTreeSet<u64>,
}

/// Thread-safe allocator over `granules_total` granules of `granule` bytes.
pub(crate) struct Allocator {
    granule: u64,
    granules_total: u64,
    granules: Mutex<GranuleMap>,
    pages: Mutex<PageMap>,
    page_size: u64,
    class_sizes: Vec<u64>,
    classes: Vec<Mutex<SlabClass>>,
    reserved: AtomicU64,
}

impl Allocator {
    /// `granules_total` at most [`MAX_GRANULES`] (the arena checks).
    pub fn new(granule: u64, granules_total: u64) -> Self {
        assert!(granules_total <= MAX_GRANULES, "too many granules");
        let map = GranuleMap::new(granules_total);
        let class_sizes = size_classes(granule);
        assert!(
            class_sizes.len() <= usize::from(u8::MAX),
            "too many size classes"
        );
        let classes = class_sizes
            .iter()
            .map(|&slot_size| {
                let slab_granules = best_slab_granules(granule, slot_size);
                Mutex::new(SlabClass {
                    slab_granules,
                    slots_per_slab: ((slab_granules * granule) / slot_size) as u32,
                    slabs: HashMap::new(),
                    partial: BTreeSet::new(),
                })
            })
            .collect();
        Self {
            granule,
            granules_total,
            granules: Mutex::new(map),
            pages: Mutex::new(PageMap::default()),
            page_size: granule / u64::from(PAGES_PER_GRANULE),
            class_sizes,
            classes,
            reserved: AtomicU64::new(0),
        }
    }

    /// Reserves room for `len` bytes, or `None` when no fitting free space exists.
    pub fn allocate(&self, len: u64) -> Option<Allocation> {
        if len == 0 {
            return Some(Allocation {
                kind: AllocKind::Empty,
            });
        }
        let class = self.class_sizes.partition_point(|&s| s < len);
        let pages = len.div_ceil(self.page_size);
        // A slab or page granule needs free granules too; when that fails the value may still
        // fit as a granule run of its own.
        let tiered = if class < self.class_sizes.len() {
            self.allocate_slot(class)
        } else if pages < u64::from(PAGES_PER_GRANULE) {
            self.allocate_pages(pages as u32)
        } else {
            None
        };
        let alloc = match tiered {
            Some(a) => a,
            None => {
                let count = len.div_ceil(self.granule);
                let start = lock(&self.granules).take(count)?;
                Allocation {
                    // Both below `granules_total`, which fits 32 bits.
                    kind: AllocKind::Granules {
                        start: start as u32,
                        count: count as u32,
                    },
                }
            }
        };
        self.reserved
            .fetch_add(self.reserved(&alloc), Ordering::Relaxed);
        Some(alloc)
    }

    /// Where `alloc` starts in the arena.
    pub fn offset(&self, alloc: &Allocation) -> u64 {
        match alloc.kind {
            AllocKind::Empty => 0,
            AllocKind::Granules { start, .. } => u64::from(start) * self.granule,
            AllocKind::Pages { granule, first, .. } => {
                u64::from(granule) * self.granule + u64::from(first) * self.page_size
            }
            AllocKind::Slot { class, slab, slot } => {
                u64::from(slab) * self.granule
                    + u64::from(slot) * self.class_sizes[usize::from(class)]
            }
        }
    }

    /// Bytes reserved for `alloc`'s value (its class size, page run or granule run), at least
    /// the value's length.
    pub fn reserved(&self, alloc: &Allocation) -> u64 {
        match alloc.kind {
            AllocKind::Empty => 0,
            AllocKind::Granules { count, .. } => u64::from(count) * self.granule,
            AllocKind::Pages { count, .. } => u64::from(count) * self.page_size,
            AllocKind::Slot { class, .. } => self.class_sizes[usize::from(class)],
        }
    }

    fn allocate_pages(&self, count: u32) -> Option<Allocation> {
        let mut p = lock(&self.pages);
        let (granule, first) = match p.take(count) {
            Some(found) => found,
            None => {
                let g = lock(&self.granules).take(1)?;
                p.take_in_new(g, count)
            }
        };
        // A granule number fits 32 bits; pages within a granule number under 256.
        Some(Allocation {
            kind: AllocKind::Pages {
                granule: granule as u32,
                first: first as u8,
                count: count as u8,
            },
        })
    }

    fn allocate_slot(&self, class: usize) -> Option<Allocation> {
        let mut c = lock(&self.classes[class]);
        let slab = match c.partial.first() {
            Some(&s) => s,
            None => {
                let start = lock(&self.granules).take(c.slab_granules)?;
                c.slabs.insert(start, Slab::default());
                c.partial.insert(start);
                start
            }
        };
        let slots = c.slots_per_slab;
        let slab_state = c.slabs.get_mut(&slab).expect("partial slab is known");
        let slot = slab_state
            .take(slots)
            .expect("partial slab has a free slot");
        if slab_state.free_slots(slots) == 0 {
            c.partial.remove(&slab);
        }
        Some(Allocation {
            kind: AllocKind::Slot {
                class: class as u8,
                slab: slab as u32,
                slot,
            },
        })
    }

    /// Returns a range obtained from [`Self::allocate`]. Each allocation is freed exactly once.
    pub fn free(&self, alloc: Allocation) {
        self.reserved
            .fetch_sub(self.reserved(&alloc), Ordering::Relaxed);
        match alloc.kind {
            AllocKind::Empty => {}
            AllocKind::Granules { start, count } => {
                lock(&self.granules).give_back(u64::from(start), u64::from(count))
            }
            AllocKind::Pages {
                granule,
                first,
                count,
            } => {
                let granule = u64::from(granule);
                let mut p = lock(&self.pages);
                if p.give_back(granule, u32::from(first), u32::from(count)) {
                    lock(&self.granules).give_back(granule, 1);
                }
            }
            AllocKind::Slot { class, slab, slot } => {
                let slab = u64::from(slab);
                let mut c = lock(&self.classes[usize::from(class)]);
                let slots = c.slots_per_slab;
                let state = c.slabs.get_mut(&slab).expect("slot belongs to a live slab");
                state.freed.push(slot);
                let now_free = state.free_slots(slots);
                if now_free == slots {
                    c.slabs.remove(&slab);
                    c.partial.remove(&slab);
                    let n = c.slab_granules;
                    lock(&self.granules).give_back(slab, n);
                } else if now_free == 1 {
                    c.partial.insert(slab);
                }
            }
        }
    }

    /// How many free granules in one run a new allocation of `len` bytes needs when no slab or
    /// medium granule already in use has room for it: its slab's, one medium granule, or its
    /// own run.
    pub fn granules_needed(&self, len: u64) -> u64 {
        let class = self.class_sizes.partition_point(|&s| s < len);
        if len == 0 {
            0
        } else if class < self.class_sizes.len() {
            lock(&self.classes[class]).slab_granules
        } else if len.div_ceil(self.page_size) < u64::from(PAGES_PER_GRANULE) {
            1
        } else {
            len.div_ceil(self.granule)
        }
    }

    /// The units `alloc` lies in (see [`Occupancy`]) and the bytes it holds in each: every
    /// granule of a large value's run, else the one slab or medium granule that holds it.
    pub fn units(&self, alloc: &Allocation) -> (std::ops::Range<u32>, u64) {
        match alloc.kind {
            AllocKind::Empty => (0..0, 0),
            AllocKind::Granules { start, count } => (start..start + count, self.granule),
            AllocKind::Pages { granule, count, .. } => {
                (granule..granule + 1, u64::from(count) * self.page_size)
            }
            AllocKind::Slot { class, slab, .. } => {
                (slab..slab + 1, self.class_sizes[usize::from(class)])
            }
        }
    }

    /// What holds each granule, for evicting the values in one place so that a run of free
    /// granules appears ([`crate::memory::MemoryBackend::evict_room_for`]). Each lock is taken
    /// on its own (never two at once, so no order against `allocate` and `free`), so the
    /// picture may be slightly stale; whoever uses it checks by allocating.
    pub fn occupancy(&self) -> Occupancy {
        let n = self.granules_total as usize;
        // Every granule starts as its own unit, wholly used (a large value's run), until the
        // free runs, slabs and medium granules say otherwise.
        let mut occ = Occupancy {
            unit: (0..n as u32).collect(),
            bytes: vec![self.granule; n],
        };
        let free: Vec<(u64, u64)> = lock(&self.granules)
            .by_start
            .iter()
            .map(|(&s, &c)| (s, c))
            .collect();
        for (start, count) in free {
            for g in start..start + count {
                occ.unit[g as usize] = Occupancy::FREE;
                occ.bytes[g as usize] = 0;
            }
        }
        let medium: Vec<(u64, u64)> = lock(&self.pages)
            .maps
            .iter()
            .map(|(&g, &map)| (g, u64::from(map.count_ones()) * self.page_size))
            .collect();
        for (g, bytes) in medium {
            occ.bytes[g as usize] = bytes;
        }
        for (class, size) in self.classes.iter().zip(&self.class_sizes) {
            let c = lock(class);
            for (&start, slab) in &c.slabs {
                let live = c.slots_per_slab - slab.free_slots(c.slots_per_slab);
                for g in start..start + c.slab_granules {
                    occ.unit[g as usize] = start as u32;
                    occ.bytes[g as usize] = 0;
                }
                occ.bytes[start as usize] = u64::from(live) * size;
            }
        }
        occ
    }

    pub fn stats(&self) -> AllocStats {
        AllocStats {
            reserved_bytes: self.reserved.load(Ordering::Relaxed),
            granules_used: lock(&self.granules).used,
            granules_total: self.granules_total,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// 64, 80, 96, 112, 128, 160, ... : four steps per power of two, up to 1/16 granule.
fn size_classes(granule: u64) -> Vec<u64> {
    let largest = granule / 16;
    let mut out = Vec::new();
    let mut pow = MIN_CLASS;
    while pow < largest {
        for step in 0..4 {
            out.push(pow + step * pow / 4);
        }
        pow *= 2;
    }
    out.push(largest);
    out
}

/// Slab length (in granules): the shortest whose unusable tail is under 1/64 of it, else the
/// one with the smallest tail. Short slabs return to the granule pool sooner.
fn best_slab_granules(granule: u64, slot: u64) -> u64 {
    let waste = |k: u64| ((k * granule) % slot) as f64 / (k * granule) as f64;
    (1..=MAX_SLAB_GRANULES)
        .find(|&k| waste(k) < 1.0 / 64.0)
        .unwrap_or_else(|| {
            (1..=MAX_SLAB_GRANULES)
                .min_by(|a, b| waste(*a).total_cmp(&waste(*b)))
                .unwrap_or(1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_allocation_is_12_bytes() {
        assert_eq!(std::mem::size_of::<Allocation>(), 12);
    }

    #[test]
    fn classes_round_up_under_a_quarter() {
        let classes = size_classes(2 << 20);
        for w in classes.windows(2) {
            assert!(w[1] > w[0] && w[1] <= w[0] + w[0] / 3 + 1, "{w:?}");
        }
        assert_eq!(*classes.last().unwrap(), 128 << 10);
        assert_eq!(best_slab_granules(2 << 20, 80), 1);
    }

    proptest! {
        /// Live allocations never overlap, stay inside the arena, and freeing everything
        /// returns every granule.
        #[test]
        fn allocations_are_disjoint(ops in prop::collection::vec((0u64..300_000, any::<bool>()), 1..200)) {
            let granule = 64 << 10;
            let a = Allocator::new(granule, 40);
            let mut live: Vec<(Allocation, u64)> = Vec::new();
            for (len, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (al, _) = live.swap_remove(len as usize % live.len());
                    a.free(al);
                    continue;
                }
                if let Some(al) = a.allocate(len) {
                    let (reserved, o_reserved) = (a.reserved(&al), |o: &Allocation| a.reserved(o));
                    prop_assert!(reserved >= len);
                    let (at, o_at) = (a.offset(&al), |o: &Allocation| a.offset(o));
                    prop_assert!(at + reserved <= 40 * granule);
                    for (o, olen) in &live {
                        let disjoint = reserved == 0 || *olen == 0
                            || at + reserved <= o_at(o) || o_at(o) + o_reserved(o) <= at;
                        prop_assert!(disjoint, "{al:?} overlaps {o:?}");
                    }
                    live.push((al, len));
                }
                // The occupancy picture accounts for every reserved byte, in the units the
                // live allocations name.
                let occ = a.occupancy();
                prop_assert_eq!(occ.bytes.iter().sum::<u64>(), a.stats().reserved_bytes);
                for (al, _) in &live {
                    let (units, bytes) = a.units(al);
                    prop_assert!(bytes <= a.reserved(al));
                    for u in units {
                        prop_assert_eq!(occ.unit[u as usize], u, "{:?}", al);
                    }
                }
            }
            for (al, _) in live.drain(..) {
                a.free(al);
            }
            prop_assert_eq!(a.stats().granules_used, 0);
            prop_assert_eq!(a.stats().reserved_bytes, 0);
            prop_assert!(a.allocate(40 * granule).is_some());
        }
    }
}
