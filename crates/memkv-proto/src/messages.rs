//! Fixed-layout payloads of the control operations (two-phase put, pinned reads, stats).

use crate::ProtoError;
use crate::cursor::Cursor;

macro_rules! fixed_message {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$fmeta:meta])* $field:ident : $ty:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// Encoded size in bytes.
            pub const LEN: usize = 0 $(+ std::mem::size_of::<$ty>())*;

            /// Encodes the message.
            pub fn encode(&self) -> Vec<u8> {
                let mut out = Vec::with_capacity(Self::LEN);
                $(out.extend_from_slice(&self.$field.to_le_bytes());)*
                out
            }

            /// Decodes the message; the payload must be exactly [`Self::LEN`] bytes.
            pub fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
                let mut c = Cursor::new(payload, $what);
                let msg = $name { $($field: c.$ty()?,)* };
                c.finish()?;
                Ok(msg)
            }
        }
    };
}

fixed_message!(
    /// Allocate request: reserve `len` bytes for the frame's key.
    AllocateRequest, "Allocate request" {
        /// Bytes to reserve.
        len: u64,
        /// Lease in milliseconds; 0 takes the server's default.
        lease_ms: u32,
    }
);

fixed_message!(
    /// Allocate response: where to write the value one-sided.
    AllocateResponse, "Allocate response" {
        /// Names the reservation in Commit and Abort.
        reservation: u64,
        /// Remote address for RDMA WRITE (0 when the server has no RDMA).
        addr: u64,
        /// Remote key for RDMA WRITE (0 when the server has no RDMA).
        rkey: u32,
        /// The lease granted, in milliseconds.
        lease_ms: u32,
    }
);

fixed_message!(
    /// Commit request: publish a filled reservation.
    CommitRequest, "Commit request" {
        /// From the Allocate response.
        reservation: u64,
        /// xxh3-64 of the bytes written.
        checksum: u64,
    }
);

fixed_message!(
    /// Commit request of bytes a same-host client copied into the arena through its mapping
    /// (the 24-byte form of Commit; a 16-byte Commit is [`CommitRequest`]). The client hashed
    /// exactly the bytes it wrote, in the copy's own pass, so the server takes `checksum`
    /// without reading the value again, once `arena_id` shows the mapping was of this arena.
    SharedCommitRequest, "Commit request (shared memory)" {
        /// From the Allocate response.
        reservation: u64,
        /// xxh3-64 of the bytes written, computed while copying them.
        checksum: u64,
        /// The arena the client mapped (LocalAttach's `arena_id`).
        arena_id: u64,
    }
);

fixed_message!(
    /// Abort request: drop a reservation.
    AbortRequest, "Abort request" {
        /// From the Allocate response.
        reservation: u64,
    }
);

fixed_message!(
    /// Lookup request: pin the frame's key for a one-sided read.
    LookupRequest, "Lookup request" {
        /// Lease in milliseconds; 0 takes the server's default.
        lease_ms: u32,
    }
);

fixed_message!(
    /// Lookup response: where the pinned value lives.
    LookupResponse, "Lookup response" {
        /// Names the pin in Release.
        pin: u64,
        /// Remote address for RDMA READ (0 when the server has no RDMA).
        addr: u64,
        /// Remote key for RDMA READ (0 when the server has no RDMA).
        rkey: u32,
        /// The lease granted, in milliseconds.
        lease_ms: u32,
        /// Value length in bytes.
        len: u64,
        /// xxh3-64 of the value.
        checksum: u64,
    }
);

fixed_message!(
    /// Release request: unpin.
    ReleaseRequest, "Release request" {
        /// From the Lookup response.
        pin: u64,
    }
);

fixed_message!(
    /// Stats response: the server's storage counters.
    StatsResponse, "Stats response" {
        /// Bytes of storage the server holds in all.
        raw_bytes: u64,
        /// Bytes available for values.
        usable_bytes: u64,
        /// Bytes in use.
        used_bytes: u64,
        /// Committed values.
        blocks: u64,
        /// Values evicted since start.
        evictions: u64,
        /// Blocks dropped for failing their checksum since start.
        checksum_failures: u64,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_the_documented_ones() {
        assert_eq!(AllocateRequest::LEN, 12);
        assert_eq!(AllocateResponse::LEN, 24);
        assert_eq!(CommitRequest::LEN, 16);
        assert_eq!(SharedCommitRequest::LEN, 24);
        assert_eq!(LookupResponse::LEN, 40);
        assert_eq!(StatsResponse::LEN, 48);
    }

    #[test]
    fn wrong_lengths_are_refused() {
        assert!(CommitRequest::decode(&[0; 15]).is_err());
        assert!(CommitRequest::decode(&[0; 17]).is_err());
        let m = CommitRequest {
            reservation: 5,
            checksum: 9,
        };
        assert_eq!(CommitRequest::decode(&m.encode()), Ok(m));
    }
}
