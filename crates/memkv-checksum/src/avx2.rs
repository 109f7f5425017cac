//! xxh3's long-input loop (64-byte stripes, 1 KiB blocks, scramble, merge) with the eight
//! accumulator lanes in two 256-bit registers.
//!
//! The entry points work on lanes (`[u64; 8]`) so that one-shot, incremental and streaming
//! hashing share the same kernel: [`fold`] consumes whole blocks that are known not to be the
//! input's last, [`finish`] consumes the rest once the length is known.

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

/// The accumulator's starting lanes (from the xxh3 specification).
pub(super) fn initial() -> [u64; 8] {
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

/// Folds `count` whole blocks starting at `src` (copying them to `dst` when it is not null).
///
/// # Safety
/// `src` readable and `dst` (if not null) writable for `count * BLOCK` bytes, not
/// overlapping; AVX2 available.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn blocks(acc: &mut [__m256i; 2], src: *const u8, dst: *mut u8, count: usize) {
    let secret = SECRET.as_ptr();
    for b in 0..count {
        for n in 0..STRIPES_PER_BLOCK {
            let at = b * BLOCK + n * STRIPE;
            let d = if dst.is_null() {
                dst
            } else {
                dst.wrapping_add(at)
            };
            // SAFETY: `at + 64 <= count * BLOCK`, in bounds per the caller's contract;
            // `n * 8 + 64 <= SECRET_LEN`.
            unsafe { accumulate(acc, src.add(at), d, secret.add(n * 8)) };
        }
        scramble(acc);
    }
}

/// Everything after the whole blocks: the stripes of `tail` (the input after its last folded
/// block, 1..=BLOCK bytes), then the input's final 64 bytes, then the merge.
#[target_feature(enable = "avx2")]
fn finish_regs(acc: &mut [__m256i; 2], tail: &[u8], last_stripe: &[u8; STRIPE], len: usize) -> u64 {
    assert!(
        (1..=BLOCK).contains(&tail.len()),
        "tail must be 1..=BLOCK bytes"
    );
    let secret = SECRET.as_ptr();
    for n in 0..(tail.len() - 1) / STRIPE {
        // SAFETY: `(n + 1) * 64 <= tail.len() - 1`; `n < 16` keeps the secret offset in bounds;
        // no copy.
        unsafe {
            accumulate(
                acc,
                tail.as_ptr().add(n * STRIPE),
                std::ptr::null_mut(),
                secret.add(n * 8),
            )
        };
    }
    // SAFETY: `last_stripe` is 64 bytes; the secret offset `SECRET_LEN - 71` leaves 64
    // readable bytes; no copy.
    unsafe {
        accumulate(
            acc,
            last_stripe.as_ptr(),
            std::ptr::null_mut(),
            secret.add(SECRET_LEN - STRIPE - 7),
        )
    };
    merge(&to_lanes(acc), (len as u64).wrapping_mul(PRIME64_1))
}

/// One-shot xxh3-64 of `src` (longer than 240 bytes), copying it to `dst` when given.
#[target_feature(enable = "avx2")]
pub(super) fn hash_long(src: &[u8], dst: Option<&mut [u8]>) -> u64 {
    let len = src.len();
    assert!(len > STRIPE, "long hash needs more than one stripe");
    let whole = (len - 1) / BLOCK * BLOCK;
    let mut acc = to_regs(&initial());
    let Some(d) = dst else {
        // SAFETY: `whole <= len` bytes are readable in `src`; no copy; AVX2 is enabled in
        // this function.
        unsafe { blocks(&mut acc, src.as_ptr(), std::ptr::null_mut(), whole / BLOCK) };
        let last: &[u8; STRIPE] = src[len - STRIPE..].try_into().unwrap();
        return finish_regs(&mut acc, &src[whole..], last, len);
    };
    assert_eq!(
        d.len(),
        len,
        "copy destination must match the source length"
    );
    // SAFETY: `whole <= len` bytes are readable in `src` and writable in `d`, which are
    // distinct borrows; AVX2 is enabled in this function.
    unsafe { blocks(&mut acc, src.as_ptr(), d.as_mut_ptr(), whole / BLOCK) };
    // The tail is read once, into `once`, which both the copy and the hash take: a second
    // read of `src` could see other bytes than `d` got (`copy_and_xxh3`).
    let tail_len = len - whole;
    let mut once = [0u8; BLOCK];
    let once = &mut once[..tail_len];
    once.copy_from_slice(&src[whole..]);
    d[whole..].copy_from_slice(once);
    // The last stripe is the input's final 64 bytes; those before the tail were copied and
    // hashed from one read above, and hashing them again can only fail a check, never pass
    // bytes it did not cover.
    let mut last = [0u8; STRIPE];
    let before = STRIPE.saturating_sub(tail_len);
    last[..before].copy_from_slice(&src[len - STRIPE..len - STRIPE + before]);
    last[before..].copy_from_slice(&once[tail_len - (STRIPE - before)..]);
    finish_regs(&mut acc, once, &last, len)
}

/// Folds `src` (whole blocks, none of them the input's last) into `lanes`, copying it to `dst`
/// when given.
#[target_feature(enable = "avx2")]
pub(super) fn fold(lanes: &mut [u64; 8], src: &[u8], dst: Option<&mut [u8]>) {
    assert_eq!(src.len() % BLOCK, 0, "fold takes whole blocks");
    let mut acc = to_regs(lanes);
    let dst_ptr = match dst {
        Some(d) => {
            assert_eq!(d.len(), src.len(), "copy destination must match the source");
            d.as_mut_ptr()
        }
        None => std::ptr::null_mut(),
    };
    // SAFETY: `src` (and `dst`, a distinct borrow of the same length) cover the blocks;
    // AVX2 is enabled in this function.
    unsafe { blocks(&mut acc, src.as_ptr(), dst_ptr, src.len() / BLOCK) };
    *lanes = to_lanes(&acc);
}

/// Completes a hash whose whole blocks are folded into `lanes`: `tail` is the rest of the
/// input (1..=BLOCK bytes), `last_stripe` its final 64 bytes, `len` its total length.
#[target_feature(enable = "avx2")]
pub(super) fn finish(lanes: &[u64; 8], tail: &[u8], last_stripe: &[u8; STRIPE], len: usize) -> u64 {
    let mut acc = to_regs(lanes);
    finish_regs(&mut acc, tail, last_stripe, len)
}
