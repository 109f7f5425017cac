//! One client connection: handshake, then a read loop that verifies each frame, runs it and
//! hands the response to the writer task. Requests are pipelined; in file mode they run on
//! blocking threads and complete out of order.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memkv_proto::messages::SharedCommitRequest;
use memkv_proto::{HEADER_LEN, Header, Opcode, Opener, ProtoError, Status};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

mod budget;
mod in_place;

use super::dispatch::execute;
use super::pending::Pending;
use super::writer::{self, Outgoing, Outstanding};
use crate::clients::{ClientEntry, ClientGuard};
use crate::config::StorageMode;
use crate::metrics::{RefusalReason, Transport, record_op, record_refusal};
use crate::state::Shared;

/// From accept to Ready sent (docs/protocol.md, Handshake).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses queued for the writer before the reader waits.
const RESPONSE_QUEUE: usize = 256;
/// After a fatal refusal: how long the writer gets to put it on the wire, and then how long
/// (and how many bytes) the server reads and discards what the client had already sent, so
/// closing does not reset the connection before the client has read the refusal.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 64 << 20;

const NOT_ON_THIS_HOST: &str =
    "the same-host transport serves clients on this server's host only (this peer is not)";

/// Whether `peer` is a process on this host: a loopback peer, or one whose address is the
/// address it reached us at (the kernel gives a connection to a local address that address
/// as its source).
fn on_this_host(stream: &TcpStream, peer: SocketAddr) -> bool {
    same_host(stream.local_addr().ok().map(|a| a.ip()), peer.ip())
}

fn same_host(local: Option<IpAddr>, peer: IpAddr) -> bool {
    // A dual-stack listener sees IPv4 peers as IPv4-mapped IPv6 addresses.
    let peer = peer.to_canonical();
    peer.is_loopback() || local.is_some_and(|local| local.to_canonical() == peer)
}

/// Serves one connection until the peer leaves, it misbehaves, or the server drains.
pub async fn serve(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    mut pending: Pending,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let same_host = on_this_host(&stream, peer);
    let mut draining = shutdown.clone();
    let handshake = tokio::select! {
        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, super::handshake::accept(&shared, &mut stream)) => done,
        () = pending.preempted() => {
            tracing::info!(%peer, "closed during its handshake: a new connection took its place at limits.max_connections");
            return;
        }
        // Nothing is in flight yet: a drain does not wait out the handshake's deadline.
        () = crate::server::stopped(&mut draining) => {
            tracing::debug!(%peer, "closed during its handshake: the server is draining");
            return;
        }
    };
    drop(pending);
    let session = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            // Refusals are counted (and auth failures noted) where they are sent.
            tracing::info!(%peer, error = %e, "handshake failed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "handshake timed out after {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    let client = shared.clients.register(peer);
    let (read, write) = stream.into_split();
    let (tx, rx) = mpsc::channel(RESPONSE_QUEUE);
    let outstanding = Arc::new(Outstanding::default());
    let mut writer = tokio::spawn(writer::run(
        session.sealer,
        write,
        rx,
        Arc::clone(&outstanding),
    ));
    let mut conn = Connection {
        outstanding,
        budget: budget::Budget::new(shared.config.limits.per_connection_inflight_bytes.0),
        shared,
        read,
        opener: session.opener,
        tx,
        peer,
        same_host,
        queue_pairs: Vec::new(),
        client,
    };
    let ended = conn.read_loop(shutdown).await;
    match &ended {
        Err(reason @ (Closed::Eof | Closed::Draining)) => {
            tracing::debug!(%peer, %reason, "closing connection")
        }
        Err(reason) => tracing::info!(%peer, %reason, "closing connection"),
        Ok(()) => {}
    }
    if matches!(ended, Err(Closed::Protocol(_))) {
        // The writer stops after the refusal; then drain what the client already sent.
        if tokio::time::timeout(LINGER, &mut writer).await.is_err() {
            writer.abort();
        }
        let mut rest = (&mut conn.read).take(LINGER_BYTES);
        let _ =
            tokio::time::timeout(LINGER, tokio::io::copy(&mut rest, &mut tokio::io::sink())).await;
        return;
    }
    drop(conn);
    let _ = writer.await;
}

struct Connection {
    shared: Arc<Shared>,
    /// Request ids read and not yet answered (the writer removes them).
    outstanding: Arc<Outstanding>,
    read: OwnedReadHalf,
    opener: Opener,
    tx: mpsc::Sender<Outgoing>,
    budget: budget::Budget,
    peer: SocketAddr,
    /// The peer is a process on this host: only such a client maps the arena, and only its
    /// shared-memory Commits (whose checksum the server takes unchecked) are accepted.
    same_host: bool,
    /// RDMA queue pairs this client connected; they live as long as the connection.
    queue_pairs: Vec<Arc<memkv_rdma::RcQueuePair>>,
    /// Lists the connection in `/v1/status` while it is open.
    client: ClientGuard,
}

/// Why the read loop ended.
#[derive(Debug, thiserror::Error)]
enum Closed {
    #[error("peer closed the connection")]
    Eof,
    #[error("idle for {0:?}")]
    Idle(Duration),
    #[error("server is draining")]
    Draining,
    #[error("read failed: {0}")]
    Io(std::io::Error),
    #[error("protocol violation: {0}")]
    Protocol(ProtoError),
    #[error("writer gone")]
    WriterGone,
}

async fn read_exact_within<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    limit: Option<Duration>,
) -> Result<(), Closed> {
    within(limit, r.read_exact(buf)).await.map(|_| ())
}

