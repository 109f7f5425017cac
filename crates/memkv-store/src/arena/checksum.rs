//! xxh3-64, with a fused "copy into the arena and hash" pass.
//!
//! The hash is the store's integrity check, computed on every put and every file-mode read, so
//! its speed bounds theirs. `xxhash-rust` picks its SIMD path at compile time (SSE2 on a
//! default x86-64 build); here the long-input loop (inputs over 240 bytes, the ones that cost)
//! is written once and compiled twice: for AVX2, chosen at run time when the CPU has it, and for
//! the baseline target. The copy variant stores each 64-byte stripe while it is in registers,
//! so a put reads its source once. Results are bit-identical to `xxhash_rust::xxh3::xxh3_64`
//! (checked by the tests below). Inputs up to 240 bytes use the library directly.

use std::sync::OnceLock;

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
pub(crate) fn xxh3(input: &[u8]) -> u64 {
    if input.len() <= MIDSIZE_MAX {
        return xxhash_rust::xxh3::xxh3_64(input);
    }
    if has_avx2() {
        // SAFETY: `has_avx2` confirmed at run time that this CPU supports AVX2, the only
        // requirement of a `#[target_feature(enable = "avx2")]` function.
        unsafe { long_avx2(input, None) }
    } else {
        long_baseline(input, None)
    }
}

