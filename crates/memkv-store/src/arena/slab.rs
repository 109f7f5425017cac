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
//! the stripe it was given, so threads rarely meet on a lock. Larger allocations (keys of
//! hundreds of bytes, where a header is a small share) and over-aligned ones go to the global
//! allocator.

use std::alloc::{GlobalAlloc, Layout, System, handle_alloc_error};
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

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
}

// SAFETY: a pool's pointers refer to chunks that are never freed, and each slot they reach is
// either on this free list or in the unused rest of the chunk, owned by no one else; the
// `Mutex` around every pool serialises all access to them.
unsafe impl Send for Pool {}

static POOLS: [[Mutex<Pool>; STRIPES]; CLASSES] = [const {
    [const {
        Mutex::new(Pool {
            free: ptr::null_mut(),
            bump: ptr::null_mut(),
            left: 0,
        })
    }; STRIPES]
}; CLASSES];

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

fn pool(class: usize) -> std::sync::MutexGuard<'static, Pool> {
    // Every change to a pool is a few pointer writes that cannot panic midway.
    POOLS[class][stripe()]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Memory for `layout`; aborts (as the global allocator's users do) when there is none.
pub(crate) fn allocate(layout: Layout) -> NonNull<u8> {
    let Some(class) = class_of(layout) else {
        // SAFETY: `layout` has a non-zero size: every entry holds at least its count.
        let p = unsafe { System.alloc(layout) };
        return NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout));
    };
    let size = (class + 1) * GRAIN;
    let mut pool = pool(class);
    if let Some(slot) = NonNull::new(pool.free) {
        // SAFETY: a slot on the free list was written by `release` with the next slot's
        // address and is owned by this pool until handed out here.
        pool.free = unsafe { slot.as_ptr().read().next };
        return slot.cast();
    }
    if pool.left < size {
        let chunk = Layout::from_size_align(CHUNK, GRAIN).expect("a valid chunk layout");
        // SAFETY: the chunk layout has a non-zero size. The rest of the old chunk (less than
        // one slot) is left unused.
        let p = unsafe { System.alloc(chunk) };
        pool.bump = NonNull::new(p)
            .unwrap_or_else(|| handle_alloc_error(chunk))
            .as_ptr();
        pool.left = CHUNK;
    }
    let slot = pool.bump;
    // SAFETY: `left >= size`, so `bump + size` stays inside (or one past the end of) the chunk.
    pool.bump = unsafe { pool.bump.add(size) };
    pool.left -= size;
    NonNull::new(slot).expect("inside a chunk")
}

/// Returns memory that [`allocate`] gave for `layout`.
///
/// # Safety
///
/// `p` came from `allocate(layout)` with this same layout and is not used after this call.
pub(crate) unsafe fn release(p: NonNull<u8>, layout: Layout) {
    let Some(class) = class_of(layout) else {
        // SAFETY: the caller passes what `allocate` got from the global allocator for `layout`.
        unsafe { System.dealloc(p.as_ptr(), layout) };
        return;
    };
    let mut pool = pool(class);
    let slot = p.cast::<FreeSlot>().as_ptr();
    // SAFETY: the slot is at least GRAIN bytes, GRAIN-aligned, and no longer used by the
    // caller, so it can hold the free list's link.
    unsafe { slot.write(FreeSlot { next: pool.free }) };
    pool.free = slot;
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
}
