//! xxh3-64, with a fused "copy into the arena and hash" pass.
//!
//! The hash is the store's integrity check, computed on every put and every file-mode read, so
//! its speed bounds theirs. `xxhash-rust` picks its SIMD path at compile time (SSE2 on a
//! default x86-64 build). Here the long-input loop (inputs over 240 bytes, the ones that cost)
//! has an AVX2 version chosen at run time when the CPU has it; the copy variant stores each
//! 64-byte stripe while it is in registers, so a put reads its source once. Results are
//! bit-identical to `xxhash_rust::xxh3::xxh3_64` (checked by the tests below); short inputs and
//! CPUs without AVX2 use the library.

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
    long_baseline(src, dst)
}

/// xxh3's long-input loop (64-byte stripes, 1 KiB blocks, scramble, merge) with the eight
/// accumulator lanes in two 256-bit registers.
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

    fn init_lanes() -> [u64; 8] {
        [
            PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1,
        ]
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn to_regs(lanes: &[u64; 8]) -> [__m256i; 2] {
        let r = |i: usize| {
            _mm256_setr_epi64x(
                lanes[i] as i64,
                lanes[i + 1] as i64,
                lanes[i + 2] as i64,
                lanes[i + 3] as i64,
            )
        };
        [r(0), r(4)]
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn to_lanes(acc: &[__m256i; 2]) -> [u64; 8] {
        let mut out = [0u64; 8];
        for (j, a) in acc.iter().enumerate() {
            let mut lanes = [0i64; 4];
            // SAFETY: `lanes` is 32 writable bytes; `storeu` accepts any alignment.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *a) };
            for i in 0..4 {
                out[4 * j + i] = lanes[i] as u64;
            }
        }
        out
    }

    /// Folds whole blocks `from..to` of `src` (copying them to `dst` when it is not null).
    ///
    /// # Safety
    /// `src` readable and `dst` (if not null) writable for `to * BLOCK` bytes; AVX2 available.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn blocks(acc: &mut [__m256i; 2], src: *const u8, dst: *mut u8, from: usize, to: usize) {
        let secret = SECRET.as_ptr();
        for b in from..to {
            for n in 0..STRIPES_PER_BLOCK {
                let at = b * BLOCK + n * STRIPE;
                let d = if dst.is_null() {
                    dst
                } else {
                    dst.wrapping_add(at)
                };
                // SAFETY: `at + 64 <= to * BLOCK`, in bounds per the caller's contract;
                // `n * 8 + 64 <= SECRET_LEN`.
                unsafe { accumulate(acc, src.add(at), d, secret.add(n * 8)) };
            }
            scramble(acc);
        }
    }

    /// Everything after the whole blocks: tail stripes, the last stripe, the merge.
    ///
    /// # Safety
    /// `dst`, if not null, must be writable for `src.len()` bytes and not overlap `src`.
    #[target_feature(enable = "avx2")]
    unsafe fn finish(acc: &mut [__m256i; 2], src: &[u8], dst: *mut u8) -> u64 {
        let len = src.len();
        let secret = SECRET.as_ptr();
        let tail_start = (len - 1) / BLOCK * BLOCK;
        let tail_stripes = ((len - 1) - tail_start) / STRIPE;
        for n in 0..tail_stripes {
            let at = tail_start + n * STRIPE;
            let d = if dst.is_null() {
                dst
            } else {
                dst.wrapping_add(at)
            };
            // SAFETY: `at + 64 <= len - 1`; `n < 16` keeps the secret offset in bounds.
            unsafe { accumulate(acc, src.as_ptr().add(at), d, secret.add(n * 8)) };
        }
        let tail_end = tail_start + tail_stripes * STRIPE;
        if !dst.is_null() {
            // SAFETY: `tail_end <= len`; `dst` is valid for `len` bytes and disjoint from `src`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr().add(tail_end),
                    dst.add(tail_end),
                    len - tail_end,
                )
            };
        }
        // SAFETY: `len > 64`, so the last 64 bytes are in bounds; the secret offset
        // `SECRET_LEN - 71` leaves 64 readable bytes.
        unsafe {
            accumulate(
                acc,
                src.as_ptr().add(len - STRIPE),
                std::ptr::null_mut(),
                secret.add(SECRET_LEN - STRIPE - 7),
            )
        };
        merge(&to_lanes(acc), (len as u64).wrapping_mul(PRIME64_1))
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn hash_long(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
        let len = src.len();
        assert!(len > STRIPE, "long hash needs more than one stripe");
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
        let mut acc = to_regs(&init_lanes());
        // SAFETY: `(len - 1) / BLOCK` whole blocks lie within `src` and `dst` (same length,
        // distinct borrows); AVX2 is enabled in this function.
        unsafe {
            blocks(&mut acc, src.as_ptr(), dst_ptr, 0, (len - 1) / BLOCK);
            finish(&mut acc, src, dst_ptr)
        }
    }

    /// Incremental form: fold the whole blocks of `done` that are not the input's last.
    #[target_feature(enable = "avx2")]
    pub(super) fn advance(
        lanes: &mut [u64; 8],
        done: &[u8],
        total_len: usize,
        from: usize,
    ) -> usize {
        let to = (done.len() / BLOCK).min((total_len - 1) / BLOCK);
        if to > from {
            let mut acc = to_regs(lanes);
            // SAFETY: `to * BLOCK <= done.len()`; no copy; AVX2 is enabled here.
            unsafe { blocks(&mut acc, done.as_ptr(), std::ptr::null_mut(), from, to) };
            *lanes = to_lanes(&acc);
        }
        to.max(from)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn complete(lanes: &[u64; 8], src: &[u8], from: usize) -> u64 {
        let mut acc = to_regs(lanes);
        // SAFETY: blocks up to `(len - 1) / BLOCK` lie within `src`; `finish` gets no copy.
        unsafe {
            blocks(
                &mut acc,
                src.as_ptr(),
                std::ptr::null_mut(),
                from,
                (src.len() - 1) / BLOCK,
            );
            finish(&mut acc, src, std::ptr::null_mut())
        }
    }

    pub(super) fn initial() -> [u64; 8] {
        init_lanes()
    }
}

