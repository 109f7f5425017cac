//! Batch payloads. Every batch starts with a u32 item count, checked against
//! [`Limits::max_batch_items`] and against the bytes present before anything is allocated.
//!
//! | payload | item layout |
//! |---|---|
//! | BatchPut request | u16 key length, u32 value length, u64 checksum, key, value |
//! | BatchGet / BatchDelete / BatchExists request | u16 key length, key |
//! | BatchGet response | u16 status, u32 value length, u64 checksum, value |
//! | BatchPut / BatchDelete / BatchExists response | u16 status |

use crate::cursor::Cursor;
use crate::{Limits, ProtoError, Status};

/// One item of a BatchPut request, borrowed from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutItem<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// xxh3-64 of the value.
    pub checksum: u64,
}

/// One item of a BatchGet response, borrowed from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetItem<'a> {
    /// Ok or NotFound (or another failure).
    pub status: Status,
    /// The value (empty unless Ok).
    pub value: &'a [u8],
    /// xxh3-64 of the value.
    pub checksum: u64,
}

/// Bytes of a BatchGet response item before its value.
pub const GET_ITEM_HEADER_LEN: usize = 14;

/// Bytes of a BatchPut request item before its key and value.
pub const PUT_ITEM_HEADER_LEN: usize = 14;

fn count(c: &mut Cursor<'_>, limits: &Limits, min_item: usize) -> Result<usize, ProtoError> {
    let n = c.u32()? as usize;
    if n > limits.max_batch_items {
        return Err(ProtoError::TooManyItems {
            count: n as u64,
            limit: limits.max_batch_items as u64,
        });
    }
    if n.saturating_mul(min_item) > c.remaining() {
        return Err(ProtoError::BadRequest(format!(
            "batch claims {n} items but holds only {} bytes",
            c.remaining()
        )));
    }
    Ok(n)
}

fn key<'a>(c: &mut Cursor<'a>, limits: &Limits) -> Result<&'a [u8], ProtoError> {
    let len = usize::from(c.u16()?);
    if len > limits.max_key_len {
        return Err(ProtoError::TooLarge {
            what: "key",
            len: len as u64,
            limit: limits.max_key_len as u64,
        });
    }
    c.bytes(len)
}

fn status(code: u16) -> Result<Status, ProtoError> {
    Status::from_code(code).ok_or(ProtoError::UnknownStatus(code))
}

/// Encodes a BatchPut request.
pub fn encode_put_request(items: &[PutItem<'_>]) -> Vec<u8> {
    let size: usize = items
        .iter()
        .map(|i| PUT_ITEM_HEADER_LEN + i.key.len() + i.value.len())
        .sum();
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for i in items {
        out.extend_from_slice(&(i.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(i.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&i.checksum.to_le_bytes());
        out.extend_from_slice(i.key);
        out.extend_from_slice(i.value);
    }
    out
}

/// Decodes a BatchPut request. Item checksums are not verified here: the store verifies them
/// as it commits each value.
pub fn decode_put_request<'a>(
    payload: &'a [u8],
    limits: &Limits,
) -> Result<Vec<PutItem<'a>>, ProtoError> {
    let mut c = Cursor::new(payload, "BatchPut request");
    let n = count(&mut c, limits, PUT_ITEM_HEADER_LEN)?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let key_len = usize::from(c.u16()?);
        let value_len = u64::from(c.u32()?);
        let checksum = c.u64()?;
        if key_len > limits.max_key_len {
            return Err(ProtoError::TooLarge {
                what: "key",
                len: key_len as u64,
                limit: limits.max_key_len as u64,
            });
        }
        if value_len > limits.max_value_len {
            return Err(ProtoError::TooLarge {
                what: "value",
                len: value_len,
                limit: limits.max_value_len,
            });
        }
        let key = c.bytes(key_len)?;
        let value = c.bytes(value_len as usize)?;
        items.push(PutItem {
            key,
            value,
            checksum,
        });
    }
    c.finish()?;
    Ok(items)
}

/// Encodes a BatchGet, BatchDelete or BatchExists request.
pub fn encode_keys<K: AsRef<[u8]>>(keys: &[K]) -> Vec<u8> {
    let size: usize = keys.iter().map(|k| 2 + k.as_ref().len()).sum();
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for k in keys {
        out.extend_from_slice(&(k.as_ref().len() as u16).to_le_bytes());
        out.extend_from_slice(k.as_ref());
    }
    out
}

/// Decodes a BatchGet, BatchDelete or BatchExists request.
pub fn decode_keys<'a>(payload: &'a [u8], limits: &Limits) -> Result<Vec<&'a [u8]>, ProtoError> {
    let mut c = Cursor::new(payload, "batch key list");
    let n = count(&mut c, limits, 2)?;
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        keys.push(key(&mut c, limits)?);
    }
    c.finish()?;
    Ok(keys)
}

/// Encodes a status-per-item response (BatchPut, BatchDelete, BatchExists).
pub fn encode_statuses(statuses: &[Status]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 2 * statuses.len());
    out.extend_from_slice(&(statuses.len() as u32).to_le_bytes());
    for s in statuses {
        out.extend_from_slice(&s.code().to_le_bytes());
    }
    out
}

/// Decodes a status-per-item response.
pub fn decode_statuses(payload: &[u8], limits: &Limits) -> Result<Vec<Status>, ProtoError> {
    let mut c = Cursor::new(payload, "batch status list");
    let n = count(&mut c, limits, 2)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(status(c.u16()?)?);
    }
    c.finish()?;
    Ok(out)
}

/// The bytes that precede one BatchGet response item's value; a server writes these and the
/// value itself as separate slices, so values are never copied into the frame.
pub fn get_item_header(status: Status, value_len: u32, checksum: u64) -> [u8; GET_ITEM_HEADER_LEN] {
    let mut out = [0u8; GET_ITEM_HEADER_LEN];
    out[0..2].copy_from_slice(&status.code().to_le_bytes());
    out[2..6].copy_from_slice(&value_len.to_le_bytes());
    out[6..14].copy_from_slice(&checksum.to_le_bytes());
    out
}

/// Encodes a whole BatchGet response (tests and small responses).
pub fn encode_get_response(items: &[GetItem<'_>]) -> Vec<u8> {
    let mut out = (items.len() as u32).to_le_bytes().to_vec();
    for i in items {
        out.extend_from_slice(&get_item_header(i.status, i.value.len() as u32, i.checksum));
        out.extend_from_slice(i.value);
    }
    out
}

/// Decodes a BatchGet response. Each value's checksum is left for the caller to verify.
pub fn decode_get_response<'a>(
    payload: &'a [u8],
    limits: &Limits,
) -> Result<Vec<GetItem<'a>>, ProtoError> {
    let mut c = Cursor::new(payload, "BatchGet response");
    let n = count(&mut c, limits, GET_ITEM_HEADER_LEN)?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let status = status(c.u16()?)?;
        let len = u64::from(c.u32()?);
        let checksum = c.u64()?;
        if len > limits.max_value_len {
            return Err(ProtoError::TooLarge {
                what: "value",
                len,
                limit: limits.max_value_len,
            });
        }
        let value = c.bytes(len as usize)?;
        items.push(GetItem {
            status,
            value,
            checksum,
        });
    }
    c.finish()?;
    Ok(items)
}
