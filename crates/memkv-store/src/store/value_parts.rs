//! A get for sending: the value as the slices a socket write takes, which in direct mode are
//! the drive's own registered buffers (see `file/leased.rs`), so nothing copies the value
//! between the drive and the socket.

use super::{Backend, Store};
use crate::config::{StoreMode, check_key};
use crate::error::Result;
use crate::file::LeasedRead;
use crate::value::ValueParts;

impl Store {
    /// The value under `key`, verified, as one or more slices: in direct mode read into the
    /// drive's registered buffers when the drive has buffers to spare (held until the result
    /// drops, so drop it once sent), otherwise as [`Store::get`] returns it. Blocks on the
    /// drives in drive-backed modes.
    pub fn get_parts(&self, key: &[u8]) -> Result<Option<ValueParts>> {
        check_key(key)?;
        if let (StoreMode::Direct { .. }, Backend::File(f)) =
            (&self.inner.config.mode, &self.inner.backend)
        {
            match f.read_leased(key, &self.inner.checksum_failures)? {
                LeasedRead::Found(v) => return Ok(Some(ValueParts::leased(v))),
                LeasedRead::Missing => return Ok(None),
                LeasedRead::Unavailable => {}
            }
        }
        Ok(self.get(key)?.map(ValueParts::whole))
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
        // A key the store refuses is looked up as the empty key, which the index never holds,
        // and refused below.
        let valid: Vec<&[u8]> = keys
            .iter()
            .map(|k| if check_key(k).is_ok() { *k } else { &[][..] })
            .collect();
        let leased = f.read_leased_many(&valid, &self.inner.checksum_failures);
        keys.iter()
            .zip(leased)
            .map(|(key, read)| {
                check_key(key)?;
                match read? {
                    LeasedRead::Found(v) => Ok(Some(ValueParts::leased(v))),
                    LeasedRead::Missing => Ok(None),
                    LeasedRead::Unavailable => Ok(self.get(key)?.map(ValueParts::whole)),
                }
            })
            .collect()
    }
}
