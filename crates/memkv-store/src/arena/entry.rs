//! One index entry: a block record and its key in a single reference-counted allocation.
//!
//! An entry is laid out by hand in one slot of the entry slab ([`super::slab`]) behind an
//! 8-byte pointer: the block record first, then a 4-byte count, the key's 2-byte length and
//! the key's bytes, so the key fills what would be the record's trailing padding and the
//! slot is the 8-byte rounding of their sum. The key compare and the block it guards share
//! cache lines. A replaced or removed entry lives on while a reader holds a clone.
//!
//! Against the general-purpose layout this replaced (triomphe's `ThinArc` from malloc: an
//! 8-byte count and an 8-byte length before the record, then malloc's 8-byte header and
//! rounding to 16) an entry of a 32-byte record and a 15- or 17-byte key takes 56 bytes
//! instead of 80: docs/benchmarks.md, "Index memory per value".

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::mem::offset_of;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering, fence};

use super::slab;

/// Clones past this abort, as `Arc`'s do past `isize::MAX`: a count that wrapped would free
/// an entry still in use.
const MAX_COUNT: u32 = i32::MAX as u32;

/// The fixed part of an entry; the key's bytes follow `key_len` directly (over the struct's
/// trailing padding), so no code makes a reference to a whole `Head`, only to its fields.
#[repr(C)]
struct Head<B> {
    block: B,
    count: AtomicU32,
    key_len: u16,
}

pub(crate) struct Entry<B> {
    head: NonNull<Head<B>>,
    /// The entry owns a `Head<B>` (and drops its `B`).
    _owns: PhantomData<Head<B>>,
}

// SAFETY: an entry is shared like an `Arc<B>`: clones on other threads read the block (hence
// `B: Sync`) and the last one, on any thread, drops it (hence `B: Send`); the count is atomic.
unsafe impl<B: Send + Sync> Send for Entry<B> {}
// SAFETY: as above; `&Entry` gives only `&B` and clones.
unsafe impl<B: Send + Sync> Sync for Entry<B> {}

fn key_offset<B>() -> usize {
    offset_of!(Head<B>, key_len) + size_of::<u16>()
}

/// The slot for a key of `key_len` bytes: never smaller than a whole `Head`, so every field
/// lies inside it whatever the key's length.
fn layout<B>(key_len: usize) -> Layout {
    let size = (key_offset::<B>() + key_len).max(size_of::<Head<B>>());
    Layout::from_size_align(size, align_of::<Head<B>>()).expect("an entry under isize::MAX bytes")
}

impl<B> Entry<B> {
    /// Keys are at most 64 KiB - 1 bytes (the store takes at most 1 KiB; the journal's length
    /// field is a `u16` too).
    pub fn new(key: &[u8], block: B) -> Self {
        let key_len = u16::try_from(key.len()).expect("a key under 64 KiB");
        let head = slab::allocate(layout::<B>(key.len())).cast::<Head<B>>();
        let p = head.as_ptr();
        // SAFETY: the slot holds the layout's bytes, aligned for `Head<B>`, and is owned by
        // no one else; each field and the key are written in place, inside it.
        unsafe {
            (&raw mut (*p).block).write(block);
            (&raw mut (*p).count).write(AtomicU32::new(1));
            (&raw mut (*p).key_len).write(key_len);
            std::ptr::copy_nonoverlapping(key.as_ptr(), Self::key_ptr(head), key.len());
        }
        Self {
            head,
            _owns: PhantomData,
        }
    }

    fn key_ptr(head: NonNull<Head<B>>) -> *mut u8 {
        // SAFETY: the key's offset lies inside the slot (the layout includes it).
        unsafe { head.as_ptr().cast::<u8>().add(key_offset::<B>()) }
    }

    fn count(&self) -> &AtomicU32 {
        // SAFETY: written in `new`; the slot lives until the last clone drops, and `self` is
        // one of them.
        unsafe { &(*self.head.as_ptr()).count }
    }

    fn key_len(&self) -> usize {
        // SAFETY: as in `count`; never written after `new`.
        usize::from(unsafe { (*self.head.as_ptr()).key_len })
    }

    pub fn key(&self) -> &[u8] {
        // SAFETY: `key_len` bytes were copied to the key's offset in `new` and are never
        // written again while a clone lives.
        unsafe { std::slice::from_raw_parts(Self::key_ptr(self.head), self.key_len()) }
    }

    /// The memory this entry takes (its slot).
    pub fn slot_bytes(&self) -> usize {
        slab::slot_bytes(layout::<B>(self.key_len()))
    }

