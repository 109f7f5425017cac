//! Operation codes and header flags.

/// An operation. Responses reuse the request's opcode with [`Flags::RESPONSE`] set.
///
/// `Connect`, `TcpPut`, `TcpGet` and `TcpDelete` keep MemKV's public codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Handshake 1: client version, nonce and requested options.
    Hello = 0x01,
    /// Handshake 2: server nonce, negotiated version and server proof.
    Challenge = 0x02,
    /// Handshake 3: client proof.
    Proof = 0x03,
    /// Handshake 4: the server's first authenticated frame; the session is open.
    Ready = 0x04,
    /// Liveness check; the payload is echoed.
    Ping = 0x05,
    /// RDMA bootstrap over the authenticated TCP connection (MemKV public code).
    Connect = 0x06,
    /// Server storage counters.
    Stats = 0x07,
    /// Same-host transport bootstrap: a one-time token for collecting the arena's memfd over
    /// the server's Unix socket (a memkv extension; MemKV has no code for it).
    LocalAttach = 0x08,
    /// Does the key exist (committed)?
    Exists = 0x10,
    /// Remove a key (control-plane form; same semantics as `TcpDelete`).
    Delete = 0x11,
    /// Reserve space for a value to be written one-sided (two-phase put, step 1).
    Allocate = 0x12,
    /// Publish a filled reservation under its key (two-phase put, step 2).
    Commit = 0x13,
    /// Drop a reservation.
    Abort = 0x14,
    /// Pin a value for a one-sided read and return where it lives.
    Lookup = 0x15,
    /// Unpin a value pinned by `Lookup`.
    Release = 0x16,
    /// Put with the value inline in the frame (MemKV public code).
    TcpPut = 0x20,
    /// Get with the value inline in the response (MemKV public code).
    TcpGet = 0x21,
    /// Delete a key (MemKV public code).
    TcpDelete = 0x22,
    /// Many inline puts in one frame.
    BatchPut = 0x30,
    /// Many inline gets in one frame.
    BatchGet = 0x31,
    /// Many deletes in one frame.
    BatchDelete = 0x32,
    /// Many existence checks in one frame.
    BatchExists = 0x33,
}

impl Opcode {
    /// Every opcode, for tests and documentation.
    pub const ALL: [Opcode; 22] = [
        Opcode::Hello,
        Opcode::Challenge,
        Opcode::Proof,
        Opcode::Ready,
        Opcode::Ping,
        Opcode::Connect,
        Opcode::Stats,
        Opcode::LocalAttach,
        Opcode::Exists,
        Opcode::Delete,
        Opcode::Allocate,
        Opcode::Commit,
        Opcode::Abort,
        Opcode::Lookup,
        Opcode::Release,
        Opcode::TcpPut,
        Opcode::TcpGet,
        Opcode::TcpDelete,
        Opcode::BatchPut,
        Opcode::BatchGet,
        Opcode::BatchDelete,
        Opcode::BatchExists,
    ];

    /// Decodes a wire code; `None` for a code this build does not know.
    pub fn from_code(code: u8) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|op| *op as u8 == code)
    }

    /// The wire code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// A stable name (the variant name), for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Hello => "Hello",
            Opcode::Challenge => "Challenge",
            Opcode::Proof => "Proof",
            Opcode::Ready => "Ready",
            Opcode::Ping => "Ping",
            Opcode::Connect => "Connect",
            Opcode::Stats => "Stats",
            Opcode::LocalAttach => "LocalAttach",
            Opcode::Exists => "Exists",
            Opcode::Delete => "Delete",
            Opcode::Allocate => "Allocate",
            Opcode::Commit => "Commit",
            Opcode::Abort => "Abort",
            Opcode::Lookup => "Lookup",
            Opcode::Release => "Release",
            Opcode::TcpPut => "TcpPut",
            Opcode::TcpGet => "TcpGet",
            Opcode::TcpDelete => "TcpDelete",
            Opcode::BatchPut => "BatchPut",
            Opcode::BatchGet => "BatchGet",
            Opcode::BatchDelete => "BatchDelete",
            Opcode::BatchExists => "BatchExists",
        }
    }

    /// Handshake frames are authenticated by the proofs in their payloads, not by the header MAC.
    pub fn is_handshake(self) -> bool {
        matches!(
            self,
            Opcode::Hello | Opcode::Challenge | Opcode::Proof | Opcode::Ready
        )
    }

    /// Operations whose request carries a key in the frame's key field.
    pub fn takes_key(self) -> bool {
        matches!(
            self,
            Opcode::Exists
                | Opcode::Delete
                | Opcode::Allocate
                | Opcode::Lookup
                | Opcode::TcpPut
                | Opcode::TcpGet
                | Opcode::TcpDelete
        )
    }
}

/// Header flag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// The frame is a response to the request with the same request id.
    pub const RESPONSE: Flags = Flags(1 << 0);
    /// The MAC covers the payload too (negotiated at handshake for untrusted networks).
    pub const PAYLOAD_MAC: Flags = Flags(1 << 1);
    /// Bits this version defines; a frame with any other bit set is refused.
    pub const KNOWN: Flags = Flags(0b11);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_codes_are_memkvs() {
        assert_eq!(Opcode::Connect.code(), 0x06);
        assert_eq!(Opcode::TcpPut.code(), 0x20);
        assert_eq!(Opcode::TcpGet.code(), 0x21);
        assert_eq!(Opcode::TcpDelete.code(), 0x22);
    }

    #[test]
    fn every_code_round_trips_and_unknown_codes_are_none() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_code(op.code()), Some(op));
            assert_eq!(op.name(), format!("{op:?}"));
        }
        let known: Vec<u8> = Opcode::ALL.iter().map(|o| o.code()).collect();
        for code in 0..=u8::MAX {
            if !known.contains(&code) {
                assert_eq!(Opcode::from_code(code), None, "code {code:#04x}");
            }
        }
    }
}
