//! Size limits that decoders enforce before allocating anything.

/// The largest key this build ever accepts; the header's 16-bit key length allows more.
pub const MAX_KEY_LEN: usize = 1024;

/// Limits a decoder enforces. Both sides must agree on them for large values to pass; the
/// defaults are what a server uses unless configured otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest key in bytes (at most [`MAX_KEY_LEN`]).
    pub max_key_len: usize,
    /// Largest single value in bytes.
    pub max_value_len: u64,
    /// Most items in one batch frame.
    pub max_batch_items: usize,
    /// Largest frame payload in bytes (a batch of values counts whole).
    pub max_frame_payload: u64,
}

impl Limits {
    /// Defaults: 1 KiB keys, 64 MiB values, 16384 batch items, 256 MiB frames.
    pub const DEFAULT: Limits = Limits {
        max_key_len: MAX_KEY_LEN,
        max_value_len: 64 << 20,
        max_batch_items: 16_384,
        max_frame_payload: 256 << 20,
    };

    /// Limits for handshake frames in both directions, which arrive before authentication:
    /// no key, and a payload of at most 1024 bytes, the longest refusal message
    /// ([`crate::frame::MAX_ERROR_MESSAGE`]); Hello, Challenge, Proof and Ready are far smaller.
    pub const HANDSHAKE: Limits = Limits {
        max_key_len: 0,
        max_value_len: crate::frame::MAX_ERROR_MESSAGE as u64,
        max_batch_items: 0,
        max_frame_payload: crate::frame::MAX_ERROR_MESSAGE as u64,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
