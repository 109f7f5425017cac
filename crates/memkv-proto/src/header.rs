//! The fixed 72-byte frame header.
//!
//! ```text
//! offset size field
//!  0      4   magic "MKVF"
//!  4      1   protocol version
//!  5      1   opcode
//!  6      2   flags
//!  8      8   request id
//! 16      2   status
//! 18      2   key length
//! 20      4   payload length
//! 24      8   payload checksum (xxh3-64)
//! 32      8   sequence number (per direction)
//! 40     32   MAC (HMAC-SHA256)
//! ```
//! All integers are little-endian.

use crate::{Flags, Limits, Opcode, ProtoError, Status};

/// Bytes in a header.
pub const HEADER_LEN: usize = 72;
/// Bytes of the header covered by the MAC (everything before the MAC itself).
pub const MAC_INPUT_LEN: usize = 40;
/// Bytes in a MAC.
pub const MAC_LEN: usize = 32;
/// The frame magic.
pub const MAGIC: [u8; 4] = *b"MKVF";
/// The newest protocol version this build speaks. Servers serve versions 1 and 2; 2 leaves
/// the values out of batch checksums ([`crate::coverage`]).
pub const PROTOCOL_VERSION: u8 = 2;

/// A decoded header. Lengths are validated against [`Limits`] by [`Header::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Protocol version of the frame.
    pub version: u8,
    /// Operation.
    pub opcode: Opcode,
    /// Flag bits.
    pub flags: Flags,
    /// Matches a response to its request; requests may complete out of order.
    pub request_id: u64,
    /// Outcome (responses); `Ok` in requests.
    pub status: Status,
    /// Length of the key that follows the header.
    pub key_len: u16,
    /// Length of the payload that follows the key.
    pub payload_len: u32,
    /// xxh3-64 of the payload.
    pub checksum: u64,
    /// Per-direction sequence number, starting at 0 after the handshake.
    pub seq: u64,
    /// HMAC-SHA256 over bytes 0..40, the key and (with `PAYLOAD_MAC`) the payload.
    pub mac: [u8; MAC_LEN],
}

impl Header {
    /// A request header with zero lengths, checksum, sequence and MAC.
    pub fn request(opcode: Opcode, request_id: u64) -> Header {
        Header {
            version: PROTOCOL_VERSION,
            opcode,
            flags: Flags::default(),
            request_id,
            status: Status::Ok,
            key_len: 0,
            payload_len: 0,
            checksum: 0,
            seq: 0,
            mac: [0; MAC_LEN],
        }
    }

    /// A response header to `request` with `status`.
    pub fn response(request: &Header, status: Status) -> Header {
        Header {
            flags: Flags::RESPONSE,
            status,
            ..Header::request(request.opcode, request.request_id)
        }
    }

    /// Whether this frame is a response.
    pub fn is_response(&self) -> bool {
        self.flags.contains(Flags::RESPONSE)
    }

    /// Bytes that follow the header (key plus payload).
    pub fn body_len(&self) -> u64 {
        u64::from(self.key_len) + u64::from(self.payload_len)
    }

    /// Writes the header into `out`.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = self.version;
        out[5] = self.opcode.code();
        out[6..8].copy_from_slice(&self.flags.0.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out[16..18].copy_from_slice(&self.status.code().to_le_bytes());
        out[18..20].copy_from_slice(&self.key_len.to_le_bytes());
        out[20..24].copy_from_slice(&self.payload_len.to_le_bytes());
        out[24..32].copy_from_slice(&self.checksum.to_le_bytes());
        out[32..40].copy_from_slice(&self.seq.to_le_bytes());
        out[40..72].copy_from_slice(&self.mac);
    }

