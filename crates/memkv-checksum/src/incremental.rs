//! xxh3-64 of a buffer of known length that fills front to back (file-mode reads): each part is
//! folded while it is still in cache, or while it is being copied in.

use super::{BLOCK, MIDSIZE_MAX, STRIPE, avx2, has_avx2};

/// Feed the value in order, with [`Self::advance`] (the filled prefix of the buffer) or
/// [`Self::copy_in`] (the next part, copied into the buffer and hashed in one pass), then call
/// [`Self::finish`] with the whole buffer.
pub struct IncrementalXxh3 {
    len: usize,
    state: State,
}

enum State {
    Short,
    Avx2 { lanes: [u64; 8], blocks_done: usize },
    Library(Box<xxhash_rust::xxh3::Xxh3Default>, usize),
}

impl IncrementalXxh3 {
    pub fn new(len: usize) -> Self {
        let state = if len <= MIDSIZE_MAX {
            State::Short
        } else if has_avx2() {
            State::Avx2 {
                lanes: avx2::initial(),
                blocks_done: 0,
            }
        } else {
            State::Library(Box::default(), 0)
        };
        Self { len, state }
    }

    /// Whole blocks that are folded before the end is known: all but the input's last.
    fn foldable_blocks(&self) -> usize {
        self.len.saturating_sub(1) / BLOCK
    }

    /// `filled`: the first bytes of the input, as far as they are known.
    pub fn advance(&mut self, filled: &[u8]) {
        let foldable = self.foldable_blocks();
        match &mut self.state {
            State::Short => {}
            State::Avx2 { lanes, blocks_done } => {
                let to = (filled.len() / BLOCK).min(foldable);
                if to > *blocks_done {
                    // SAFETY: the `Avx2` state is only created after `has_avx2` returned true.
                    unsafe { avx2::fold(lanes, &filled[*blocks_done * BLOCK..to * BLOCK], None) };
                    *blocks_done = to;
                }
            }
            State::Library(h, fed) => {
                if filled.len() > *fed {
                    h.update(&filled[*fed..]);
                    *fed = filled.len();
                }
            }
        }
    }

    /// Copies `src` into `value[at..]` and folds it in the same pass. `value` is the whole
    /// buffer; everything before `at` must already be filled (and fed or not: bytes not yet
    /// fed are taken from `value`).
    pub fn copy_in(&mut self, value: &mut [u8], at: usize, src: &[u8]) {
        assert_eq!(
            value.len(),
            self.len,
            "copy_in needs the whole value buffer"
        );
        let end = at + src.len();
        if !matches!(self.state, State::Avx2 { .. }) {
            value[at..end].copy_from_slice(src);
            self.advance(&value[..end]);
            return;
        }
        let foldable = self.foldable_blocks();
        // Up to the next block boundary by plain copy, then fold any whole blocks the buffer
        // now holds (hot in cache)...
        let head = ((BLOCK - at % BLOCK) % BLOCK).min(src.len());
        value[at..at + head].copy_from_slice(&src[..head]);
        let (mut pos, mut rest) = (at + head, &src[head..]);
        self.advance(&value[..pos]);
        // ...then copy and fold whole blocks in one pass...
        if let State::Avx2 { lanes, blocks_done } = &mut self.state
            && *blocks_done * BLOCK == pos
        {
            let to = (end / BLOCK).min(foldable);
            if to > *blocks_done {
                let n = (to - *blocks_done) * BLOCK;
                // SAFETY: as in `advance`.
                unsafe { avx2::fold(lanes, &rest[..n], Some(&mut value[pos..pos + n])) };
                *blocks_done = to;
                pos += n;
                rest = &rest[n..];
            }
        }
        // ...and the remainder (the input's last block, or a partial one) by plain copy.
        value[pos..end].copy_from_slice(rest);
    }

    /// `all`: the whole input (`len` bytes).
    pub fn finish(self, all: &[u8]) -> u64 {
        assert_eq!(all.len(), self.len, "finish needs the whole input");
        let whole = self.foldable_blocks() * BLOCK;
        match self.state {
            State::Short => xxhash_rust::xxh3::xxh3_64(all),
            State::Avx2 {
                mut lanes,
                blocks_done,
            } => {
                let last: &[u8; STRIPE] = all[all.len() - STRIPE..].try_into().unwrap();
                // SAFETY: as in `advance`.
                unsafe {
                    avx2::fold(&mut lanes, &all[blocks_done * BLOCK..whole], None);
                    avx2::finish(&lanes, &all[whole..], last, all.len())
                }
            }
            State::Library(mut h, fed) => {
                h.update(&all[fed..]);
                h.digest()
            }
        }
    }
}