/// Copies `src` into `dst` (same length) and returns xxh3-64 of the bytes, in one pass.
pub(crate) fn copy_and_xxh3(dst: &mut [u8], src: &[u8]) -> u64 {
    assert_eq!(dst.len(), src.len(), "copy_and_xxh3 needs equal lengths");
    if src.len() <= MIDSIZE_MAX {
        dst.copy_from_slice(src);
        return xxhash_rust::xxh3::xxh3_64(src);
    }
    if has_avx2() {
        // SAFETY: as in `xxh3`: AVX2 support was checked at run time.
        unsafe { long_avx2(src, Some(dst)) }
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn long_avx2(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    avx2::hash_long(src, dst)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn long_avx2(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    hash_long(src, dst)
}

/// The same algorithm as [`hash_long`] with the accumulator in two 256-bit registers.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{BLOCK, PRIME32_1, PRIME32_2, PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3};
    use super::{PRIME64_4, PRIME64_5, SECRET, SECRET_LEN, STRIPE, STRIPES_PER_BLOCK, merge};

    /// One 64-byte stripe: optionally copied to `dst`, folded into the accumulator.
    ///
    /// # Safety
    /// `src` must be readable and `dst` (if not null) writable for 64 bytes; `secret` readable
    /// for 64 bytes; the CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn accumulate(acc: &mut [__m256i; 2], src: *const u8, dst: *mut u8, secret: *const u8) {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: the caller guarantees 64 readable/writable bytes at each pointer, and
            // `j * 32 + 32 <= 64`; `loadu`/`storeu` accept any alignment.
            unsafe {
                let data = _mm256_loadu_si256(src.add(32 * j).cast());
                if !dst.is_null() {
                    _mm256_storeu_si256(dst.add(32 * j).cast(), data);
                }
                let key = _mm256_xor_si256(data, _mm256_loadu_si256(secret.add(32 * j).cast()));
                let key_hi = _mm256_shuffle_epi32::<0x31>(key);
                let product = _mm256_mul_epu32(key, key_hi);
                let swapped = _mm256_shuffle_epi32::<0x4E>(data);
                *a = _mm256_add_epi64(product, _mm256_add_epi64(*a, swapped));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn scramble(acc: &mut [__m256i; 2]) {
        let prime = _mm256_set1_epi32(PRIME32_1 as i32);
        let secret = &SECRET[SECRET_LEN - STRIPE..];
        for (j, a) in acc.iter_mut().enumerate() {
            let mut k = [0i64; 4];
            for (i, lane) in k.iter_mut().enumerate() {
                let at = 32 * j + 8 * i;
                *lane = i64::from_le_bytes(secret[at..at + 8].try_into().unwrap());
            }
            let v = _mm256_xor_si256(*a, _mm256_srli_epi64::<47>(*a));
            let key = _mm256_xor_si256(v, _mm256_setr_epi64x(k[0], k[1], k[2], k[3]));
            let key_hi = _mm256_shuffle_epi32::<0x31>(key);
            let lo = _mm256_mul_epu32(key, prime);
            let hi = _mm256_mul_epu32(key_hi, prime);
            *a = _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(hi));
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn hash_long(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
        let len = src.len();
        assert!(len > STRIPE, "long hash needs more than one stripe");
        let src_ptr = src.as_ptr();
        let dst_ptr = match dst {
            Some(d) => {
                assert_eq!(
                    d.len(),
                    len,
                    "copy destination must match the source length"
                );
                d.as_mut_ptr()
            }
            None => std::ptr::null_mut(),
        };
        let secret = SECRET.as_ptr();
        let init = [
            PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1,
        ];
        let lanes = |i: usize| {
            _mm256_setr_epi64x(
                init[i] as i64,
                init[i + 1] as i64,
                init[i + 2] as i64,
                init[i + 3] as i64,
            )
        };
        let mut acc = [lanes(0), lanes(4)];
        let offset = |p: *mut u8, at: usize| if p.is_null() { p } else { p.wrapping_add(at) };
        let blocks = (len - 1) / BLOCK;
        for b in 0..blocks {
            for n in 0..STRIPES_PER_BLOCK {
                let at = b * BLOCK + n * STRIPE;
                // SAFETY: `at + 64 <= blocks * BLOCK <= len`, so 64 bytes are in bounds of
                // `src` and of `dst` (same length); `n * 8 + 64 <= SECRET_LEN`; AVX2 is enabled.
                unsafe {
                    accumulate(
                        &mut acc,
                        src_ptr.add(at),
                        offset(dst_ptr, at),
                        secret.add(n * 8),
                    )
                };
            }
            scramble(&mut acc);
        }
        let tail_start = blocks * BLOCK;
        let tail_stripes = ((len - 1) - tail_start) / STRIPE;
        for n in 0..tail_stripes {
            let at = tail_start + n * STRIPE;
            // SAFETY: `at + 64 <= len - 1`; `n < 16` so the secret offset stays in bounds.
            unsafe {
                accumulate(
                    &mut acc,
                    src_ptr.add(at),
                    offset(dst_ptr, at),
                    secret.add(n * 8),
                )
            };
        }
        let tail_end = tail_start + tail_stripes * STRIPE;
        if !dst_ptr.is_null() {
            // SAFETY: `tail_end <= len` and `dst_ptr` is valid for `len` bytes and does not
            // overlap `src` (distinct `&mut` and `&` borrows).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src_ptr.add(tail_end),
                    dst_ptr.add(tail_end),
                    len - tail_end,
                )
            };
        }
        // SAFETY: `len > 64`, so the last 64 bytes are in bounds; the secret offset
        // `SECRET_LEN - 71` leaves 64 readable bytes.
        unsafe {
            accumulate(
                &mut acc,
                src_ptr.add(len - STRIPE),
                std::ptr::null_mut(),
                secret.add(SECRET_LEN - STRIPE - 7),
            )
        };
        let mut out = [0u64; 8];
        for (j, a) in acc.iter().enumerate() {
            let mut lanes = [0i64; 4];
            // SAFETY: `lanes` is 32 writable bytes; `storeu` accepts any alignment.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *a) };
            for i in 0..4 {
                out[4 * j + i] = lanes[i] as u64;
            }
        }
        merge(&out, (len as u64).wrapping_mul(PRIME64_1))
    }
}

fn long_baseline(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    hash_long(src, dst)
}

#[inline(always)]
fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[inline(always)]
fn accumulate_stripe(acc: &mut [u64; 8], stripe: &[u8; STRIPE], secret: &[u8]) {
    let mut data = [0u64; 8];
    let mut key = [0u64; 8];
    for i in 0..8 {
        data[i] = u64::from_le_bytes(stripe[8 * i..8 * i + 8].try_into().unwrap());
        key[i] = data[i] ^ read64(secret, 8 * i);
    }
    for i in 0..8 {
        acc[i ^ 1] = acc[i ^ 1].wrapping_add(data[i]);
        acc[i] = acc[i].wrapping_add((key[i] & 0xFFFF_FFFF).wrapping_mul(key[i] >> 32));
    }
}

#[inline(always)]
fn scramble(acc: &mut [u64; 8], secret: &[u8]) {
    for (i, a) in acc.iter_mut().enumerate() {
        let mut v = *a;
        v ^= v >> 47;
        v ^= read64(secret, 8 * i);
        *a = v.wrapping_mul(PRIME32_1);
    }
}

/// Hashes the stripes of `src` (optionally copying each to `dst` first).
#[inline(always)]
fn stripes(acc: &mut [u64; 8], src: &[u8], dst: Option<&mut [u8]>, secret_step: bool) {
    let mut dst = dst;
    for (n, chunk) in src.chunks_exact(STRIPE).enumerate() {
        let stripe: &[u8; STRIPE] = chunk.try_into().unwrap();
        if let Some(d) = dst.as_deref_mut() {
            d[n * STRIPE..(n + 1) * STRIPE].copy_from_slice(stripe);
        }
        let s = if secret_step { n * 8 } else { 0 };
        accumulate_stripe(acc, stripe, &SECRET[s..s + STRIPE]);
    }
}

#[inline(always)]
fn hash_long(src: &[u8], mut dst: Option<&mut [u8]>) -> u64 {
    let len = src.len();
    let mut acc = [
        PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1,
    ];
    let blocks = (len - 1) / BLOCK;
    for b in 0..blocks {
        let range = b * BLOCK..(b + 1) * BLOCK;
        stripes(
            &mut acc,
            &src[range.clone()],
            dst.as_deref_mut().map(|d| &mut d[range]),
            true,
        );
        scramble(&mut acc, &SECRET[SECRET_LEN - STRIPE..]);
    }
    let tail_start = blocks * BLOCK;
    let tail_stripes = ((len - 1) - tail_start) / STRIPE;
    let tail_end = tail_start + tail_stripes * STRIPE;
    let range = tail_start..tail_end;
    stripes(
        &mut acc,
        &src[range.clone()],
        dst.as_deref_mut().map(|d| &mut d[range]),
        true,
    );
    if let Some(d) = dst {
        d[tail_end..].copy_from_slice(&src[tail_end..]);
    }
    let last: &[u8; STRIPE] = src[len - STRIPE..].try_into().unwrap();
    accumulate_stripe(&mut acc, last, &SECRET[SECRET_LEN - STRIPE - 7..]);
    merge(&acc, (len as u64).wrapping_mul(PRIME64_1))
}

#[inline(always)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(167).wrapping_add(seed) ^ (i >> 9) as u8)
            .collect()
    }

    #[test]
    fn matches_reference_on_edges() {
        for len in [
            0,
            1,
            240,
            241,
            255,
            256,
            1023,
            1024,
            1025,
            2048,
            2049,
            4096,
            1 << 20,
            3_000_017,
        ] {
            let src = bytes(len, 7);
            let want = xxhash_rust::xxh3::xxh3_64(&src);
            assert_eq!(xxh3(&src), want, "len {len}");
            assert_eq!(long_or_lib_baseline(&src), want, "baseline len {len}");
            let mut dst = vec![0; len];
            assert_eq!(copy_and_xxh3(&mut dst, &src), want, "copy len {len}");
            assert_eq!(dst, src);
        }
    }

    fn long_or_lib_baseline(src: &[u8]) -> u64 {
        if src.len() <= MIDSIZE_MAX {
            xxhash_rust::xxh3::xxh3_64(src)
        } else {
            long_baseline(src, None)
        }
    }

    proptest! {
        #[test]
        fn matches_reference(len in 0usize..20_000, seed in any::<u8>()) {
            let src = bytes(len, seed);
            let want = xxhash_rust::xxh3::xxh3_64(&src);
            prop_assert_eq!(xxh3(&src), want);
            let mut dst = vec![0; len];
            prop_assert_eq!(copy_and_xxh3(&mut dst, &src), want);
            prop_assert_eq!(dst, src);
        }
    }
}
