//! What a frame's header checksum covers.
//!
//! In protocol 1 it covers the whole payload. From protocol 2 on, the checksum of a BatchPut
//! request and of a BatchGet response leaves the values out. Each item already carries its
//! value's own xxh3-64, which the store checks as it commits a put and the client checks as it
//! takes a get, so hashing every value a second time for the frame bought no safety: it was a
//! tenth of the server's CPU on batched 4 KiB gets (the response's values are read cold from
//! the arena). The frame checksum still covers everything else (the count, each item's lengths,
//! status, key and value checksum), and the MAC covers the frame checksum, so every byte stays
//! covered exactly once.
//!
//! A payload that does not parse as its kind of batch is covered whole, so a malformed batch
//! passes its checksum and is refused by the decoder by name, and a damaged one fails its
//! checksum: either way only that request fails.

use crate::batch::{GET_ITEM_HEADER_LEN, PUT_ITEM_HEADER_LEN};
use crate::cursor::Cursor;
use crate::{Opcode, ProtoError, checksum};

/// The first protocol version whose batch checksums leave the values out.
pub const VALUES_OUTSIDE_CHECKSUM_SINCE: u8 = 2;

/// Which bytes of a payload its frame's checksum covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Every byte.
    Whole,
    /// A BatchPut request: the count and each item's header and key, not its value.
    PutRequestItems,
    /// A BatchGet response: the count and each item's header, not its value.
    GetResponseItems,
}

impl Coverage {
    /// The coverage of a frame in a session of `version`.
    pub fn of(version: u8, opcode: Opcode, response: bool) -> Coverage {
        if version < VALUES_OUTSIDE_CHECKSUM_SINCE {
            return Coverage::Whole;
        }
        match (opcode, response) {
            (Opcode::BatchPut, false) => Coverage::PutRequestItems,
            (Opcode::BatchGet, true) => Coverage::GetResponseItems,
            _ => Coverage::Whole,
        }
    }

    /// The checksum of a payload held in one piece.
    pub fn checksum(self, payload: &[u8]) -> u64 {
        let covered = match self {
            Coverage::Whole => None,
            Coverage::PutRequestItems => put_request_items(payload).ok(),
            Coverage::GetResponseItems => get_response_items(payload).ok(),
        };
        checksum::of(covered.as_deref().unwrap_or(payload))
    }

    /// The checksum of a payload given in parts. A batch split across parts is joined first:
    /// senders on a hot path pass the sum of the bytes they hold apart from the values instead
    /// ([`items_checksum`], [`get_response_checksum`]).
    pub fn checksum_parts(self, parts: &[&[u8]]) -> u64 {
        match (self, parts) {
            (Coverage::Whole, _) => checksum::of_parts(parts),
            (_, [one]) => self.checksum(one),
            _ => self.checksum(&parts.concat()),
        }
    }

    /// Checks `payload` against the checksum its frame carries.
    pub fn verify(self, payload: &[u8], expected: u64) -> Result<(), ProtoError> {
        let actual = self.checksum(payload);
        if actual == expected {
            Ok(())
        } else {
            Err(ProtoError::ChecksumMismatch { expected, actual })
        }
    }
}

/// The checksum of a batch's covered bytes held in one buffer, in order: for a BatchPut
/// request the count, then each item's 14-byte header and key.
pub fn items_checksum(covered: &[u8]) -> u64 {
    checksum::of(covered)
}

/// The checksum of a BatchGet response from its count and item headers (the server holds them
/// apart from the values, which it writes from where they are stored).
pub fn get_response_checksum<'a>(
    count: &[u8; 4],
    heads: impl ExactSizeIterator<Item = &'a [u8; GET_ITEM_HEADER_LEN]>,
) -> u64 {
    let mut covered = Vec::with_capacity(4 + heads.len() * GET_ITEM_HEADER_LEN);
    covered.extend_from_slice(count);
    for head in heads {
        covered.extend_from_slice(head);
    }
    checksum::of(&covered)
}

/// A BatchPut request's covered bytes: the count, each item's header and key.
fn put_request_items(payload: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let mut c = Cursor::new(payload, "BatchPut request");
    let mut covered = c.bytes(4)?.to_vec();
    let count = u32::from_le_bytes(covered[..4].try_into().expect("4 bytes"));
    for _ in 0..count {
        let head = c.bytes(PUT_ITEM_HEADER_LEN)?;
        let key_len = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let value_len = u32::from_le_bytes(head[2..6].try_into().expect("4 bytes")) as usize;
        covered.extend_from_slice(head);
        covered.extend_from_slice(c.bytes(key_len)?);
        c.bytes(value_len)?;
    }
    c.finish()?;
    Ok(covered)
}

