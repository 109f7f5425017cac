//! Payload checksums: xxh3-64, seed 0 (`memkv-checksum`: bit-identical to the reference, with
//! an AVX2 path chosen at run time; every put and get hashes its whole value on both ends).

use crate::ProtoError;
use memkv_checksum::{Xxh3Stream, copy_and_xxh3, xxh3};

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
    matches(of(bytes), expected)
}

/// Copies `bytes` into `dst` (the same length) and checks them against `expected`, reading
/// them once: a batch answer's values are verified as they are copied out of it. On a
/// mismatch `dst` holds the bad bytes; the caller reports the item as failed.
pub fn copy_verified(dst: &mut [u8], bytes: &[u8], expected: u64) -> Result<(), ProtoError> {
    matches(copy_and_xxh3(dst, bytes), expected)
}

fn matches(actual: u64, expected: u64) -> Result<(), ProtoError> {
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

    #[test]
    fn copy_verified_copies_and_checks_in_one_pass() {
        for len in [0, 100, 4096, 70_000] {
            let data: Vec<u8> = (0..len as u32).map(|i| (i * 13) as u8).collect();
            let mut dst = vec![0u8; len];
            copy_verified(&mut dst, &data, of(&data)).unwrap();
            assert_eq!(dst, data);
            let err = copy_verified(&mut dst, &data, of(&data) ^ 1).unwrap_err();
            assert!(matches!(err, ProtoError::ChecksumMismatch { .. }), "{err}");
        }
    }
}
