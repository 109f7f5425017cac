//! Streaming xxh3-64 for data that arrives in chunks of any size, its total length unknown
//! until the end.

use super::{BLOCK, MIDSIZE_MAX, STRIPE, avx2, has_avx2};

/// Streaming xxh3-64: feed chunks with [`Self::update`], read the hash with [`Self::digest`].
/// The result equals the one-shot hash of all chunks concatenated, however they were split.
///
/// Whole 1 KiB blocks go through the AVX2 loop straight from the caller's chunk; only the
/// current partial block (and the 64 bytes before it, which xxh3's last stripe may need) is
/// buffered.
#[derive(Clone)]
pub struct Xxh3Stream {
    state: Box<State>,
}

#[derive(Clone)]
#[expect(clippy::large_enum_variant, reason = "the whole state is boxed")]
enum State {
    Avx2(Avx2Stream),
    Library(xxhash_rust::xxh3::Xxh3Default),
}

#[derive(Clone)]
struct Avx2Stream {
    lanes: [u64; 8],
    total: u64,
    /// The last 64 bytes of the last folded block.
    prev: [u8; STRIPE],
    /// Input after the last folded block; a full block is folded only once more input shows
    /// it is not the last.
    tail: [u8; BLOCK],
    tail_len: usize,
}

impl Default for Xxh3Stream {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Xxh3Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xxh3Stream").finish_non_exhaustive()
    }
}

impl Xxh3Stream {
    pub fn new() -> Self {
        let state = if has_avx2() {
            State::Avx2(Avx2Stream {
                lanes: avx2::initial(),
                total: 0,
                prev: [0; STRIPE],
                tail: [0; BLOCK],
                tail_len: 0,
            })
        } else {
            State::Library(xxhash_rust::xxh3::Xxh3Default::new())
        };
        Self {
            state: Box::new(state),
        }
    }

    /// Appends `data` to the hashed input.
    pub fn update(&mut self, mut data: &[u8]) {
        let s = match &mut *self.state {
            State::Avx2(s) => s,
            State::Library(h) => return h.update(data),
        };
        s.total += data.len() as u64;
        while !data.is_empty() {
            if s.tail_len == BLOCK {
                // SAFETY: the `Avx2` state is only created after `has_avx2` returned true.
                unsafe { avx2::fold(&mut s.lanes, &s.tail, None) };
                s.prev.copy_from_slice(&s.tail[BLOCK - STRIPE..]);
                s.tail_len = 0;
            }
            if s.tail_len == 0 && data.len() > BLOCK {
                let n = (data.len() - 1) / BLOCK * BLOCK;
                // SAFETY: as above.
                unsafe { avx2::fold(&mut s.lanes, &data[..n], None) };
                s.prev.copy_from_slice(&data[n - STRIPE..n]);
                data = &data[n..];
            }
            let take = (BLOCK - s.tail_len).min(data.len());
            s.tail[s.tail_len..s.tail_len + take].copy_from_slice(&data[..take]);
            s.tail_len += take;
            data = &data[take..];
        }
    }

    /// The hash of everything fed so far (the stream can keep going afterwards).
    pub fn digest(&self) -> u64 {
        let s = match &*self.state {
            State::Avx2(s) => s,
            State::Library(h) => return h.digest(),
        };
        let len = s.total as usize;
        if len <= MIDSIZE_MAX {
            // Nothing was folded: that needs more than a block of input.
            return xxhash_rust::xxh3::xxh3_64(&s.tail[..len]);
        }
        let tail = &s.tail[..s.tail_len];
        let mut last = [0u8; STRIPE];
        if tail.len() >= STRIPE {
            last.copy_from_slice(&tail[tail.len() - STRIPE..]);
        } else {
            let from_prev = STRIPE - tail.len();
            last[..from_prev].copy_from_slice(&s.prev[tail.len()..]);
            last[from_prev..].copy_from_slice(tail);
        }
        // SAFETY: as in `update`.
        unsafe { avx2::finish(&s.lanes, tail, &last, len) }
    }
}