    /// The encoded header as an array.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        self.encode(&mut out);
        out
    }

    /// Decodes and validates a header: magic, version, opcode, status, flags and every length
    /// against `limits`, so the caller may then allocate `body_len()` bytes safely.
    pub fn decode(buf: &[u8; HEADER_LEN], limits: &Limits) -> Result<Header, ProtoError> {
        let magic: [u8; 4] = buf[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(ProtoError::BadMagic { found: magic });
        }
        let version = buf[4];
        if version > PROTOCOL_VERSION {
            return Err(ProtoError::UnsupportedVersion {
                peer: version,
                ours: PROTOCOL_VERSION,
            });
        }
        if version == 0 {
            return Err(ProtoError::BadRequest(
                "protocol version 0 is not valid".into(),
            ));
        }
        let opcode = Opcode::from_code(buf[5]).ok_or(ProtoError::UnknownOpcode(buf[5]))?;
        let flags = Flags(le_u16(buf, 6));
        if flags.0 & !Flags::KNOWN.0 != 0 {
            return Err(ProtoError::UnknownFlags(flags.0));
        }
        let status_code = le_u16(buf, 16);
        let status =
            Status::from_code(status_code).ok_or(ProtoError::UnknownStatus(status_code))?;
        let header = Header {
            version,
            opcode,
            flags,
            request_id: le_u64(buf, 8),
            status,
            key_len: le_u16(buf, 18),
            payload_len: u32::from_le_bytes(buf[20..24].try_into().expect("4 bytes")),
            checksum: le_u64(buf, 24),
            seq: le_u64(buf, 32),
            mac: buf[40..72].try_into().expect("32 bytes"),
        };
        if !header.is_response() && header.status != Status::Ok {
            return Err(ProtoError::BadRequest(format!(
                "a {:?} request carries status {}; requests carry status 0",
                header.opcode, status_code
            )));
        }
        header.check_limits(limits)?;
        Ok(header)
    }

    fn check_limits(&self, limits: &Limits) -> Result<(), ProtoError> {
        let key_len = usize::from(self.key_len);
        if key_len > limits.max_key_len {
            return Err(ProtoError::TooLarge {
                what: "key",
                len: key_len as u64,
                limit: limits.max_key_len as u64,
            });
        }
        if key_len > 0 && (self.is_response() || !self.opcode.takes_key()) {
            return Err(ProtoError::BadRequest(format!(
                "{:?} {} carries no key, but key length is {key_len}",
                self.opcode,
                if self.is_response() {
                    "response"
                } else {
                    "request"
                }
            )));
        }
        let payload = u64::from(self.payload_len);
        if payload > limits.max_frame_payload {
            return Err(ProtoError::TooLarge {
                what: "frame payload",
                len: payload,
                limit: limits.max_frame_payload,
            });
        }
        let carries_one_value = matches!(
            (self.opcode, self.is_response()),
            (Opcode::TcpPut, false) | (Opcode::TcpGet, true)
        );
        if carries_one_value && payload > limits.max_value_len {
            return Err(ProtoError::TooLarge {
                what: "value",
                len: payload,
                limit: limits.max_value_len,
            });
        }
        Ok(())
    }
}

fn le_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(buf[at..at + 2].try_into().expect("2 bytes"))
}

fn le_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            key_len: 3,
            payload_len: 5,
            checksum: 0x0102_0304_0506_0708,
            seq: 9,
            mac: [0xAB; MAC_LEN],
            ..Header::request(Opcode::TcpPut, 42)
        }
    }

    #[test]
    fn round_trips() {
        let h = sample();
        assert_eq!(Header::decode(&h.to_bytes(), &Limits::DEFAULT), Ok(h));
    }

    #[test]
    fn refuses_bad_magic_and_newer_version() {
        let mut b = sample().to_bytes();
        b[0] = b'X';
        assert!(matches!(
            Header::decode(&b, &Limits::DEFAULT),
            Err(ProtoError::BadMagic { .. })
        ));
        let mut b = sample().to_bytes();
        b[4] = PROTOCOL_VERSION + 1;
        let err = Header::decode(&b, &Limits::DEFAULT).unwrap_err();
        assert_eq!(
            err,
            ProtoError::UnsupportedVersion {
                peer: PROTOCOL_VERSION + 1,
                ours: PROTOCOL_VERSION
            }
        );
        let text = err.to_string();
        assert!(
            text.contains(&(PROTOCOL_VERSION + 1).to_string())
                && text.contains(&PROTOCOL_VERSION.to_string()),
            "{text}"
        );
    }

    #[test]
    fn refuses_lengths_over_limits_before_allocation() {
        let mut h = sample();
        h.key_len = (MAX_KEY + 1) as u16;
        assert!(matches!(
            Header::decode(&h.to_bytes(), &Limits::DEFAULT),
            Err(ProtoError::TooLarge { what: "key", .. })
        ));
        let mut h = sample();
        h.payload_len = u32::MAX;
        assert!(matches!(
            Header::decode(&h.to_bytes(), &Limits::DEFAULT),
            Err(ProtoError::TooLarge {
                what: "frame payload",
                ..
            })
        ));
        let mut h = sample();
        h.payload_len = (Limits::DEFAULT.max_value_len + 1) as u32;
        assert!(matches!(
            Header::decode(&h.to_bytes(), &Limits::DEFAULT),
            Err(ProtoError::TooLarge { what: "value", .. })
        ));
    }

    #[test]
    fn refuses_a_key_on_an_op_without_one() {
        let mut h = sample();
        h.opcode = Opcode::Ping;
        assert!(matches!(
            Header::decode(&h.to_bytes(), &Limits::DEFAULT),
            Err(ProtoError::BadRequest(_))
        ));
    }

    #[test]
    fn refuses_a_request_with_a_status() {
        let mut h = sample();
        h.status = Status::NotFound;
        let err = Header::decode(&h.to_bytes(), &Limits::DEFAULT).unwrap_err();
        assert!(matches!(err, ProtoError::BadRequest(_)), "{err}");
        // A response may carry any known status.
        h.flags = Flags::RESPONSE;
        h.key_len = 0;
        assert_eq!(Header::decode(&h.to_bytes(), &Limits::DEFAULT), Ok(h));
    }

    const MAX_KEY: usize = crate::MAX_KEY_LEN;
}