/// Reads a payload of `len` bytes (checked against the limits with its header) into a buffer
/// of its own, without zeroing it first: a 1 MiB value otherwise costs a 1 MiB memset.
async fn read_payload_within<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u32,
    limit: Option<Duration>,
) -> Result<Vec<u8>, Closed> {
    let len = len as usize;
    let read = async {
        let mut payload = Vec::with_capacity(len);
        // The allocator may give more capacity than asked: the next frame's bytes stay unread.
        let mut this_payload = r.take(len as u64);
        while payload.len() < len {
            if this_payload.read_buf(&mut payload).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(payload)
    };
    within(limit, read).await
}

/// A read that must finish within the connection's idle limit, if any.
async fn within<T>(
    limit: Option<Duration>,
    read: impl Future<Output = std::io::Result<T>>,
) -> Result<T, Closed> {
    let done = match limit {
        Some(d) => tokio::time::timeout(d, read)
            .await
            .map_err(|_| Closed::Idle(d))?,
        None => read.await,
    };
    done.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Closed::Eof,
        _ => Closed::Io(e),
    })
}

impl Connection {
    fn idle(&self) -> Option<Duration> {
        let d = self.shared.config.network.idle_timeout;
        (!d.is_zero()).then_some(d)
    }

    async fn read_loop(&mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), Closed> {
        loop {
            let mut raw = [0u8; HEADER_LEN];
            let idle = self.idle();
            tokio::select! {
                biased;
                _ = crate::server::stopped(&mut shutdown) => return Err(Closed::Draining),
                r = read_exact_within(&mut self.read, &mut raw, idle) => r?,
            }
            let started = Instant::now();
            // Every check on the header is fatal: refused with a frame, then closed.
            let header = match self.opener.header(&raw) {
                Ok(h) => h,
                Err(e) => return self.refuse(&raw, e).await,
            };
            if header.is_response() {
                let e = ProtoError::BadRequest("a client sent a response frame".into());
                return self.refuse(&raw, e).await;
            }
            if header.opcode.is_handshake() {
                let e = ProtoError::BadRequest(format!(
                    "{:?} after the handshake: the session is already established",
                    header.opcode
                ));
                return self.refuse(&raw, e).await;
            }
            if !self.outstanding.insert(header.request_id) {
                let e = ProtoError::BadRequest(format!(
                    "request id {} is already outstanding on this connection",
                    header.request_id
                ));
                return self.refuse(&raw, e).await;
            }
            let mut permit = self.budget.request(&header).await;
            let mut key = vec![0u8; usize::from(header.key_len)];
            read_exact_within(&mut self.read, &mut key, idle).await?;
            if header.opcode == Opcode::TcpPut {
                let put = in_place::PutFrame {
                    raw: &raw,
                    header: &header,
                    key: &key,
                    started,
                };
                match self.put_straight(put, permit).await? {
                    Some(unread) => permit = unread,
                    None => continue,
                }
            }
            let permit = self
                .budget
                .grow(permit, u64::from(header.payload_len))
                .await;
            let payload = read_payload_within(&mut self.read, header.payload_len, idle).await?;
            // Puts are checked against their checksum by the store as it commits them.
            let store_checks = matches!(header.opcode, Opcode::TcpPut);
            match self.opener.verify(&raw, &key, &payload, !store_checks) {
                Ok(_) => {}
                // The MAC and sequence verified: only the payload is damaged, and the stream
                // is still in step. That request fails; the connection stays.
                Err(e @ ProtoError::ChecksumMismatch { .. }) => {
                    let out = Outgoing::error(&header, e.status(), &e.to_string());
                    record(&self.shared, &self.client.entry, &out, &header, started);
                    self.send(out.holding(permit)).await?;
                    continue;
                }
                Err(e) => return self.refuse(&raw, e).await,
            }
            // A drive-backed get's answer holds the values it read until it is written.
            let answer = super::dispatch::answer_bytes(&self.shared, &header, &key, &payload);
            let permit = self.budget.grow(permit, answer).await;
            if header.opcode == Opcode::Connect {
                let out = super::connect::connect_rdma(
                    &self.shared,
                    &mut self.queue_pairs,
                    &self.client.entry,
                    &header,
                    &payload,
                )
                .await;
                record(&self.shared, &self.client.entry, &out, &header, started);
                self.send(out.holding(permit)).await?;
                continue;
            }
            if header.opcode == Opcode::LocalAttach {
                let out = if self.same_host {
                    crate::local::attach::answer(&self.shared, &self.client.entry, &header)
                } else {
                    Outgoing::error(&header, Status::Unsupported, NOT_ON_THIS_HOST)
                };
                record(&self.shared, &self.client.entry, &out, &header, started);
                self.send(out.holding(permit)).await?;
                continue;
            }
            self.dispatch(header, key, payload, permit, started).await?;
        }
    }

