//! The shared 32-byte HMAC key, written as 64 hex characters in configs and key files.

use std::fmt;

/// Number of hex characters in a written key.
pub const AUTH_KEY_HEX_LEN: usize = 64;

/// A 32-byte authentication key. Debug and Display never reveal it.
#[derive(Clone)]
pub struct AuthKey([u8; 32]);

/// Why a key string was refused. Messages never echo the key text, even a bad one: it may be a
/// real key with a typo.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthKeyError {
    #[error("expected {AUTH_KEY_HEX_LEN} hex characters, got {got}")]
    WrongLength { got: usize },
    #[error(
        "expected {AUTH_KEY_HEX_LEN} hex characters, found a non-hex character at position {position}"
    )]
    NotHex { position: usize },
}

impl AuthKey {
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Parses 64 hex characters (either case). Surrounding whitespace is ignored.
    pub fn from_hex(text: &str) -> Result<Self, AuthKeyError> {
        let text = text.trim();
        let got = text.chars().count();
        if got != AUTH_KEY_HEX_LEN {
            return Err(AuthKeyError::WrongLength { got });
        }
        let digits = text.as_bytes();
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            let high = hex_value(digits[2 * index]).ok_or(AuthKeyError::NotHex {
                position: 2 * index + 1,
            })?;
            let low = hex_value(digits[2 * index + 1]).ok_or(AuthKeyError::NotHex {
                position: 2 * index + 2,
            })?;
            *byte = (high << 4) | low;
        }
        Ok(Self(bytes))
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes))
    }

    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex characters. Only for writing key files and configs.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(AUTH_KEY_HEX_LEN);
        for byte in self.0 {
            out.push(char::from(DIGITS[usize::from(byte >> 4)]));
            out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        out
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Compares every byte so the time taken does not depend on where keys differ.
impl PartialEq for AuthKey {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for AuthKey {}

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(<redacted>)")
    }
}

impl fmt::Display for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";

    #[test]
    fn parses_and_renders_hex() {
        let key = AuthKey::from_hex(KEY).unwrap();
        assert_eq!(key.as_bytes()[1], 0x11);
        assert_eq!(key.as_bytes()[31], 0xff);
        assert_eq!(key.to_hex(), KEY.to_lowercase());
    }

    #[test]
    fn never_prints_the_key() {
        let key = AuthKey::from_hex(KEY).unwrap();
        assert_eq!(format!("{key:?}"), "AuthKey(<redacted>)");
        assert_eq!(format!("{key}"), "AuthKey(<redacted>)");
        assert_eq!(
            format!("{:?}", Some(key.clone())),
            "Some(AuthKey(<redacted>))"
        );
    }

    #[test]
    fn refuses_wrong_length_and_non_hex() {
        assert_eq!(
            AuthKey::from_hex("abcd").unwrap_err().to_string(),
            "expected 64 hex characters, got 4"
        );
        let bad = format!("{}g", &KEY[..63]);
        assert_eq!(
            AuthKey::from_hex(&bad).unwrap_err(),
            AuthKeyError::NotHex { position: 64 }
        );
        let multibyte = format!("{}é", &KEY[..63]);
        assert!(AuthKey::from_hex(&multibyte).is_err());
    }

    #[test]
    fn generated_keys_differ() {
        assert_ne!(AuthKey::generate().unwrap(), AuthKey::generate().unwrap());
    }

    proptest! {
        #[test]
        fn hex_round_trips(bytes in any::<[u8; 32]>()) {
            let key = AuthKey::from_bytes(bytes);
            prop_assert_eq!(AuthKey::from_hex(&key.to_hex()).unwrap(), key);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,70}") {
            let _ = AuthKey::from_hex(&text);
        }
    }
}
