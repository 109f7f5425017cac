//! A get for sending: the value as the slices a socket write takes, which in direct mode are
//! the drive's own registered buffers (see `file/leased.rs`), so nothing copies the value
//! between the drive and the socket.

use super::{Backend, Store};
use crate::config::StoreMode;
use crate::error::{Result, StoreError};
use crate::file::LeasedRead;
use crate::value::ValueParts;

impl Store {
    /// The value under `key`, verified, as one or more slices: in direct mode read into the
    /// drive's registered buffers when the drive has buffers to spare (held until the result
    /// drops, so drop it once sent), otherwise as [`Store::get`] returns it. Blocks on the
    /// drives in drive-backed modes.
    pub fn get_parts(&self, key: &[u8]) -> Result<Option<ValueParts>> {
        self.get_parts_batch(&[key], u64::MAX)
            .pop()
            .expect("one result per key")
    }

    /// [`Self::get_parts`] for each key, in order, for an answer with room for `max_bytes` of
    /// values: a value that does not fit in what the earlier ones left is refused (`TooLarge`)
    /// without being read, so a batch naming one large key many times costs the drives and
    /// the server's memory one answer, not every value it names. In direct mode the reads of
    /// every value that fits and finds buffers are in flight together; the others are read the
    /// usual way after.
    pub fn get_parts_batch(
        &self,
        keys: &[&[u8]],
        max_bytes: u64,
    ) -> Vec<Result<Option<ValueParts>>> {
        let leased = self.read_leased_within(keys, max_bytes);
        let mut left = max_bytes;
        keys.iter()
            .zip(leased)
            .map(|(key, leased)| {
                let found = match leased.transpose()? {
                    Some(LeasedRead::Found(v)) => Some(ValueParts::leased(v)),
                    Some(LeasedRead::Missing) => None,
                    Some(LeasedRead::Unavailable) | None => self.whole_within(key, left)?,
                };
                match found {
                    // Replaced by a longer value since its length was looked up.
                    Some(v) if v.len() > left => Err(no_room(v.len(), left)),
                    Some(v) => {
                        left -= v.len();
                        Ok(Some(v))
                    }
                    None => Ok(None),
                }
            })
            .collect()
    }

    /// Direct mode: the leased reads of the values that fit in `max_bytes` by their indexed
    /// lengths, in order (`None` for a key not read this way); nothing in the other modes.
    fn read_leased_within(
        &self,
        keys: &[&[u8]],
        max_bytes: u64,
    ) -> Vec<Option<Result<LeasedRead>>> {
        let (StoreMode::Direct { .. }, Backend::File(f)) =
            (&self.inner.config.mode, &self.inner.backend)
        else {
            return keys.iter().map(|_| None).collect();
        };
        let mut left = max_bytes;
        let fits: Vec<bool> = keys
            .iter()
            .map(|k| match self.value_len(k) {
                Ok(Some(len)) if len <= left => {
                    left -= len;
                    true
                }
                _ => false,
            })
            .collect();
        let chosen: Vec<&[u8]> = keys
            .iter()
            .zip(&fits)
            .filter_map(|(k, fit)| fit.then_some(*k))
            .collect();
        let mut read = f
            .read_leased_many(&chosen, &self.inner.checksum_failures)
            .into_iter();
        fits.iter()
            .map(|fit| if *fit { read.next() } else { None })
            .collect()
    }

    /// The value as [`Store::get`] reads it, if it is at most `limit` bytes long; a longer one
    /// is refused before a drive-backed store reads it or makes room for it.
    fn whole_within(&self, key: &[u8], limit: u64) -> Result<Option<ValueParts>> {
        if matches!(self.inner.backend, Backend::File(_)) {
            match self.value_len(key)? {
                None => return Ok(None),
                Some(len) if len > limit => return Err(no_room(len, limit)),
                Some(_) => {}
            }
        }
        Ok(self.get(key)?.map(ValueParts::whole))
    }
}

fn no_room(len: u64, left: u64) -> StoreError {
    StoreError::TooLarge {
        what: "value for the room left in the answer",
        len,
        limit: left,
    }
}