    async fn dispatch(
        &mut self,
        header: Header,
        key: Vec<u8>,
        payload: Vec<u8>,
        permit: OwnedSemaphorePermit,
        started: Instant,
    ) -> Result<(), Closed> {
        if header.opcode == Opcode::Commit
            && payload.len() == SharedCommitRequest::LEN
            && !self.same_host
        {
            // It publishes bytes the server does not hash: from a client that cannot have
            // copied them in, it would publish whatever the reservation's space held.
            let out = Outgoing::error(&header, Status::BadRequest, NOT_ON_THIS_HOST);
            record(&self.shared, &self.client.entry, &out, &header, started);
            return self.send(out.holding(permit)).await;
        }
        if self.shared.config.storage.mode == StorageMode::Memory {
            let out = execute(&self.shared, &header, &key, payload);
            record(&self.shared, &self.client.entry, &out, &header, started);
            // The answer keeps its values' arena space from being reused until it is written;
            // without this share, a client that overwrote a value and asked for it again,
            // never reading, pinned a dead copy per get until the arena was full.
            let permit = self.budget.grow(permit, out.stored_value_bytes()).await;
            return self.send(out.holding(permit)).await;
        }
        // File mode blocks on disk: run it off the runtime and let it complete out of order.
        self.answer_when_done(header, started, permit, move |shared, header| {
            execute(shared, header, &key, payload)
        });
        Ok(())
    }

