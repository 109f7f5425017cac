//! Frame sealing and opening for an established session.
//!
//! Each direction has its own key and sequence counter. The MAC covers header bytes 0..40
//! (which include the sequence number and the payload checksum) and the key, and also the
//! payload when the session negotiated payload MACs. A frame whose MAC, sequence or checksum
//! does not verify is refused; the runtime then closes the connection.

use crate::auth::{HmacSha256, keyed, macs_equal};
use crate::coverage::Coverage;
use crate::header::{HEADER_LEN, MAC_INPUT_LEN};
use crate::{Flags, Header, Limits, Opcode, ProtoError, Status, checksum};
use hmac::Mac;

/// Seals outgoing frames: assigns sequence numbers, checksums and MACs.
#[derive(Clone)]
pub struct Sealer {
    mac: HmacSha256,
    next_seq: u64,
    version: u8,
    payload_mac: bool,
}

/// Verifies incoming frames.
#[derive(Clone)]
pub struct Opener {
    mac: HmacSha256,
    next_seq: u64,
    version: u8,
    payload_mac: bool,
    limits: Limits,
}

/// The two halves of an authenticated session, ready to be split across reader and writer.
pub struct Session {
    /// Outgoing direction.
    pub sealer: Sealer,
    /// Incoming direction.
    pub opener: Opener,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("next_seq", &self.next_seq)
            .field("version", &self.version)
            .field("payload_mac", &self.payload_mac)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("next_seq", &self.next_seq)
            .field("version", &self.version)
            .field("payload_mac", &self.payload_mac)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("sealer", &self.sealer)
            .field("opener", &self.opener)
            .finish()
    }
}

impl Session {
    pub(crate) fn new(
        send_key: &[u8; 32],
        recv_key: &[u8; 32],
        version: u8,
        payload_mac: bool,
        limits: Limits,
    ) -> Session {
        Session {
            sealer: Sealer {
                mac: keyed(send_key),
                next_seq: 0,
                version,
                payload_mac,
            },
            opener: Opener {
                mac: keyed(recv_key),
                next_seq: 0,
                version,
                payload_mac,
                limits,
            },
        }
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> u8 {
        self.sealer.version
    }

    /// Whether payloads are covered by the MAC.
    pub fn payload_mac(&self) -> bool {
        self.sealer.payload_mac
    }
}

fn frame_mac(
    base: &HmacSha256,
    header_prefix: &[u8],
    key: &[u8],
    payload: Option<&[&[u8]]>,
) -> [u8; 32] {
    let mut m = base.clone();
    m.update(header_prefix);
    m.update(key);
    for part in payload.unwrap_or(&[]) {
        m.update(part);
    }
    m.finalize().into_bytes().into()
}

impl Sealer {
    /// The session's protocol version.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Seals `header` for sending with `key` and `payload` (given in parts, as it will be
    /// written): fills version, lengths, flags, checksum, sequence and MAC, and returns the
    /// encoded header. The payload is hashed here, as far as its [`Coverage`] goes.
    pub fn seal(&mut self, header: &mut Header, key: &[u8], payload: &[&[u8]]) -> [u8; HEADER_LEN] {
        let response = header.flags.contains(Flags::RESPONSE);
        let sum = Coverage::of(self.version, header.opcode, response).checksum_parts(payload);
        self.seal_with_checksum(header, key, payload, sum)
    }

    /// Like [`Sealer::seal`] with a checksum the caller already holds (for example the one
    /// stored with a block), so large payloads are not hashed again on the way out.
    pub fn seal_with_checksum(
        &mut self,
        header: &mut Header,
        key: &[u8],
        payload: &[&[u8]],
        sum: u64,
    ) -> [u8; HEADER_LEN] {
        self.seal_inner(header, None, key, payload, sum)
    }

    /// Seals the refusal of a frame whose raw header is `request`: a response that echoes the
    /// request's opcode byte and request id exactly as they arrived (even when the header
    /// failed its checks, so an unknown opcode is echoed as it was), with `status`, no key,
    /// and `message` (at most [`crate::frame::MAX_ERROR_MESSAGE`] bytes) as its payload. It
    /// takes the next sequence number like any frame. The sender closes the connection after
    /// it. Returns the header; `message` follows it on the wire.
    pub fn seal_refusal(
        &mut self,
        request: &[u8; HEADER_LEN],
        status: Status,
        message: &[u8],
    ) -> [u8; HEADER_LEN] {
        let request_id = u64::from_le_bytes(request[8..16].try_into().expect("8 bytes"));
        let mut header = Header {
            flags: Flags::RESPONSE,
            status,
            ..Header::request(Opcode::Ping, request_id)
        };
        let sum = checksum::of(message);
        self.seal_inner(&mut header, Some(request[5]), &[], &[message], sum)
    }

    /// [`Sealer::seal_refusal`] as one buffer: the header, then the message.
    pub fn refusal(&mut self, request: &[u8; HEADER_LEN], err: &ProtoError) -> Vec<u8> {
        let message = crate::frame::error_message(&err.to_string()).to_vec();
        let head = self.seal_refusal(request, err.status(), &message);
        let mut out = head.to_vec();
        out.extend_from_slice(&message);
        out
    }

