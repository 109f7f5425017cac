//! One authenticated, multiplexed connection to a server.
//!
//! Callers write their own request frames (header, key and value slices in one vectored write,
//! so a value is never copied into a frame buffer) under the writer lock, which also keeps
//! sequence numbers in write order. A reader task reads response frames, verifies each with the
//! session's opener, and completes the waiting request by id, in whatever order the server
//! answers. A frame that fails verification, or a request abandoned half-written, closes the
//! connection and fails everything outstanding on it.

mod dead_peer;
mod handshake;
mod io;
mod pending;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memkv_proto::{Header, Limits, Opcode, Sealer, Status};
use tokio::io::BufReader;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

pub(crate) use handshake::Dial;
use pending::Pending;

use crate::Error;
use crate::destination::BoxedDestination;

/// Bytes the reader buffers, so headers and small answers take few reads; payloads at least
/// this large bypass the buffer and land in their own Vec. Allocated per connection, so kept
/// modest: a process may hold thousands of connections.
const READ_BUFFER: usize = 32 * 1024;

/// A successful exchange: the server's status and payload (an error message unless `Ok`).
pub(crate) struct Response {
    pub status: Status,
    /// The payload, unless it landed in the request's destination.
    pub payload: Vec<u8>,
    /// The request's destination, back from the reader, with the payload's length when the
    /// payload was read into it.
    pub direct: Option<(BoxedDestination, Option<usize>)>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("payload_len", &self.payload.len())
            .field("direct", &self.direct.as_ref().map(|(_, len)| len))
            .finish()
    }
}

/// Where a response payload is read to.
pub(crate) enum Sink {
    /// A vector (a caller's, reused; its capacity is kept).
    Buffer(Vec<u8>),
    /// Caller memory: a successful answer that fits is read straight into it; anything else
    /// (an error message, a value too large) goes to a vector and the destination comes back
    /// untouched.
    Direct(BoxedDestination),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Buffer(b) => write!(f, "Sink::Buffer({} bytes)", b.len()),
            Sink::Direct(_) => f.write_str("Sink::Direct(..)"),
        }
    }
}

impl Default for Sink {
    fn default() -> Self {
        Sink::Buffer(Vec::new())
    }
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Nothing reached the server: the connection was already closed. Safe to retry, with the
    /// sink given back (`None` if the connection's closing took it first).
    NotSent(Error, Option<Sink>),
    /// The request may have reached the server.
    Failed(Error),
}

impl CallError {
    pub fn into_error(self) -> Error {
        match self {
            CallError::NotSent(e, _) | CallError::Failed(e) => e,
        }
    }
}

struct Writer {
    half: Option<OwnedWriteHalf>,
    sealer: Sealer,
}

/// One connection; dropping it closes the socket and stops its reader.
pub(crate) struct Connection {
    shared: Arc<Pending>,
    writer: Mutex<Writer>,
    next_id: AtomicU64,
    /// The session's protocol version: what a request's checksum covers.
    version: u8,
    reader: JoinHandle<()>,
}

impl Connection {
    /// Connects, authenticates and starts the reader task.
    pub async fn open(dial: &Dial<'_>) -> crate::Result<Connection> {
        let (stream, session) = handshake::open(dial).await?;
        let (read_half, write_half) = stream.into_split();
        let shared = Arc::new(Pending::new(dial.server));
        let version = session.version();
        let reader = tokio::spawn(io::read_loop(
            Arc::clone(&shared),
            BufReader::with_capacity(READ_BUFFER, read_half),
            session.opener,
        ));
        Ok(Connection {
            shared,
            writer: Mutex::new(Writer {
                half: Some(write_half),
                sealer: session.sealer,
            }),
            next_id: AtomicU64::new(1),
            version,
            reader,
        })
    }

    /// Whether the connection can still carry requests.
    pub fn is_open(&self) -> bool {
        !self.shared.is_closed()
    }

    /// Resolves once the connection is closed: by the server (it stopped, or closed it idle),
    /// by a failure, or by the client dropping it. It does not keep the connection open.
    pub fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move { shared.closed().await }
    }

    /// Sends one request and waits for its response. `payload` is written as given (vectored);
    /// `sum` is its checksum when the caller has it. The response payload goes to `sink`.
    pub async fn call(
        &self,
        opcode: Opcode,
        key: &[u8],
        payload: &[&[u8]],
        sum: Option<u64>,
        sink: Sink,
    ) -> Result<Response, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Registered before writing: the response may arrive before the write returns.
        let (rx, registration) = self
            .shared
            .register(id, opcode, sink)
            .map_err(|(e, sink)| CallError::NotSent(e, Some(sink)))?;
        // A request that is not sent takes its sink back out of the map (before the closing
        // connection drains it), for the caller's retry or to return it.
        let unsent = |e: Error| CallError::NotSent(e, self.shared.take(id).map(|entry| entry.sink));
        // Hash outside the writer lock so other requests are not held up by a large value.
        let sum = sum.unwrap_or_else(|| {
            memkv_proto::coverage::Coverage::of(self.version, opcode, false).checksum_parts(payload)
        });
        {
            let mut writer = self.writer.lock().await;
            let mut guard = io::WriteGuard::new(&mut writer, &self.shared);
            let w = guard.writer();
            let Some(half) = w.half.as_mut() else {
                return Err(unsent(self.shared.closed_error()));
            };
            let mut header = Header::request(opcode, id);
            let head = w.sealer.seal_with_checksum(&mut header, key, payload, sum);
            let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + payload.len());
            parts.push(&head);
            parts.push(key);
            parts.extend_from_slice(payload);
            if let Err(e) = io::write_all_vectored(half, &parts).await {
                let err = Error::Disconnected {
                    server: self.shared.server().to_owned(),
                    reason: format!("writing a request: {e}"),
                };
                let not_sent = unsent(err.clone());
                guard.fail(err);
                return Err(not_sent);
            }
            guard.done();
        }
        let result = rx.await;
        registration.disarm();
        match result {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(CallError::Failed(e)),
            Err(_) => Err(CallError::Failed(self.shared.closed_error())),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.close(Error::Disconnected {
            server: self.shared.server().to_owned(),
            reason: "the client closed the connection".into(),
        });
    }
}

/// The limits this client accepts from servers (the protocol defaults).
pub(crate) const CLIENT_LIMITS: Limits = Limits::DEFAULT;
