//! The shared authentication key and the key derivations built on it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Bytes in an authentication key.
pub const AUTH_KEY_LEN: usize = 32;
/// Bytes in a handshake nonce.
pub const NONCE_LEN: usize = 32;

/// The shared 32-byte key (64 hex characters). Never printed: `Debug` shows `<redacted>`.
#[derive(Clone)]
pub struct AuthKey([u8; AUTH_KEY_LEN]);

/// Number of hex characters in a written key.
pub const AUTH_KEY_HEX_LEN: usize = 2 * AUTH_KEY_LEN;

/// Why a hex string is not a valid key. Never echoes the text: it may be a real key with a typo.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyParseError {
    /// Wrong number of characters.
    #[error("expected {AUTH_KEY_HEX_LEN} hex characters, got {got}")]
    WrongLength {
        /// Characters present.
        got: usize,
    },
    /// A character outside 0-9, a-f, A-F (1-based position).
    #[error(
        "expected {AUTH_KEY_HEX_LEN} hex characters, found a non-hex character at position {position}"
    )]
    NotHex {
        /// 1-based position of the first bad character.
        position: usize,
    },
}

impl AuthKey {
    /// A key from raw bytes.
    pub fn from_bytes(bytes: [u8; AUTH_KEY_LEN]) -> AuthKey {
        AuthKey(bytes)
    }

    /// Parses 64 hex characters (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<AuthKey, KeyParseError> {
        let text = text.trim();
        let chars = text.chars().count();
        if chars != AUTH_KEY_HEX_LEN || text.len() != chars {
            return Err(KeyParseError::WrongLength { got: chars });
        }
        let mut out = [0u8; AUTH_KEY_LEN];
        for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or(KeyParseError::NotHex {
                position: 2 * i + 1,
            })?;
            let lo = hex_value(pair[1]).ok_or(KeyParseError::NotHex {
                position: 2 * i + 2,
            })?;
            out[i] = hi << 4 | lo;
        }
        Ok(AuthKey(out))
    }

    /// The key as 64 lowercase hex characters, for writing a key file. Handle with care.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The raw key bytes. Handle with care.
    pub fn as_bytes(&self) -> &[u8; AUTH_KEY_LEN] {
        &self.0
    }

    pub(crate) fn mac(&self) -> HmacSha256 {
        keyed(&self.0)
    }

    /// The DC access key of servers and clients sharing this auth key: the first 8 bytes
    /// (little-endian) of HMAC-SHA256(key, "memkv dc access key v1"). A DC target accepts only
    /// initiators presenting it, so a host without the auth key cannot reach the arena over
    /// DC; deriving it means no extra secret to distribute.
    pub fn dc_access_key(&self) -> u64 {
        let tag = hmac_parts(&self.mac(), &[b"memkv dc access key v1"]);
        u64::from_le_bytes(tag[..8].try_into().expect("8 bytes"))
    }
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(<redacted>)")
    }
}

impl std::fmt::Display for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(<redacted>)")
    }
}

impl PartialEq for AuthKey {
    /// Constant-time comparison.
    fn eq(&self, other: &AuthKey) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for AuthKey {}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

pub(crate) fn keyed(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// HMAC-SHA256 of the concatenated parts.
pub(crate) fn hmac_parts(mac: &HmacSha256, parts: &[&[u8]]) -> [u8; 32] {
    let mut m = mac.clone();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Everything both sides agreed on during the handshake; bound into every proof and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transcript {
    pub client_nonce: [u8; NONCE_LEN],
    pub server_nonce: [u8; NONCE_LEN],
    pub client_version: u8,
    pub version: u8,
    pub options: u8,
}

impl Transcript {
    fn bytes(&self) -> [u8; 2 * NONCE_LEN + 3] {
        let mut out = [0u8; 2 * NONCE_LEN + 3];
        out[..NONCE_LEN].copy_from_slice(&self.client_nonce);
        out[NONCE_LEN..2 * NONCE_LEN].copy_from_slice(&self.server_nonce);
        out[2 * NONCE_LEN] = self.client_version;
        out[2 * NONCE_LEN + 1] = self.version;
        out[2 * NONCE_LEN + 2] = self.options;
        out
    }

    pub fn client_proof(&self, key: &AuthKey) -> [u8; 32] {
        hmac_parts(&key.mac(), &[b"memkv/1 client proof", &self.bytes()])
    }

    pub fn server_proof(&self, key: &AuthKey) -> [u8; 32] {
        hmac_parts(&key.mac(), &[b"memkv/1 server proof", &self.bytes()])
    }

    /// Per-direction frame keys (client-to-server, server-to-client).
    pub fn frame_keys(&self, key: &AuthKey) -> ([u8; 32], [u8; 32]) {
        let secret = hmac_parts(&key.mac(), &[b"memkv/1 session", &self.bytes()]);
        let s = keyed(&secret);
        (
            hmac_parts(&s, &[b"memkv/1 client->server"]),
            hmac_parts(&s, &[b"memkv/1 server->client"]),
        )
    }
}

/// Constant-time equality of two MACs.
pub(crate) fn macs_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dc_access_key_matches_an_independent_hmac_and_differs_per_key() {
        // Expected value computed with Python's hmac module over key bytes 0..32.
        let key = AuthKey::from_bytes(std::array::from_fn(|i| i as u8));
        assert_eq!(key.dc_access_key(), 0x561542d1b5dfd81e);
        let other = AuthKey::from_bytes([7; AUTH_KEY_LEN]);
        assert_ne!(other.dc_access_key(), key.dc_access_key());
    }

    #[test]
    fn hex_round_trip_and_errors_do_not_echo() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let key = AuthKey::from_hex(hex).unwrap();
        assert_eq!(key.to_hex(), hex.to_lowercase());
        assert_eq!(format!("{key:?}"), "AuthKey(<redacted>)");
        assert_eq!(
            AuthKey::from_hex("abc"),
            Err(KeyParseError::WrongLength { got: 3 })
        );
        let bad = format!("{}zz", &hex[..62]);
        let err = AuthKey::from_hex(&bad).unwrap_err();
        assert_eq!(err, KeyParseError::NotHex { position: 63 });
        assert!(!err.to_string().contains("zz"));
        assert!(AuthKey::from_hex(&"é".repeat(32)).is_err());
    }

    #[test]
    fn directions_get_distinct_keys() {
        let t = Transcript {
            client_nonce: [1; 32],
            server_nonce: [2; 32],
            client_version: 1,
            version: 1,
            options: 0,
        };
        let (c2s, s2c) = t.frame_keys(&AuthKey::from_bytes([7; 32]));
        assert_ne!(c2s, s2c);
    }
}
