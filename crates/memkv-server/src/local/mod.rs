//! The same-host transport, server side. A memory-mode server with `network.shared_memory`
//! keeps its arena in a sealed memfd and listens on an abstract Unix socket. A client on an
//! authenticated connection asks with LocalAttach and gets a one-time token, the socket's
//! name and the arena's address and length ([`attach::answer`]); it trades the token on the
//! socket for the memfd ([`socket::serve`]) and maps it. From then on its puts and gets are
//! RDMA's control messages (Allocate / Commit, Lookup / Release) with a `memcpy` in place of
//! the one-sided transfer.
//!
//! An abstract socket lives in the server's network namespace: a client that can connect to
//! it is on this host (or in this container), and one that cannot falls back to TCP or RDMA.

pub(crate) mod attach;
pub(crate) mod socket;
mod tokens;

use memkv_store::ArenaHandle;

pub(crate) use tokens::Tokens;

/// What the data plane needs to serve same-host clients.
pub struct LocalTransport {
    pub socket_name: Vec<u8>,
    pub arena: ArenaHandle,
    /// Random, per process: names this arena in LocalAttach and in the clients' Commits.
    pub arena_id: u64,
    pub tokens: Tokens,
}

impl LocalTransport {
    /// The arena's first byte in this process, as Allocate and Lookup answers count from it.
    pub fn arena_addr(&self) -> u64 {
        self.arena.as_ptr() as u64
    }
}

/// Binds the Unix socket when the store's arena is shareable; `None` (logged) otherwise.
pub fn start(
    arena: Option<ArenaHandle>,
) -> std::io::Result<Option<(std::sync::Arc<LocalTransport>, tokio::net::UnixListener)>> {
    let Some(arena) = arena.filter(|a| a.shared_file().is_some()) else {
        return Ok(None);
    };
    let (socket_name, listener) = socket::bind()?;
    tracing::info!(
        socket = %String::from_utf8_lossy(&socket_name),
        "same-host transport: clients on this host map the arena"
    );
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).map_err(|e| std::io::Error::other(e.to_string()))?;
    let local = LocalTransport {
        socket_name,
        arena,
        arena_id: u64::from_le_bytes(id),
        tokens: Tokens::default(),
    };
    Ok(Some((std::sync::Arc::new(local), listener)))
}
