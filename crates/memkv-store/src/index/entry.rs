//! One index entry: a block record and its key in a single reference-counted allocation.
//!
//! A key in its own `Box<[u8]>` and a block behind its own `Arc` cost two heap chunks, two
//! allocator headers, an `Arc`'s two counts and a 24-byte slot pointing at both; a lookup then
//! loads the slot, the key and the block one after the other. An entry is one allocation
//! (triomphe's `ThinArc`: one count, the block, the key's length and its bytes) behind an
//! 8-byte pointer, so the key compare and the block it guards share cache lines. A replaced or
//! removed entry lives on while a reader holds a clone, as the `Arc` did.

use std::fmt;
use std::ops::Deref;

use triomphe::ThinArc;

pub(crate) struct Entry<B>(ThinArc<B, u8>);

impl<B> Entry<B> {
    pub fn new(key: &[u8], block: B) -> Self {
        Self(ThinArc::from_header_and_slice(block, key))
    }

    pub fn key(&self) -> &[u8] {
        &self.0.slice
    }

    /// Whether no one but its one holder (the index, when called on the index's own entry)
    /// holds this entry: a reader that holds it has cloned it under the shard's lock.
    pub fn only_in_index(this: &Self) -> bool {
        ThinArc::strong_count(&this.0) == 1
    }

    /// Whether both are the same stored entry (not merely equal keys and blocks).
    pub fn same(a: &Self, b: &Self) -> bool {
        std::ptr::eq(a.0.ptr(), b.0.ptr())
    }
}

impl<B> Clone for Entry<B> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<B> Deref for Entry<B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.0.header.header
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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
}
