//! The store's integrity checksum, xxh3-64 (seed 0, default secret), for clients and servers
//! that must compute the same value the store checks.
//!
//! Results are bit-identical to `xxhash_rust::xxh3::xxh3_64`. Inputs longer than 240 bytes go
//! through an AVX2 loop chosen at run time when the CPU has it (about 1.8x the library's
//! default SSE2 build on this project's benchmark machine); otherwise the library is used.

pub use crate::arena::Xxh3Stream;

/// xxh3-64 of `bytes`.
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    crate::arena::xxh3(bytes)
}

/// Copies `src` into `dst` and returns xxh3-64 of the bytes, reading `src` once (for filling
/// a send or registered buffer while hashing it).
///
/// # Panics
/// If the lengths differ, like [`slice::copy_from_slice`].
pub fn copy_and_xxh3_64(dst: &mut [u8], src: &[u8]) -> u64 {
    crate::arena::copy_and_xxh3(dst, src)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The public forms against the reference, at any length up to 64 KiB and more, any
        /// alignment and any chunking of the stream.
        #[test]
        fn public_forms_match_reference(
            data in proptest::collection::vec(any::<u8>(), 0..70_000),
            shift in 0usize..64,
            chunk in 1usize..9000,
        ) {
            let src = &data[shift.min(data.len())..];
            let want = xxhash_rust::xxh3::xxh3_64(src);
            prop_assert_eq!(xxh3_64(src), want);
            let mut dst = vec![0; src.len()];
            prop_assert_eq!(copy_and_xxh3_64(&mut dst, src), want);
            prop_assert_eq!(&dst[..], src);
            let mut stream = Xxh3Stream::new();
            for part in src.chunks(chunk) {
                stream.update(part);
            }
            prop_assert_eq!(stream.digest(), want);
        }
    }
}