/// A BatchGet response's covered bytes: the count and each item's header.
fn get_response_items(payload: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let mut c = Cursor::new(payload, "BatchGet response");
    let mut covered = c.bytes(4)?.to_vec();
    let count = u32::from_le_bytes(covered[..4].try_into().expect("4 bytes"));
    for _ in 0..count {
        let head = c.bytes(GET_ITEM_HEADER_LEN)?;
        let value_len = u32::from_le_bytes(head[2..6].try_into().expect("4 bytes")) as usize;
        covered.extend_from_slice(head);
        c.bytes(value_len)?;
    }
    c.finish()?;
    Ok(covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use crate::batch::{
        GetItem, PutItem, encode_get_response, encode_put_request, get_item_header,
    };
    use proptest::prelude::*;

    fn put_items(values: &[Vec<u8>]) -> Vec<u8> {
        let keys: Vec<Vec<u8>> = (0..values.len())
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        let items: Vec<PutItem<'_>> = keys
            .iter()
            .zip(values)
            .map(|(key, value)| PutItem {
                key,
                value,
                checksum: checksum::of(value),
            })
            .collect();
        encode_put_request(&items)
    }

    #[test]
    fn version_one_and_other_opcodes_cover_everything() {
        assert_eq!(Coverage::of(1, Opcode::BatchPut, false), Coverage::Whole);
        assert_eq!(Coverage::of(1, Opcode::BatchGet, true), Coverage::Whole);
        assert_eq!(Coverage::of(2, Opcode::BatchPut, true), Coverage::Whole);
        assert_eq!(Coverage::of(2, Opcode::BatchGet, false), Coverage::Whole);
        assert_eq!(Coverage::of(2, Opcode::TcpPut, false), Coverage::Whole);
        let payload = put_items(&[vec![1; 100]]);
        assert_eq!(Coverage::Whole.checksum(&payload), checksum::of(&payload));
    }

    #[test]
    fn the_servers_parts_and_the_clients_payload_agree() {
        let values = [vec![7u8; 300], Vec::new(), vec![9u8; 5]];
        let items: Vec<GetItem<'_>> = values
            .iter()
            .map(|v| GetItem {
                status: if v.is_empty() {
                    Status::NotFound
                } else {
                    Status::Ok
                },
                value: v,
                checksum: checksum::of(v),
            })
            .collect();
        let payload = encode_get_response(&items);
        let heads: Vec<[u8; GET_ITEM_HEADER_LEN]> = items
            .iter()
            .map(|i| get_item_header(i.status, i.value.len() as u32, i.checksum))
            .collect();
        let count = (items.len() as u32).to_le_bytes();
        assert_eq!(
            get_response_checksum(&count, heads.iter()),
            Coverage::GetResponseItems.checksum(&payload)
        );
        assert_ne!(
            Coverage::GetResponseItems.checksum(&payload),
            checksum::of(&payload)
        );
    }

    #[test]
    fn a_payload_that_is_not_a_batch_is_covered_whole() {
        for junk in [&b""[..], b"\x05\0\0\0", b"\x01\0\0\0\xff\xff"] {
            assert_eq!(Coverage::PutRequestItems.checksum(junk), checksum::of(junk));
            assert_eq!(
                Coverage::GetResponseItems.checksum(junk),
                checksum::of(junk)
            );
        }
        let mut trailing = put_items(&[vec![1; 10]]);
        trailing.push(0);
        assert_eq!(
            Coverage::PutRequestItems.checksum(&trailing),
            checksum::of(&trailing)
        );
    }

    proptest! {
        /// A flipped bit outside the values fails the frame checksum; one inside a value leaves
        /// the frame checksum alone and fails that value's own checksum instead.
        #[test]
        fn every_byte_is_covered_once(
            values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..6),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let payload = put_items(&values);
            let sum = Coverage::PutRequestItems.checksum(&payload);
            let mut damaged = payload.clone();
            let i = at.index(damaged.len());
            damaged[i] ^= 1 << bit;
            let decoded = crate::batch::decode_put_request(&payload, &crate::Limits::DEFAULT).unwrap();
            let in_value = decoded.iter().any(|item| {
                let start = item.value.as_ptr() as usize - payload.as_ptr() as usize;
                (start..start + item.value.len()).contains(&i)
            });
            let frame_ok = Coverage::PutRequestItems.verify(&damaged, sum).is_ok();
            if in_value {
                prop_assert!(frame_ok);
                let items = crate::batch::decode_put_request(&damaged, &crate::Limits::DEFAULT).unwrap();
                prop_assert!(items.iter().any(|item| checksum::of(item.value) != item.checksum));
            } else {
                prop_assert!(!frame_ok);
            }
        }
    }
}