    /// Runs `work` on a blocking thread (drive-backed requests block on the drives) and sends
    /// its answer when it is done, out of order with the connection's other answers. The
    /// request's `permit` is held until that answer is written.
    fn answer_when_done(
        &self,
        request: Header,
        started: Instant,
        permit: OwnedSemaphorePermit,
        work: impl FnOnce(&Shared, &Header) -> Outgoing + Send + 'static,
    ) {
        let shared = Arc::clone(&self.shared);
        let client = Arc::clone(&self.client.entry);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let done = tokio::task::spawn_blocking(move || {
                let out = work(&shared, &request);
                shared.sync_store_metrics();
                record(&shared, &client, &out, &request, started);
                out.holding(permit)
            })
            .await;
            if let Ok(out) = done {
                let _ = tx.send(out).await;
            }
        });
    }

    async fn send(&self, out: Outgoing) -> Result<(), Closed> {
        self.tx.send(out).await.map_err(|_| Closed::WriterGone)
    }

    /// Answers a frame that broke the protocol (its header arrived as `raw`) with its named
    /// error, as the connection's last frame, then closes.
    async fn refuse(&self, raw: &[u8; HEADER_LEN], e: ProtoError) -> Result<(), Closed> {
        if e.status() == Status::Unauthorized {
            self.shared.auth_failed();
        }
        record_refusal(RefusalReason::of(&e));
        tracing::info!(peer = %self.peer, opcode = raw[5], error = %e, "refusing frame");
        let _ = self
            .send(Outgoing::refusal(raw, e.status(), &e.to_string()))
            .await;
        Err(Closed::Protocol(e))
    }
}

/// Counts a finished operation in the metrics and in its client's entry, under the transport
/// its value moved over.
fn record(
    shared: &Shared,
    client: &ClientEntry,
    out: &Outgoing,
    request: &Header,
    started: Instant,
) {
    let one_sided = shared.rdma.serving.is_some() || shared.local.is_some();
    let (transport, bytes_in, bytes_out) =
        if !Transport::is_rdma_control(request.opcode) || !one_sided {
            let (bytes_in, bytes_out) = tcp_value_bytes(request, out);
            (Transport::Tcp, bytes_in, bytes_out)
        } else if request.opcode == Opcode::Connect {
            // RC or DC after a Connect that succeeded; a refused one leaves the client on TCP.
            (client.transport(), 0, 0)
        } else {
            // The frames carry control fields; the value moved one-sided (or by memcpy).
            let default = if shared.rdma.serving.is_some() {
                Transport::RdmaRc
            } else {
                Transport::Shm
            };
            let kind = shared.clients.one_sided_kind(client, default);
            match request.opcode {
                Opcode::Commit => (kind, out.moved_value_bytes, 0),
                Opcode::Lookup => (kind, 0, out.moved_value_bytes),
                _ => (kind, 0, 0),
            }
        };
    client.record(bytes_in, bytes_out);
    record_op(
        request.opcode.name(),
        transport,
        out.header.status.name(),
        started.elapsed(),
        bytes_in,
        bytes_out,
    );
}

/// Value bytes a TCP request stored or fetched: a put's payload, a get's answer; nothing for a
/// refusal, a miss or a request that moves no value (Exists, Delete, Stats, Ping...). A batch
/// counts its payload or its answer whole, item headers and keys included.
fn tcp_value_bytes(request: &Header, out: &Outgoing) -> (u64, u64) {
    if out.header.status != Status::Ok {
        return (0, 0);
    }
    match request.opcode {
        Opcode::TcpPut => (u64::from(request.payload_len), 0),
        Opcode::BatchPut => (out.moved_value_bytes, 0),
        Opcode::TcpGet | Opcode::BatchGet => (0, out.stored_value_bytes()),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::same_host;

    #[test]
    fn a_peer_is_on_this_host_when_loopback_or_at_the_address_it_reached() {
        let ip = |s: &str| s.parse().unwrap();
        assert!(same_host(Some(ip("127.0.0.1")), ip("127.0.0.1")));
        assert!(same_host(
            Some(ip("::ffff:127.0.0.1")),
            ip("::ffff:127.0.0.1")
        ));
        assert!(same_host(Some(ip("::1")), ip("::1")));
        assert!(same_host(Some(ip("10.0.0.5")), ip("10.0.0.5")));
        assert!(same_host(Some(ip("::ffff:10.0.0.5")), ip("10.0.0.5")));
        assert!(!same_host(Some(ip("10.0.0.5")), ip("10.0.0.6")));
        assert!(!same_host(
            Some(ip("::ffff:10.0.0.5")),
            ip("::ffff:10.0.0.6")
        ));
        assert!(!same_host(None, ip("10.0.0.6")));
    }
}
