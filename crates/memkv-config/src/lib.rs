//! memkv-config: the pieces of configuration that the client, the server and the CLI share, so
//! that a size, a duration or the local key file means the same thing everywhere.
//!
//! * [`parse_size`] / [`ByteSize`]: "2 MiB", "1.5 GiB", "4K", "4096".
//! * [`parse_duration`]: "500ms", "10s", "2m", or a bare number in the caller's unit.
//! * [`key_file`]: where the generated auth key lives, reading it, and creating it atomically.
//! * [`read_to_string_limited`]: a small settings file, with a size limit pipes cannot evade;
//!   [`temp_path_for`]: where to write a file before renaming it into place.

#![forbid(unsafe_code)]

mod duration;
mod files;
pub mod key_file;
mod size;

pub use duration::{BareNumber, DurationError, parse_duration};
pub use files::{read_to_string_limited, temp_path_for};
pub use key_file::{KeyFileError, default_key_file_path, load_or_create_key_file, read_key_file};
pub use size::{ACCEPTED_SIZE_FORMS, ByteSize, SizeError, SizeText, parse_size};

/// A fresh auth key from the operating system's random source.
pub fn generate_auth_key() -> Result<memkv_proto::AuthKey, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(memkv_proto::AuthKey::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memkv_proto::{AuthKey, KeyParseError as AuthKeyError};
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
        assert_ne!(generate_auth_key().unwrap(), generate_auth_key().unwrap());
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
