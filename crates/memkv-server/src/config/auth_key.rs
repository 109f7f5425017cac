//! The shared 32-byte HMAC key, written as 64 hex characters in configs and key files. The
//! type is the protocol's own ([`memkv_proto::AuthKey`]); this module adds key generation.

pub use memkv_proto::{AUTH_KEY_HEX_LEN, AuthKey, KeyParseError as AuthKeyError};

/// A fresh key from the operating system's random source.
pub fn generate() -> Result<AuthKey, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(AuthKey::from_bytes(bytes))
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
        assert_ne!(generate().unwrap(), generate().unwrap());
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
