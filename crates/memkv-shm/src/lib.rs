//! The same-host transport's operating-system parts.
//!
//! A memory-mode server whose clients run on the same host can let them move values with a
//! `memcpy` instead of through a socket: its arena lives in a sealed memfd ([`arena_file`]),
//! which it hands, after an authenticated request, over a Unix socket
//! ([`pass_fd`]) to a client that maps it ([`SharedArena`]). Which bytes a client may touch,
//! and when, is decided by the same Allocate / Commit and Lookup / Release messages that RDMA
//! uses; this crate only moves bytes within the bounds it is given.
//!
//! `unsafe` here is only [`SharedArena`]'s: copies into and out of memory another process
//! maps too.

pub mod arena_file;
pub mod pass_fd;
mod shared_arena;

pub use shared_arena::{MapError, SharedArena};