    fn seal_inner(
        &mut self,
        header: &mut Header,
        opcode_byte: Option<u8>,
        key: &[u8],
        payload: &[&[u8]],
        sum: u64,
    ) -> [u8; HEADER_LEN] {
        let payload_len: usize = payload.iter().map(|p| p.len()).sum();
        header.version = self.version;
        header.key_len = u16::try_from(key.len()).expect("key length checked by caller");
        header.payload_len = u32::try_from(payload_len).expect("payload length checked by caller");
        header.checksum = sum;
        header.seq = self.next_seq;
        if self.payload_mac {
            header.flags = header.flags.with(Flags::PAYLOAD_MAC);
        }
        header.mac = [0; 32];
        let mut bytes = header.to_bytes();
        if let Some(op) = opcode_byte {
            bytes[5] = op;
        }
        let covered = self.payload_mac.then_some(payload);
        header.mac = frame_mac(&self.mac, &bytes[..MAC_INPUT_LEN], key, covered);
        bytes[MAC_INPUT_LEN..].copy_from_slice(&header.mac);
        self.next_seq += 1;
        bytes
    }

    /// Seals and encodes a whole frame into one buffer (for small frames).
    pub fn frame(&mut self, mut header: Header, key: &[u8], payload: &[u8]) -> Vec<u8> {
        let head = self.seal(&mut header, key, &[payload]);
        let mut out = Vec::with_capacity(HEADER_LEN + key.len() + payload.len());
        out.extend_from_slice(&head);
        out.extend_from_slice(key);
        out.extend_from_slice(payload);
        out
    }

    /// The sequence number the next frame will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

impl Opener {
    /// Decodes a header and checks version, limits and sequence, before the body is read.
    pub fn header(&self, raw: &[u8; HEADER_LEN]) -> Result<Header, ProtoError> {
        let header = Header::decode(raw, &self.limits)?;
        if header.version != self.version {
            return Err(ProtoError::BadRequest(format!(
                "a protocol {} frame in a protocol {} session",
                header.version, self.version
            )));
        }
        if header.seq != self.next_seq {
            return Err(ProtoError::BadSequence {
                expected: self.next_seq,
                got: header.seq,
            });
        }
        let flagged = header.flags.contains(Flags::PAYLOAD_MAC);
        if self.payload_mac && !flagged {
            return Err(ProtoError::BadRequest(
                "session requires payload MACs but the frame has none".into(),
            ));
        }
        if flagged && !self.payload_mac {
            return Err(ProtoError::BadRequest(
                "the frame sets PAYLOAD_MAC in a session without payload MACs".into(),
            ));
        }
        Ok(header)
    }

    /// Verifies a whole frame (MAC, sequence and, when `check_checksum`, the payload checksum)
    /// and advances the sequence. Pass `check_checksum = false` only when the caller verifies
    /// the checksum itself (the store does when it commits a value).
    pub fn verify(
        &mut self,
        raw: &[u8; HEADER_LEN],
        key: &[u8],
        payload: &[u8],
        check_checksum: bool,
    ) -> Result<Header, ProtoError> {
        let header = self.header(raw)?;
        if key.len() != usize::from(header.key_len)
            || payload.len() as u64 != u64::from(header.payload_len)
        {
            return Err(ProtoError::BadRequest(
                "frame body length differs from its header".into(),
            ));
        }
        let covered: &[&[u8]] = &[payload];
        let expected = frame_mac(
            &self.mac,
            &raw[..MAC_INPUT_LEN],
            key,
            header.flags.contains(Flags::PAYLOAD_MAC).then_some(covered),
        );
        if !macs_equal(&expected, &header.mac) {
            return Err(ProtoError::BadMac);
        }
        self.next_seq += 1;
        if check_checksum {
            let response = header.flags.contains(Flags::RESPONSE);
            Coverage::of(self.version, header.opcode, response).verify(payload, header.checksum)?;
        }
        Ok(header)
    }

    /// Verifies a frame whose MAC leaves its payload out (no `PAYLOAD_MAC`) from its header and
    /// key alone, before its payload is read, and advances the sequence: for a receiver that
    /// reads the payload straight to where it goes and checks its checksum itself.
    pub fn verify_before_payload(
        &mut self,
        raw: &[u8; HEADER_LEN],
        key: &[u8],
    ) -> Result<Header, ProtoError> {
        let header = self.header(raw)?;
        if header.flags.contains(Flags::PAYLOAD_MAC) {
            return Err(ProtoError::BadRequest(
                "a frame whose MAC covers its payload verified without it".into(),
            ));
        }
        if key.len() != usize::from(header.key_len) {
            return Err(ProtoError::BadRequest(
                "frame key length differs from its header".into(),
            ));
        }
        let expected = frame_mac(&self.mac, &raw[..MAC_INPUT_LEN], key, None);
        if !macs_equal(&expected, &header.mac) {
            return Err(ProtoError::BadMac);
        }
        self.next_seq += 1;
        Ok(header)
    }

    /// The limits this opener enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}
