//! Whole frames held in memory: handshake frames, refusals and the fuzzable slice decoder.

use crate::header::HEADER_LEN;
use crate::{Header, Limits, ProtoError, Status, checksum};

/// A frame with its body in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header exactly as received (the MAC is computed over these bytes).
    pub raw_header: [u8; HEADER_LEN],
    /// The decoded header.
    pub header: Header,
    /// The key bytes.
    pub key: Vec<u8>,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

impl Frame {
    /// Decodes one frame from the front of `input`, returning it and the bytes consumed.
    /// Lengths are checked against `limits` before any allocation; the MAC is not checked
    /// (that needs a session: see [`crate::Opener`]), but the payload checksum is.
    pub fn decode(input: &[u8], limits: &Limits) -> Result<(Frame, usize), ProtoError> {
        let raw: [u8; HEADER_LEN] = input
            .get(..HEADER_LEN)
            .ok_or(ProtoError::Truncated {
                what: "frame header",
                need: HEADER_LEN,
                have: input.len(),
            })?
            .try_into()
            .expect("HEADER_LEN bytes");
        let header = Header::decode(&raw, limits)?;
        let key_end = HEADER_LEN + usize::from(header.key_len);
        let total = key_end + header.payload_len as usize;
        if input.len() < total {
            return Err(ProtoError::Truncated {
                what: "frame body",
                need: total,
                have: input.len(),
            });
        }
        let payload = &input[key_end..total];
        checksum::verify(payload, header.checksum)?;
        Ok((
            Frame {
                raw_header: raw,
                header,
                key: input[HEADER_LEN..key_end].to_vec(),
                payload: payload.to_vec(),
            },
            total,
        ))
    }

    /// If this frame reports a failure, the matching error.
    pub fn refusal(&self) -> Option<ProtoError> {
        (self.header.status != Status::Ok).then(|| ProtoError::Refused {
            status: self.header.status,
            message: String::from_utf8_lossy(&self.payload).into_owned(),
        })
    }
}

/// Encodes an unauthenticated frame (handshake frames and refusals sent before a session
/// exists). The MAC field is zero; the checksum is filled in.
pub fn encode_plain(mut header: Header, payload: &[u8]) -> Vec<u8> {
    header.key_len = 0;
    header.payload_len = u32::try_from(payload.len()).expect("small frame");
    header.checksum = checksum::of(payload);
    header.seq = 0;
    header.mac = [0; 32];
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(payload);
    out
}

/// Longest error message carried in a refusal or error response.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// Trims an error message to [`MAX_ERROR_MESSAGE`] bytes on a character boundary.
pub fn error_message(text: &str) -> &[u8] {
    let mut end = text.len().min(MAX_ERROR_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text.as_bytes()[..end]
}

/// An unauthenticated refusal of the frame whose raw header is `request`, sent before a session
/// exists: it echoes the request's opcode byte and request id as they arrived (even when the
/// header does not decode), sets `RESPONSE`, and carries the refused frame's version if this
/// build speaks it, else this build's newest. The connection is closed after it.
pub fn encode_refusal_of(request: &[u8; HEADER_LEN], err: &ProtoError) -> Vec<u8> {
    let request_id = u64::from_le_bytes(request[8..16].try_into().expect("8 bytes"));
    let mut header = Header::response(
        &Header::request(crate::Opcode::Ping, request_id),
        err.status(),
    );
    header.version = match request[4] {
        v @ 1..=crate::PROTOCOL_VERSION => v,
        _ => crate::PROTOCOL_VERSION,
    };
    let mut out = encode_plain(header, error_message(&err.to_string()));
    out[5] = request[5];
    out
}

/// An unauthenticated refusal of `request`, sent before a session exists (for example a
/// newer version or a failed proof); the connection is closed after it.
pub fn encode_refusal(request: &Header, err: &ProtoError) -> Vec<u8> {
    let mut header = Header::response(request, err.status());
    header.version = request.version.min(crate::PROTOCOL_VERSION);
    encode_plain(header, error_message(&err.to_string()))
}
