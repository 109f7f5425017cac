//! Memory for the index's entries: size classes 8 bytes apart, carved from chunks that are
//! kept for reuse, with no header per allocation.
//!
//! An entry is small (a count, a block record and a key: 50-70 bytes for typical keys) and
//! there is one per stored block, so what the allocator adds to each is a large share of the
//! index's memory. glibc's malloc adds 8 bytes of header and rounds up to 16, so a 57-byte
//! entry takes an 80-byte chunk there and a 64-byte slot here. Freed slots go on their class's free list and are handed out again; the
//! chunks themselves are never returned to the system, as malloc keeps its arenas.
//!
//! Each class has a few stripes, each behind its own lock; a thread allocates from and frees to
//! the stripe it was given, so threads rarely meet on a lock. A stripe out of room takes slots
//! given back to the others before it takes a new chunk, so memory does not grow where one
//! thread frees what others allocate. Larger allocations (keys of
//! hundreds of bytes, where a header is a small share) and over-aligned ones go to the global
//! allocator.

use std::alloc::{GlobalAlloc, Layout, System, handle_alloc_error};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Slot sizes are multiples of this, which is also every slot's alignment.
const GRAIN: usize = 8;
/// The largest slot; larger allocations go to the global allocator.
pub(crate) const LARGEST_SLOT: usize = 512;
const CLASSES: usize = LARGEST_SLOT / GRAIN;
/// Locks per class.
const STRIPES: usize = 4;
/// Bytes taken from the system at a time for one stripe of one class.
const CHUNK: usize = 256 << 10;

/// A free slot holds the next free slot's address.
struct FreeSlot {
    next: *mut FreeSlot,
}

struct Pool {
    free: *mut FreeSlot,
    /// The unused rest of the stripe's current chunk.
    bump: *mut u8,
    left: usize,
    /// Every chunk this pool took, for [`Pools`]' `Drop` (the process-wide pools never drop).
    chunks: Vec<NonNull<u8>>,
}

// SAFETY: a pool's pointers refer to its chunks, which live as long as the pool, and each slot
// they reach is either on this free list or in the unused rest of a chunk, owned by no one
// else; the `Mutex` around every pool serialises all access to them.
unsafe impl Send for Pool {}

impl Pool {
    /// A slot given back earlier, if any.
    fn pop_free(&mut self) -> Option<NonNull<u8>> {
        let slot = NonNull::new(self.free)?;
        // SAFETY: a slot on the free list was written by `release` with the next slot's
        // address and is owned by this pool until handed out here.
        self.free = unsafe { slot.as_ptr().read().next };
        Some(slot.cast())
    }
}

/// Every class's pools.
pub(crate) struct Pools([[Mutex<Pool>; STRIPES]; CLASSES]);

/// The pools of every index entry in the process.
static ENTRY_POOLS: Pools = Pools::new();

impl Pools {
    const fn new() -> Self {
        Self(
            [const {
                [const {
                    Mutex::new(Pool {
                        free: ptr::null_mut(),
                        bump: ptr::null_mut(),
                        left: 0,
                        chunks: Vec::new(),
                    })
                }; STRIPES]
            }; CLASSES],
        )
    }

