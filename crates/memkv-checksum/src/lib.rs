//! memkv-checksum: xxh3-64 (seed 0, default secret), memkv's integrity checksum, with a fused
//! "copy and hash" pass.
//!
//! Clients compute it for every value they send and check it on every value they receive; the
//! store checks it on every put and every file-mode read, so its speed bounds theirs. It is a
//! crate of its own so that clients share the fast path without pulling in the storage engine.
//! Its `unsafe` is the AVX2 kernels' (SIMD intrinsics and unaligned loads and stores), each
//! block with a SAFETY note.
//! `xxhash-rust` picks its SIMD path at compile time (SSE2 on a
//! default x86-64 build). Here the long-input loop (inputs over 240 bytes, the ones that cost)
//! has an AVX2 version chosen at run time when the CPU has it; the copy variant stores each
//! 64-byte stripe while it is in registers, so a put reads its source once (and a file-mode
//! read of a mapped drive reads the page cache once). Results are bit-identical to
//! `xxhash_rust::xxh3::xxh3_64` (checked by the tests); short inputs and CPUs without AVX2 use
//! the library.
//!
//! Forms: one-shot ([`xxh3`], [`copy_and_xxh3`]); [`IncrementalXxh3`] for a buffer of known
//! length that fills front to back; [`Xxh3Stream`] for data of unknown length in chunks.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod incremental;
mod stream;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

pub use incremental::IncrementalXxh3;
pub use stream::Xxh3Stream;

const STRIPE: usize = 64;
const SECRET_LEN: usize = 192;
const STRIPES_PER_BLOCK: usize = (SECRET_LEN - STRIPE) / 8;
const BLOCK: usize = STRIPE * STRIPES_PER_BLOCK;
const MIDSIZE_MAX: usize = 240;

const PRIME32_1: u64 = 0x9E37_79B1;
const PRIME32_2: u64 = 0x85EB_CA77;
const PRIME32_3: u64 = 0xC2B2_AE3D;
const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;

/// The xxh3 default secret (from the xxHash specification).
const SECRET: [u8; SECRET_LEN] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
];

/// xxh3-64 of `input`.
pub fn xxh3(input: &[u8]) -> u64 {
    if input.len() <= MIDSIZE_MAX {
        return xxhash_rust::xxh3::xxh3_64(input);
    }
    if has_avx2() {
        // SAFETY: `has_avx2` confirmed at run time that this CPU supports AVX2, the only
        // requirement of a `#[target_feature(enable = "avx2")]` function.
        unsafe { avx2::hash_long(input, None) }
    } else {
        long_baseline(input, None)
    }
}

/// Copies `src` into `dst` (same length) and returns xxh3-64 of the bytes, in one pass.
///
/// The hash is of the bytes `dst` received: each byte is read from `src` once, and that read
/// is both stored and hashed. `src` may be memory another process can rewrite meanwhile (a
/// same-host client's mapping of the server's arena): a second read could see other bytes
/// than the copy got, and a check of the hash would pass bytes it never covered.
///
/// # Panics
/// If the lengths differ, like [`slice::copy_from_slice`].
pub fn copy_and_xxh3(dst: &mut [u8], src: &[u8]) -> u64 {
    assert_eq!(dst.len(), src.len(), "copy_and_xxh3 needs equal lengths");
    if src.len() <= MIDSIZE_MAX {
        let mut once = [0u8; MIDSIZE_MAX];
        let once = &mut once[..src.len()];
        once.copy_from_slice(src);
        dst.copy_from_slice(once);
        return xxhash_rust::xxh3::xxh3_64(once);
    }
    if has_avx2() {
        // SAFETY: as in `xxh3`: AVX2 support was checked at run time.
        unsafe { avx2::hash_long(src, Some(dst)) }
    } else {
        long_baseline(src, Some(dst))
    }
}

fn has_avx2() -> bool {
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Off x86-64 `has_avx2` is always false, so these are never reached; they keep the callers
/// free of per-architecture branches.
#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::STRIPE;

    pub(super) fn initial() -> [u64; 8] {
        [0; 8]
    }

    pub(super) unsafe fn hash_long(_: &[u8], _: Option<&mut [u8]>) -> u64 {
        unreachable!("AVX2 kernels exist only on x86-64")
    }

    pub(super) unsafe fn fold(_: &mut [u64; 8], _: &[u8], _: Option<&mut [u8]>) {
        unreachable!("AVX2 kernels exist only on x86-64")
    }

    pub(super) unsafe fn finish(_: &[u64; 8], _: &[u8], _: &[u8; STRIPE], _: usize) -> u64 {
        unreachable!("AVX2 kernels exist only on x86-64")
    }
}

/// Without AVX2 the library's compile-time SIMD path is as fast as a portable loop would be.
fn long_baseline(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    let Some(d) = dst else {
        return xxhash_rust::xxh3::xxh3_64(src);
    };
    // Read each piece of `src` once, into a buffer that both the copy and the hash take
    // (see `copy_and_xxh3`).
    let mut hasher = xxhash_rust::xxh3::Xxh3Default::new();
    let mut once = [0u8; 4 * BLOCK];
    for (from, to) in src.chunks(once.len()).zip(d.chunks_mut(once.len())) {
        let once = &mut once[..from.len()];
        once.copy_from_slice(from);
        to.copy_from_slice(once);
        hasher.update(once);
    }
    hasher.digest()
}

fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn merge(acc: &[u64; 8], start: u64) -> u64 {
    let mut result = start;
    for i in 0..4 {
        let s = 11 + 16 * i;
        let a = u128::from(acc[2 * i] ^ read64(&SECRET, s));
        let b = u128::from(acc[2 * i + 1] ^ read64(&SECRET, s + 8));
        let p = a * b;
        result = result.wrapping_add((p as u64) ^ ((p >> 64) as u64));
    }
    result ^= result >> 37;
    result = result.wrapping_mul(0x1656_6791_9E37_79F9);
    result ^ (result >> 32)
}
