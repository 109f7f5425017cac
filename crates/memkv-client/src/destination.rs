//! Caller memory that a get's value is read into straight from the socket.
//!
//! A response arrives on the connection's reader task, which outlives any one call, so the
//! memory it writes into must be owned by the request while it is in flight: a destination
//! travels with its request and comes back with the answer. Borrowed slices
//! ([`Client::get_batch_into`](crate::Client::get_batch_into)) cannot travel that way; their
//! values are read into a vector first and copied.

use std::any::Any;

use crate::{Error, Result};

/// Memory a value can be read into, owned by its request while the request is in flight.
///
/// Implement it for buffers whose bytes stay valid wherever the value moves (a `Vec<u8>`, a
/// boxed slice, a binding's handle on memory exported by another runtime). If the caller stops
/// waiting (a deadline, a dropped future) while its value is arriving, the destination is not
/// given back: the reader stops writing into it and drops it at once (the rest of the value is
/// read into memory of its own). A caller that must know when its memory is free again (a
/// binding handing it back to a garbage-collected runtime) waits for that drop.
pub trait ReadDestination: Any + Send {
    /// The bytes a value may be written to; a value lands at the front.
    fn as_mut_bytes(&mut self) -> &mut [u8];
}

impl ReadDestination for Vec<u8> {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        self
    }
}

impl ReadDestination for Box<[u8]> {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        self
    }
}

/// A type-erased destination, as requests carry them.
pub(crate) type BoxedDestination = Box<dyn ReadDestination>;

/// Recovers the caller's destination type from a boxed one.
pub(crate) fn unbox<D: ReadDestination>(dest: BoxedDestination) -> D {
    let any: Box<dyn Any> = dest;
    *any.downcast::<D>()
        .expect("a destination comes back as the type it was sent as")
}

/// Why a batch answer's value was not taken.
pub(crate) enum Found {
    /// It failed its checksum.
    Corrupt(memkv_proto::ProtoError),
    /// The caller's buffer cannot hold it.
    Refused(Error),
}

/// [`copy_into`] for a value not checked yet: copied and checked against `checksum` in one
/// pass (a batch answer's values). On a mismatch `buf` holds the bad bytes.
pub(crate) fn copy_verified_into(
    value: &[u8],
    checksum: u64,
    buf: &mut [u8],
) -> std::result::Result<usize, Found> {
    let dest = front(buf, value.len()).map_err(Found::Refused)?;
    memkv_proto::checksum::copy_verified(dest, value, checksum).map_err(Found::Corrupt)?;
    Ok(value.len())
}

/// Copies `value` to the front of `buf`; its length, or why it does not fit.
pub(crate) fn copy_into(value: &[u8], buf: &mut [u8]) -> Result<usize> {
    front(buf, value.len())?.copy_from_slice(value);
    Ok(value.len())
}

/// The first `len` bytes of `buf`, or why a value of `len` bytes does not fit.
fn front(buf: &mut [u8], len: usize) -> Result<&mut [u8]> {
    let capacity = buf.len() as u64;
    buf.get_mut(..len).ok_or(Error::BufferTooSmall {
        len: len as u64,
        capacity,
    })
}