    fn lock(&self, class: usize, stripe: usize) -> MutexGuard<'_, Pool> {
        // Every change to a pool is a few pointer writes that cannot panic midway.
        self.0[class][stripe]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn allocate(&self, layout: Layout, stripe: usize) -> NonNull<u8> {
        let Some(class) = class_of(layout) else {
            // SAFETY: `layout` has a non-zero size: every entry holds at least its count.
            let p = unsafe { System.alloc(layout) };
            return NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout));
        };
        let size = (class + 1) * GRAIN;
        let mut pool = self.lock(class, stripe);
        if let Some(slot) = pool.pop_free() {
            return slot;
        }
        if pool.left < size {
            // Before taking new memory, take a slot given back to another stripe: a thread that
            // frees more entries than it makes (an evicting or committing one) would otherwise
            // keep slots no one else reuses while the others keep taking chunks.
            for other in (1..STRIPES).map(|d| (stripe + d) % STRIPES) {
                if let Ok(mut pool) = self.0[class][other].try_lock()
                    && let Some(slot) = pool.pop_free()
                {
                    return slot;
                }
            }
            let chunk = chunk_layout();
            // SAFETY: the chunk layout has a non-zero size. The rest of the old chunk (less
            // than one slot) is left unused.
            let p = unsafe { System.alloc(chunk) };
            let p = NonNull::new(p).unwrap_or_else(|| handle_alloc_error(chunk));
            pool.chunks.push(p);
            pool.bump = p.as_ptr();
            pool.left = CHUNK;
        }
        let slot = pool.bump;
        // SAFETY: `left >= size`, so `bump + size` stays inside (or one past the end of) the
        // chunk.
        pool.bump = unsafe { pool.bump.add(size) };
        pool.left -= size;
        NonNull::new(slot).expect("inside a chunk")
    }

    /// # Safety
    ///
    /// As [`release`], with `allocate` called on these pools.
    unsafe fn release(&self, p: NonNull<u8>, layout: Layout, stripe: usize) {
        let Some(class) = class_of(layout) else {
            // SAFETY: the caller passes what `allocate` got from the global allocator for
            // `layout`.
            unsafe { System.dealloc(p.as_ptr(), layout) };
            return;
        };
        let mut pool = self.lock(class, stripe);
        let slot = p.cast::<FreeSlot>().as_ptr();
        // SAFETY: the slot is at least GRAIN bytes, GRAIN-aligned, and no longer used by the
        // caller, so it can hold the free list's link.
        unsafe { slot.write(FreeSlot { next: pool.free }) };
        pool.free = slot;
    }
}

impl Drop for Pools {
    fn drop(&mut self) {
        for pool in self.0.iter_mut().flatten() {
            let pool = pool.get_mut().unwrap_or_else(|p| p.into_inner());
            for chunk in pool.chunks.drain(..) {
                // SAFETY: each chunk came from `System.alloc(chunk_layout())`; pools are dropped
                // only once nothing allocated from them is in use (the process-wide ones never).
                unsafe { System.dealloc(chunk.as_ptr(), chunk_layout()) };
            }
        }
    }
}

fn chunk_layout() -> Layout {
    Layout::from_size_align(CHUNK, GRAIN).expect("a valid chunk layout")
}

fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// The class serving `layout`, or `None` for the global allocator.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() > LARGEST_SLOT || layout.align() > GRAIN {
        return None;
    }
    Some(layout.size().max(1).div_ceil(GRAIN) - 1)
}

/// The bytes an allocation for `layout` takes: its slot, or what it asked of the global
/// allocator (whose own header and rounding are not counted).
pub(crate) fn slot_bytes(layout: Layout) -> usize {
    class_of(layout).map_or(layout.size(), |class| (class + 1) * GRAIN)
}

/// Memory for `layout`; aborts (as the global allocator's users do) when there is none.
pub(crate) fn allocate(layout: Layout) -> NonNull<u8> {
    ENTRY_POOLS.allocate(layout, stripe())
}

