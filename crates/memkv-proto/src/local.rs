//! The same-host transport's bootstrap: the LocalAttach answer, and the one exchange on the
//! server's Unix socket that trades its token for the arena's memfd.
//!
//! The token is what ties the Unix socket (which anyone on the host may connect to) to an
//! authenticated session: only a client that passed the handshake learns one, each is good
//! once and for a few seconds.

use crate::ProtoError;
use crate::cursor::Cursor;

/// Bytes in a LocalAttach token.
pub const TOKEN_LEN: usize = 32;
/// Longest abstract Unix socket name (`sun_path` holds 108 bytes, one is the leading NUL).
pub const MAX_SOCKET_NAME: usize = 100;

/// LocalAttach response payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAttachResponse {
    /// Trade it on the Unix socket for the arena's memfd.
    pub token: [u8; TOKEN_LEN],
    /// The arena's first byte in the server's address space: Allocate and Lookup answer
    /// `addr = arena_addr + offset`.
    pub arena_addr: u64,
    /// Bytes of the arena a client maps.
    pub arena_len: u64,
    /// Names this arena (random, per server process): a client's Commit of bytes it wrote
    /// through its mapping carries it, so a mapping of another arena (a restarted server's
    /// old one) is refused by name instead of committing bytes the server never saw.
    pub arena_id: u64,
    /// The server's abstract Unix socket (the name without its leading NUL).
    pub socket_name: Vec<u8>,
}

impl LocalAttachResponse {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TOKEN_LEN + 26 + self.socket_name.len());
        out.extend_from_slice(&self.token);
        out.extend_from_slice(&self.arena_addr.to_le_bytes());
        out.extend_from_slice(&self.arena_len.to_le_bytes());
        out.extend_from_slice(&self.arena_id.to_le_bytes());
        out.extend_from_slice(&(self.socket_name.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.socket_name);
        out
    }

    pub fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(payload, "LocalAttach response");
        let token = c.bytes(TOKEN_LEN)?.try_into().expect("TOKEN_LEN bytes");
        let arena_addr = c.u64()?;
        let arena_len = c.u64()?;
        let arena_id = c.u64()?;
        let name_len = c.u16()? as usize;
        if name_len == 0 || name_len > MAX_SOCKET_NAME {
            return Err(ProtoError::BadRequest(format!(
                "LocalAttach response: socket name of {name_len} bytes (1 to {MAX_SOCKET_NAME})"
            )));
        }
        let socket_name = c.bytes(name_len)?.to_vec();
        c.finish()?;
        Ok(LocalAttachResponse {
            token,
            arena_addr,
            arena_len,
            arena_id,
            socket_name,
        })
    }
}

/// The server's one message on the Unix socket: granted (the memfd rides along), or refused
/// with a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachAnswer {
    Granted,
    Refused(String),
}

impl AttachAnswer {
    const GRANTED: u8 = 0;
    const REFUSED: u8 = 1;

    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Granted => vec![Self::GRANTED],
            Self::Refused(reason) => {
                let mut out = vec![Self::REFUSED];
                // Fits the socket message however long the reason.
                out.extend(reason.bytes().take(400));
                out
            }
        }
    }

    pub fn decode(message: &[u8]) -> Result<Self, ProtoError> {
        match message.split_first() {
            Some((&Self::GRANTED, [])) => Ok(Self::Granted),
            Some((&Self::REFUSED, reason)) => {
                Ok(Self::Refused(String::from_utf8_lossy(reason).into_owned()))
            }
            _ => Err(ProtoError::BadRequest(format!(
                "local attach answer of {} bytes starting {:?} (expected 0 alone, or 1 and a reason)",
                message.len(),
                message.first()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> LocalAttachResponse {
        LocalAttachResponse {
            token: [7; TOKEN_LEN],
            arena_addr: 0x7f00_1234_5000,
            arena_len: 1 << 30,
            arena_id: 0x1234_5678_9abc_def0,
            socket_name: b"memkv/0123456789abcdef".to_vec(),
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(LocalAttachResponse::decode(&m.encode()).unwrap(), m);
        for a in [
            AttachAnswer::Granted,
            AttachAnswer::Refused("stale token".into()),
        ] {
            assert_eq!(AttachAnswer::decode(&a.encode()).unwrap(), a);
        }
    }

    #[test]
    fn names_out_of_range_are_refused() {
        let mut m = sample();
        m.socket_name = vec![b'x'; MAX_SOCKET_NAME + 1];
        let err = LocalAttachResponse::decode(&m.encode()).unwrap_err();
        assert!(
            err.to_string().contains("socket name of 101 bytes"),
            "{err}"
        );
        m.socket_name.clear();
        assert!(LocalAttachResponse::decode(&m.encode()).is_err());
        assert!(AttachAnswer::decode(&[]).is_err());
        assert!(AttachAnswer::decode(&[0, 1]).is_err());
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(m) = LocalAttachResponse::decode(&bytes) {
                prop_assert_eq!(&m.encode(), &bytes);
            }
            let _ = AttachAnswer::decode(&bytes);
        }
    }
}
