//! What reads hand back: [`ValueRef`] (zero-copy in memory mode), [`ValueParts`] (a value to
//! send, zero-copy in memory and direct modes) and [`Pinned`] (for RDMA).

use std::fmt;
use std::ops::Deref;

use crate::file::LeasedValue;
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

/// A value to send, as slices in order: a [`ValueRef`], or in direct mode the drive buffers it
/// was read into ([`crate::Store::get_parts`]).
#[derive(Debug)]
pub struct ValueParts(Parts);

#[derive(Debug)]
enum Parts {
    Whole(ValueRef),
    Leased(LeasedValue),
}

impl ValueParts {
    pub(crate) fn whole(value: ValueRef) -> Self {
        Self(Parts::Whole(value))
    }

    pub(crate) fn leased(value: LeasedValue) -> Self {
        Self(Parts::Leased(value))
    }

    /// The value's bytes in order, in one or more slices.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        let (whole, leased) = match &self.0 {
            Parts::Whole(v) => (Some(&v[..]), None),
            Parts::Leased(l) => (None, Some(l)),
        };
        whole
            .into_iter()
            .chain(leased.into_iter().flat_map(LeasedValue::parts))
    }

    pub fn len(&self) -> u64 {
        match &self.0 {
            Parts::Whole(v) => v.len() as u64,
            Parts::Leased(l) => l.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// xxh3-64 of the value, as given at commit.
    pub fn checksum(&self) -> u64 {
        match &self.0 {
            Parts::Whole(v) => v.checksum(),
            Parts::Leased(l) => l.checksum(),
        }
    }

    /// Whether the bytes sit in a drive's registered buffers (direct mode).
    pub fn is_leased(&self) -> bool {
        matches!(self.0, Parts::Leased(_))
    }

    /// A copy of the value's bytes in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len() as usize);
        for part in self.parts() {
            bytes.extend_from_slice(part);
        }
        bytes
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
