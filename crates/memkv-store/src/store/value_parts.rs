//! A get for sending: the value as the slices a socket write takes, which in direct mode are
//! the drive's own registered buffers (see `file/leased.rs`), so nothing copies the value
//! between the drive and the socket.

use super::{Backend, Store};
use crate::config::StoreMode;
use crate::error::Result;
use crate::file::LeasedRead;
use crate::value::ValueParts;

impl Store {
    /// The value under `key`, verified, as one or more slices: in direct mode read into the
    /// drive's registered buffers when the drive has buffers to spare (held until the result
    /// drops, so drop it once sent), otherwise as [`Store::get`] returns it. Blocks on the
    /// drives in drive-backed modes.
    pub fn get_parts(&self, key: &[u8]) -> Result<Option<ValueParts>> {
        self.get_parts_batch(&[key])
            .pop()
            .expect("one result per key")
    }

    /// [`Self::get_parts`] for each key, in order. In direct mode the reads of every value
    /// that finds buffers are in flight together; the others are read the usual way after.
    pub fn get_parts_batch(&self, keys: &[&[u8]]) -> Vec<Result<Option<ValueParts>>> {
        let (StoreMode::Direct { .. }, Backend::File(f)) =
            (&self.inner.config.mode, &self.inner.backend)
        else {
            return keys
                .iter()
                .map(|k| Ok(self.get(k)?.map(ValueParts::whole)))
                .collect();
        };
        let leased = f.read_leased_many(keys, &self.inner.checksum_failures);
        keys.iter()
            .zip(leased)
            .map(|(key, read)| match read? {
                LeasedRead::Found(v) => Ok(Some(ValueParts::leased(v))),
                LeasedRead::Missing => Ok(None),
                LeasedRead::Unavailable => Ok(self.get(key)?.map(ValueParts::whole)),
            })
            .collect()
    }
}