/// xxh3-64 computed while a buffer fills front to back (file reads), so each part is hashed
/// while still in cache. Call [`Self::advance`] with the filled prefix, then [`Self::finish`]
/// with the whole input.
pub(crate) struct IncrementalXxh3 {
    len: usize,
    state: Incremental,
}

enum Incremental {
    Short,
    Avx2 { lanes: [u64; 8], blocks_done: usize },
    Library(Box<xxhash_rust::xxh3::Xxh3Default>, usize),
}

impl IncrementalXxh3 {
    pub fn new(len: usize) -> Self {
        let state = if len <= MIDSIZE_MAX {
            Incremental::Short
        } else if cfg!(target_arch = "x86_64") && has_avx2() {
            Incremental::Avx2 {
                lanes: avx2_initial(),
                blocks_done: 0,
            }
        } else {
            Incremental::Library(Box::default(), 0)
        };
        Self { len, state }
    }

    /// `filled`: the first bytes of the input, as far as they are known.
    pub fn advance(&mut self, filled: &[u8]) {
        match &mut self.state {
            Incremental::Short => {}
            Incremental::Avx2 { lanes, blocks_done } => {
                // SAFETY: the `Avx2` state is only created after `has_avx2` returned true.
                *blocks_done = unsafe { avx2_advance(lanes, filled, self.len, *blocks_done) };
            }
            Incremental::Library(h, fed) => {
                h.update(&filled[*fed..]);
                *fed = filled.len();
            }
        }
    }

    /// `all`: the whole input (`len` bytes).
    pub fn finish(self, all: &[u8]) -> u64 {
        assert_eq!(all.len(), self.len, "finish needs the whole input");
        match self.state {
            Incremental::Short => xxhash_rust::xxh3::xxh3_64(all),
            // SAFETY: as in `advance`.
            Incremental::Avx2 { lanes, blocks_done } => unsafe {
                avx2_complete(&lanes, all, blocks_done)
            },
            Incremental::Library(mut h, fed) => {
                h.update(&all[fed..]);
                h.digest()
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_initial() -> [u64; 8] {
    avx2::initial()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2_advance(lanes: &mut [u64; 8], filled: &[u8], len: usize, from: usize) -> usize {
    avx2::advance(lanes, filled, len, from)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2_complete(lanes: &[u64; 8], all: &[u8], from: usize) -> u64 {
    avx2::complete(lanes, all, from)
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_initial() -> [u64; 8] {
    [0; 8]
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn avx2_advance(_: &mut [u64; 8], _: &[u8], _: usize, from: usize) -> usize {
    from
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn avx2_complete(_: &[u64; 8], all: &[u8], _: usize) -> u64 {
    xxhash_rust::xxh3::xxh3_64(all)
}

/// Without AVX2 the library's compile-time SIMD path is as fast as a portable loop would be.
fn long_baseline(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    if let Some(d) = dst {
        d.copy_from_slice(src);
    }
    xxhash_rust::xxh3::xxh3_64(src)
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
            let mut dst = vec![0; len];
            assert_eq!(copy_and_xxh3(&mut dst, &src), want, "copy len {len}");
            assert_eq!(dst, src);
        }
    }

    proptest! {
        #[test]
        fn incremental_matches_reference(len in 0usize..12_000, step in 1usize..5000, seed in any::<u8>()) {
            let src = bytes(len, seed);
            let mut h = IncrementalXxh3::new(len);
            let mut filled = 0;
            while filled < len {
                filled = (filled + step).min(len);
                h.advance(&src[..filled]);
            }
            prop_assert_eq!(h.finish(&src), xxhash_rust::xxh3::xxh3_64(&src));
        }

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
