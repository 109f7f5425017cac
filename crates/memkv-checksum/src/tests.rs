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
        1088,
        2048,
        2049,
        4096,
        1 << 20,
        3_000_017,
    ] {
        // Miri (scripts/miri) interprets every byte: megabytes take it minutes, and the
        // paths they take are the ones 4 KiB already does.
        if cfg!(miri) && len > 4096 {
            continue;
        }
        let src = bytes(len, 7);
        let want = xxhash_rust::xxh3::xxh3_64(&src);
        assert_eq!(xxh3(&src), want, "len {len}");
        let mut dst = vec![0; len];
        assert_eq!(copy_and_xxh3(&mut dst, &src), want, "copy len {len}");
        assert_eq!(dst, src);
        if len > MIDSIZE_MAX {
            // The path of CPUs without AVX2 (aarch64 among them), checked on any CPU.
            let mut dst = vec![0; len];
            assert_eq!(
                long_baseline(&src, Some(&mut dst)),
                want,
                "baseline len {len}"
            );
            assert_eq!(dst, src);
        }
        let mut stream = Xxh3Stream::new();
        stream.update(&src);
        assert_eq!(stream.digest(), want, "stream len {len}");
    }
}

/// Splits `len` into consecutive ranges of pseudo-random sizes up to `max_step`.
fn pieces(len: usize, max_step: usize, seed: u64) -> Vec<std::ops::Range<usize>> {
    let mut rng = seed | 1;
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let n = ((rng % max_step as u64) as usize + 1).min(len - at);
        out.push(at..at + n);
        at += n;
    }
    out
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

    /// Parts copied in (some of them filled by hand and fed with `advance` instead, as a
    /// fallback path does) give the same hash and the same bytes.
    #[test]
    fn copy_in_matches_reference(
        len in 0usize..20_000,
        max_step in 1usize..6000,
        split_seed in any::<u64>(),
        seed in any::<u8>(),
    ) {
        let src = bytes(len, seed);
        let mut value = vec![0xAA; len];
        let mut h = IncrementalXxh3::new(len);
        for (i, r) in pieces(len, max_step, split_seed).into_iter().enumerate() {
            if (split_seed >> (i % 64)) & 1 == 0 {
                h.copy_in(&mut value, r.start, &src[r.clone()]);
            } else {
                value[r.clone()].copy_from_slice(&src[r.clone()]);
                h.advance(&value[..r.end]);
            }
        }
        prop_assert_eq!(&value, &src);
        prop_assert_eq!(h.finish(&value), xxhash_rust::xxh3::xxh3_64(&src));
    }

    #[test]
    fn stream_matches_reference(
        len in 0usize..70_000,
        max_step in 1usize..5000,
        split_seed in any::<u64>(),
        seed in any::<u8>(),
    ) {
        let src = bytes(len, seed);
        let mut stream = Xxh3Stream::new();
        for r in pieces(len, max_step, split_seed) {
            stream.update(&src[r.clone()]);
            prop_assert_eq!(stream.digest(), xxhash_rust::xxh3::xxh3_64(&src[..r.end]));
        }
        prop_assert_eq!(stream.digest(), xxhash_rust::xxh3::xxh3_64(&src));
    }

    /// Any length up to 64 KiB and more, at any alignment of source and destination.
    #[test]
    fn matches_reference(
        len in 0usize..70_000,
        src_shift in 0usize..64,
        dst_shift in 0usize..64,
        seed in any::<u8>(),
    ) {
        let backing = bytes(len + src_shift, seed);
        let src = &backing[src_shift..];
        let want = xxhash_rust::xxh3::xxh3_64(src);
        prop_assert_eq!(xxh3(src), want);
        let mut dst_backing = vec![0; len + dst_shift];
        prop_assert_eq!(copy_and_xxh3(&mut dst_backing[dst_shift..], src), want);
        prop_assert_eq!(&dst_backing[dst_shift..], src);
    }
}
