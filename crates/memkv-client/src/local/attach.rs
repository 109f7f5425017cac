//! Attaching to one server's arena.

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use memkv_proto::local::{AttachAnswer, LocalAttachResponse};
use memkv_proto::{Opcode, Status};
use memkv_shm::SharedArena;

use crate::Error;
use crate::client::Client;

/// A server's arena mapped into this process.
#[derive(Debug)]
pub(crate) struct Attached {
    pub arena: SharedArena,
    /// The arena's first byte in the server's address space (Allocate / Lookup addresses
    /// count from it).
    pub base: u64,
    /// The server's name for this arena, sent with every Commit of bytes copied into it.
    pub arena_id: u64,
}

impl Attached {
    /// The arena offset of a server address for `len` bytes, if the range lies in the arena.
    pub fn offset(&self, addr: u64, len: usize) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        let end = offset.checked_add(len as u64)?;
        (end <= self.arena.len()).then_some(offset)
    }
}

/// Why a server cannot be reached through shared memory.
#[derive(Debug)]
pub(crate) enum NotLocal {
    /// The server does not offer it (TCP-only build, file mode, `network.shared_memory: false`).
    Refused(String),
    /// The server offers it but is not on this host (or not in this network namespace).
    Elsewhere(String),
    /// Anything else: the request failed, the socket misbehaved.
    Failed(Error),
}

impl std::fmt::Display for NotLocal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(why) => write!(f, "the server does not offer it: {why}"),
            Self::Elsewhere(why) => write!(f, "the server is not on this host: {why}"),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// How long the Unix socket exchange may take; it is local, so this only bounds a wedged peer.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether `server` ("host:port") names an address of this host: loopback, or one a socket
/// can bind to here. Only such servers are asked for their arena, so remote servers (and
/// servers that predate LocalAttach, which close the connection on an unknown opcode) never
/// see the request.
async fn on_this_host(server: &str) -> bool {
    let Ok(addrs) = tokio::net::lookup_host(server).await else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| a.ip().is_loopback() || std::net::UdpSocket::bind((a.ip(), 0)).is_ok())
}

impl Client {
    /// Asks server `index` for its arena and maps it.
    pub(crate) async fn attach_local(
        &self,
        index: usize,
    ) -> std::result::Result<Attached, NotLocal> {
        let server = self.server_name(index).to_owned();
        if !on_this_host(&server).await {
            return Err(NotLocal::Elsewhere(
                "its address is not one of this host's".into(),
            ));
        }
        let r = self
            .exchange(
                index,
                "local_attach",
                Opcode::LocalAttach,
                &[],
                &[],
                None,
                Vec::new(),
            )
            .await
            .map_err(NotLocal::Failed)?;
        match r.status {
            Status::Ok => {}
            Status::Unsupported | Status::BadRequest => {
                return Err(NotLocal::Refused(
                    String::from_utf8_lossy(&r.payload).into_owned(),
                ));
            }
            _ => {
                return Err(NotLocal::Failed(Error::from_status(
                    &server, r.status, &r.payload,
                )));
            }
        }
        let answer = LocalAttachResponse::decode(&r.payload).map_err(|source| {
            NotLocal::Failed(Error::Protocol {
                server: server.clone(),
                source,
            })
        })?;
        tokio::task::spawn_blocking(move || trade(&server, answer))
            .await
            .map_err(|e| NotLocal::Failed(Error::Config(format!("local attach panicked: {e}"))))?
    }
}

/// Connects to the server's abstract socket, trades the token for the memfd and maps it.
fn trade(server: &str, answer: LocalAttachResponse) -> std::result::Result<Attached, NotLocal> {
    let failed = |reason: String| {
        NotLocal::Failed(Error::SharedMemory {
            server: server.to_owned(),
            reason,
        })
    };
    let addr = SocketAddr::from_abstract_name(&answer.socket_name)
        .map_err(|e| failed(format!("bad socket name: {e}")))?;
    let mut socket = UnixStream::connect_addr(&addr).map_err(|e| {
        NotLocal::Elsewhere(format!(
            "no socket @{} here ({e})",
            String::from_utf8_lossy(&answer.socket_name)
        ))
    })?;
    let io = |e: std::io::Error| failed(format!("same-host socket: {e}"));
    socket.set_read_timeout(Some(SOCKET_TIMEOUT)).map_err(io)?;
    socket.set_write_timeout(Some(SOCKET_TIMEOUT)).map_err(io)?;
    socket.write_all(&answer.token).map_err(io)?;
    let (message, fd) = memkv_shm::pass_fd::receive(&socket).map_err(io)?;
    match AttachAnswer::decode(&message) {
        Ok(AttachAnswer::Granted) => {}
        Ok(AttachAnswer::Refused(why)) => return Err(failed(format!("attach refused: {why}"))),
        Err(e) => return Err(failed(e.to_string())),
    }
    let fd =
        fd.ok_or_else(|| failed("the server granted the attach but sent no descriptor".into()))?;
    let arena = SharedArena::map(fd, answer.arena_len).map_err(|e| failed(e.to_string()))?;
    Ok(Attached {
        arena,
        base: answer.arena_addr,
        arena_id: answer.arena_id,
    })
}
