//! Payload checksums: xxh3-64, seed 0 (`memkv-checksum`: bit-identical to the reference, with
//! an AVX2 path chosen at run time; every put and get hashes its whole value on both ends).

use crate::ProtoError;
use memkv_checksum::{Xxh3Stream, xxh3};

/// The checksum of one buffer.
pub fn of(bytes: &[u8]) -> u64 {
    xxh3(bytes)
}

/// The checksum of a payload given in parts; equal to [`of`] over their concatenation.
pub fn of_parts(parts: &[&[u8]]) -> u64 {
    match parts {
        [] => xxh3(&[]),
        [one] => xxh3(one),
        many => {
            let mut h = Xxh3Stream::new();
            for p in many {
                h.update(p);
            }
            h.digest()
        }
    }
}

/// Checks `bytes` against `expected`.
pub fn verify(bytes: &[u8], expected: u64) -> Result<(), ProtoError> {
    let actual = of(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(ProtoError::ChecksumMismatch { expected, actual })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_equal_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(
            of_parts(&[&data[..3], &data[3..5000], &data[5000..]]),
            of(&data)
        );
        assert_eq!(of_parts(&[]), of(&[]));
        assert!(verify(&data, of(&data)).is_ok());
        assert!(verify(&data, of(&data) ^ 1).is_err());
        assert_eq!(of(&data), xxhash_rust::xxh3::xxh3_64(&data));
    }
}
