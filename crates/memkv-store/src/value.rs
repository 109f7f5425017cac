//! What reads hand back: [`ValueRef`] (zero-copy in memory mode) and [`Pinned`] (for RDMA).

use std::fmt;
use std::ops::Deref;

use crate::index::Entry;
use crate::memory::MemBlock;

/// A stored value. In memory mode it borrows the arena bytes directly and keeps them alive and
/// unchanged while held (an overwrite or delete repoints the index; the old bytes are freed when
/// the last `ValueRef` drops). In file mode it owns a verified copy.
pub struct ValueRef {
    inner: Inner,
    checksum: u64,
}

enum Inner {
    Arena(Entry<MemBlock>),
    Owned(Vec<u8>),
}

impl ValueRef {
    pub(crate) fn arena(block: Entry<MemBlock>) -> Self {
        let checksum = block.checksum;
        Self {
            inner: Inner::Arena(block),
            checksum,
        }
    }

    pub(crate) fn owned(bytes: Vec<u8>, checksum: u64) -> Self {
        Self {
            inner: Inner::Owned(bytes),
            checksum,
        }
    }

    /// xxh3-64 of the value, as given at commit.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Offset of the bytes inside the arena (memory mode only).
    pub fn arena_offset(&self) -> Option<u64> {
        match &self.inner {
            Inner::Arena(b) => Some(b.data.offset()),
            Inner::Owned(_) => None,
        }
    }
}

impl Deref for ValueRef {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            Inner::Arena(b) => b.data.as_slice(),
            Inner::Owned(v) => v,
        }
    }
}

impl AsRef<[u8]> for ValueRef {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for ValueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueRef")
            .field("len", &self.len())
            .field("checksum", &self.checksum)
            .field("arena_offset", &self.arena_offset())
            .finish()
    }
}

/// A value pinned for a one-sided network read: its bytes stay at `arena_offset` unchanged
/// until [`crate::Store::release`] or the lease runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    pub pin_id: u64,
    pub arena_offset: u64,
    pub len: u64,
    pub checksum: u64,
}