/// Returns memory that [`allocate`] gave for `layout`.
///
/// # Safety
///
/// `p` came from `allocate(layout)` with this same layout and is not used after this call.
pub(crate) unsafe fn release(p: NonNull<u8>, layout: Layout) {
    // SAFETY: the caller's promise, for the process-wide pools `allocate` used.
    unsafe { ENTRY_POOLS.release(p, layout, stripe()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_to_the_grain() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class_of(l(1, 1)), Some(0));
        assert_eq!(class_of(l(8, 8)), Some(0));
        assert_eq!(class_of(l(9, 8)), Some(1));
        assert_eq!(class_of(l(56, 8)), Some(6));
        assert_eq!(class_of(l(57, 8)), Some(7));
        assert_eq!(class_of(l(LARGEST_SLOT, 8)), Some(CLASSES - 1));
        assert_eq!(class_of(l(LARGEST_SLOT + 1, 8)), None);
        assert_eq!(class_of(l(64, 16)), None);
        assert_eq!(slot_bytes(l(57, 8)), 64);
        assert_eq!(slot_bytes(l(LARGEST_SLOT + 1, 8)), LARGEST_SLOT + 1);
    }

    #[test]
    fn slots_do_not_overlap_and_are_reused() {
        let layout = Layout::from_size_align(40, 8).unwrap();
        let slots: Vec<NonNull<u8>> = (0..300).map(|_| allocate(layout)).collect();
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(s.as_ptr() as usize % GRAIN, 0);
            // SAFETY: each slot is 40 bytes this test owns.
            unsafe { ptr::write_bytes(s.as_ptr(), i as u8, 40) };
        }
        for (i, s) in slots.iter().enumerate() {
            // SAFETY: as above; written just before.
            let bytes = unsafe { std::slice::from_raw_parts(s.as_ptr(), 40) };
            assert!(
                bytes.iter().all(|&b| b == i as u8),
                "slot {i} was overwritten"
            );
        }
        for s in slots {
            // SAFETY: allocated above with this layout, not used again.
            unsafe { release(s, layout) };
        }
    }

    #[test]
    fn large_and_over_aligned_layouts_use_the_global_allocator() {
        for layout in [
            Layout::from_size_align(LARGEST_SLOT + 1, 8).unwrap(),
            Layout::from_size_align(32, 64).unwrap(),
        ] {
            let p = allocate(layout);
            assert_eq!(p.as_ptr() as usize % layout.align(), 0);
            // SAFETY: the allocation is `layout.size()` bytes, owned here.
            unsafe { ptr::write_bytes(p.as_ptr(), 7, layout.size()) };
            // SAFETY: allocated above with this layout.
            unsafe { release(p, layout) };
        }
    }

    /// A slot moved to another thread by the test.
    struct Slot(NonNull<u8>);
    // SAFETY: the test hands each slot to one thread at a time.
    unsafe impl Send for Slot {}

    #[test]
    fn threads_allocate_and_free_across_stripes() {
        let layout = Layout::from_size_align(24, 8).unwrap();
        let handed: Vec<Slot> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8u8)
                .map(|t| {
                    s.spawn(move || {
                        let mine: Vec<Slot> = (0..200).map(|_| Slot(allocate(layout))).collect();
                        for p in &mine {
                            // SAFETY: each slot is 24 bytes owned by this thread.
                            unsafe { ptr::write_bytes(p.0.as_ptr(), t, 24) };
                        }
                        for p in &mine {
                            // SAFETY: as above.
                            let b = unsafe { std::slice::from_raw_parts(p.0.as_ptr(), 24) };
                            assert!(b.iter().all(|&x| x == t), "another thread wrote here");
                        }
                        mine
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let mut addresses: Vec<usize> = handed.iter().map(|p| p.0.addr().get()).collect();
        addresses.sort_unstable();
        addresses.dedup();
        assert_eq!(addresses.len(), handed.len(), "a slot was handed out twice");
        // Freed by this thread, into its own stripe, wherever they came from.
        for p in handed {
            // SAFETY: each slot came from `allocate(layout)` and is no longer used.
            unsafe { release(p.0, layout) };
        }
    }

    #[test]
    fn a_stripe_out_of_room_takes_slots_given_back_to_another() {
        let pools = Pools::new();
        let layout = Layout::from_size_align(64, 8).unwrap();
        // Stripe 1 hands out three slots and takes them back.
        let given: Vec<NonNull<u8>> = (0..3).map(|_| pools.allocate(layout, 1)).collect();
        for &p in &given {
            // SAFETY: allocated above from these pools with this layout, not used again.
            unsafe { pools.release(p, layout, 1) };
        }
        // Stripe 0, with no chunk of its own yet, reuses them before it takes one.
        let reused: Vec<NonNull<u8>> = (0..3).map(|_| pools.allocate(layout, 0)).collect();
        for p in &reused {
            assert!(
                given.contains(p),
                "a new chunk was taken while stripe 1 had free slots"
            );
        }
        assert!(pools.0[7][0].lock().unwrap().chunks.is_empty());
        let fresh = pools.allocate(layout, 0);
        assert_eq!(pools.0[7][0].lock().unwrap().chunks.len(), 1);
        for p in reused.into_iter().chain([fresh]) {
            // SAFETY: allocated above from these pools with this layout.
            unsafe { pools.release(p, layout, 0) };
        }
    }
}
