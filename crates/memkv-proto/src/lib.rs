//! memkv's wire protocol, with no I/O.
//!
//! Everything memkv puts on a TCP connection is a frame: a fixed 72-byte [`Header`], then the
//! key, then the payload. A connection opens with a four-frame handshake
//! ([`ClientHandshake`], [`ServerHandshake`]) that proves both sides hold the shared
//! [`AuthKey`] and derives per-direction frame keys; after it every frame is sealed by a
//! [`Sealer`] and checked by an [`Opener`] (HMAC-SHA256, per-direction sequence numbers, an
//! xxh3-64 payload checksum covered by the MAC). Decoders check every length against
//! [`Limits`] before allocating.
//!
//! This crate does no I/O: runtimes read bytes, hand them in, and write what comes out, in the
//! manner of `quinn-proto`. The byte-level specification is `docs/protocol.md`.

#![forbid(unsafe_code)]

pub mod admin_auth;
mod auth;
pub mod batch;
pub mod checksum;
pub mod connect;
pub mod coverage;
mod cursor;
mod error;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod header;
mod limits;
pub mod local;
pub mod messages;
mod opcode;
pub mod placement;
mod session;
mod status;

pub use auth::{AUTH_KEY_HEX_LEN, AUTH_KEY_LEN, AuthKey, KeyParseError, NONCE_LEN};
pub use error::ProtoError;
pub use frame::Frame;
pub use handshake::{ClientHandshake, OPTION_PAYLOAD_MAC, ServerHandshake, Step};
pub use header::{HEADER_LEN, Header, MAC_INPUT_LEN, MAC_LEN, MAGIC, PROTOCOL_VERSION};
pub use limits::{Limits, MAX_KEY_LEN};
pub use opcode::{Flags, Opcode};
pub use session::{Opener, Sealer, Session};
pub use status::Status;