    /// Whether no one but its one holder (the index, when called on the index's own entry)
    /// holds this entry: a reader that holds it has cloned it under the shard's lock.
    pub fn only_in_index(this: &Self) -> bool {
        this.count().load(Ordering::Acquire) == 1
    }

    /// Whether both are the same stored entry (not merely equal keys and blocks).
    pub fn same(a: &Self, b: &Self) -> bool {
        a.head == b.head
    }
}

impl<B> Clone for Entry<B> {
    fn clone(&self) -> Self {
        // A new clone is made from an existing one, so the entry cannot be freed meanwhile;
        // nothing is published through the count (as in `Arc::clone`).
        if self.count().fetch_add(1, Ordering::Relaxed) >= MAX_COUNT {
            std::process::abort();
        }
        Self {
            head: self.head,
            _owns: PhantomData,
        }
    }
}

impl<B> Drop for Entry<B> {
    fn drop(&mut self) {
        if self.count().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other clone's use of the entry happens before it is freed (as in `Arc`).
        fence(Ordering::Acquire);
        let key_len = self.key_len();
        // SAFETY: this was the last clone: no one else can reach the head. The block is
        // dropped once, here, and the slot goes back with the layout `new` allocated it with.
        unsafe {
            std::ptr::drop_in_place(&raw mut (*self.head.as_ptr()).block);
            slab::release(self.head.cast(), layout::<B>(key_len));
        }
    }
}

impl<B> Deref for Entry<B> {
    type Target = B;

    fn deref(&self) -> &B {
        // SAFETY: as in `count`; the block is only read while clones live.
        unsafe { &(*self.head.as_ptr()).block }
    }
}

impl<B: fmt::Debug> fmt::Debug for Entry<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key())
            .field("block", &**self)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_block_drops_with_the_last_clone() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = Entry::new(b"key/1", Counted(Arc::clone(&drops)));
        let b = a.clone();
        assert!(Entry::same(&a, &b));
        assert!(!Entry::only_in_index(&a));
        assert_eq!(a.key(), b"key/1");
        drop(a);
        assert!(Entry::only_in_index(&b));
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn equal_entries_are_not_the_same_entry() {
        let a = Entry::new(b"k", 7u32);
        let b = Entry::new(b"k", 7u32);
        assert!(!Entry::same(&a, &b));
        assert_eq!(*a, *b);
        assert!(Entry::new(b"", 0u8).key().is_empty());
    }

    #[test]
    fn an_entry_is_one_pointer() {
        assert_eq!(size_of::<Entry<[u64; 4]>>(), size_of::<usize>());
    }

    #[test]
    fn the_key_fills_the_records_padding() {
        // A 32-byte record (memory mode's) and the bench's keys (`bench/64/999999`: 15 bytes,
        // `bench/4096/999999`: 17): 32 + 6 + the key, in 56-byte slots; malloc gave
        // triomphe's 63 and 65 bytes 80-byte chunks.
        assert_eq!(key_offset::<[u64; 4]>(), 38);
        assert_eq!(layout::<[u64; 4]>(15).size(), 53);
        assert_eq!(layout::<[u64; 4]>(17).size(), 55);
        assert_eq!(layout::<[u64; 4]>(17).align(), 8);
        assert_eq!(Entry::new(&[b'k'; 17], [0u64; 4]).slot_bytes(), 56);
        // Short keys still get a whole head.
        assert_eq!(layout::<[u64; 4]>(0).size(), size_of::<Head<[u64; 4]>>());
    }

    #[test]
    fn keys_of_every_length_round_trip_through_slab_and_heap() {
        let keys: Vec<Vec<u8>> = (0..=slab::LARGEST_SLOT + 40)
            .step_by(7)
            .chain([usize::from(u16::MAX)])
            .map(|n| (0..n).map(|i| (i * 31 + n) as u8).collect())
            .collect();
        let entries: Vec<Entry<u64>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Entry::new(k, i as u64))
            .collect();
        for (i, (k, e)) in keys.iter().zip(&entries).enumerate() {
            assert_eq!(e.key(), &k[..]);
            assert_eq!(**e, i as u64);
        }
    }

    #[test]
    fn clones_on_other_threads_drop_the_block_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let entries: Vec<Entry<Counted>> = (0..64u32)
            .map(|i| Entry::new(&i.to_le_bytes(), Counted(Arc::clone(&drops))))
            .collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                let clones: Vec<Entry<Counted>> = entries.to_vec();
                s.spawn(move || {
                    for (i, e) in clones.iter().enumerate() {
                        assert_eq!(e.key(), &(i as u32).to_le_bytes());
                    }
                    drop(clones);
                });
            }
        });
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(entries);
        assert_eq!(drops.load(Ordering::SeqCst), 64);
    }
}
