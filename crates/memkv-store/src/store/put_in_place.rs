//! Direct mode's puts filled in place: the caller reads a value straight into the drives'
//! registered buffers instead of handing the store a buffer of its own (see
//! `file/fill.rs`). Commits block on the drives: call [`DirectPut::commit`] where blocking is
//! allowed.

use std::sync::Arc;

use super::{Backend, Inner, Store};
use crate::config::StoreMode;
use crate::error::Result;
use crate::file::FillInPlace;

/// A direct-mode value being filled in place: fill [`Self::next_piece`] and report it with
/// [`Self::piece_filled`] until no piece is left, then [`Self::commit`]. Dropped uncommitted,
/// it frees its room once the writes already started have ended.
pub struct DirectPut {
    fill: FillInPlace,
    key: Box<[u8]>,
    store: Arc<Inner>,
}

impl Store {
    /// Room for a `len`-byte value under `key`, to be read straight into the drives' buffers.
    /// `Ok(None)` when the store is not in direct mode, or has no free room or no spare
    /// buffers right now: store the value with [`Store::put_checked`] then, which evicts and
    /// waits as needed. Never blocks.
    pub fn put_in_place(&self, key: &[u8], len: u64) -> Result<Option<DirectPut>> {
        let (StoreMode::Direct { .. }, Backend::File(f)) =
            (&self.inner.config.mode, &self.inner.backend)
        else {
            return Ok(None);
        };
        self.check_writable(key, len)?;
        Ok(f.fill_in_place(len).map(|fill| DirectPut {
            fill,
            key: key.into(),
            store: Arc::clone(&self.inner),
        }))
    }
}

impl DirectPut {
    /// The next piece of the value to fill, in order; `None` once every piece is filled.
    pub fn next_piece(&mut self) -> Option<&mut [u8]> {
        self.fill.next_piece()
    }

    /// The piece [`Self::next_piece`] gave is full: it is hashed and its write starts.
    pub fn piece_filled(&mut self) {
        if let Ok(f) = self.store.file_backend() {
            self.fill.piece_filled(f);
        }
    }

    pub fn len(&self) -> u64 {
        self.fill.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Publishes the value once it hashes (xxh3-64) to `checksum` and its bytes are durable,
    /// atomically replacing any previous value; blocks on the drives.
    pub fn commit(self, checksum: u64) -> Result<()> {
        let f = self.store.file_backend()?;
        f.commit_filled(&self.key, self.fill, checksum)
    }
}

impl std::fmt::Debug for DirectPut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectPut")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("len", &self.len())
            .finish()
    }
}
