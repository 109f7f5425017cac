//! Bounds on the admin listener's connections. The admin port is reachable by anyone who can
//! reach the data port, before any authentication, and each connection holds a file
//! descriptor: unbounded, a client opening connections (or holding them open, idle or sending
//! a request a byte at a time) could take the descriptors the data port needs. So the admin
//! API serves at most [`AdminLimits::max_connections`] at once and closes the connections
//! beyond; a request's headers must arrive within [`AdminLimits::header_timeout`] (hyper's
//! timer), and a connection that sends nothing for [`AdminLimits::idle_timeout`] is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The admin listener's bounds; [`AdminLimits::default`] is what `memkv start` serves with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections served at once; those beyond are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A request's headers must have arrived this long after the server starts reading them
    /// (hyper's header read timeout).
    pub header_timeout: Duration,
    /// A connection that sends nothing for this long is closed (a scraper reconnects).
    pub idle_timeout: Duration,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Admits a connection while fewer than the limit are open; the permit travels with the
/// stream and is returned when the connection closes.
#[derive(Clone)]
pub(super) struct LimitAcceptor {
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
    /// Set while connections are being turned away, so the log says so once per episode.
    refusing: Arc<AtomicBool>,
    limit: usize,
}

impl LimitAcceptor {
    pub(super) fn new(limits: &AdminLimits) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            idle_timeout: limits.idle_timeout,
            refusing: Arc::new(AtomicBool::new(false)),
            limit: limits.max_connections,
        }
    }
}

impl<S: Send + 'static> Accept<TcpStream, S> for LimitAcceptor {
    type Stream = AdminStream;
    type Service = S;
    type Future = std::future::Ready<io::Result<(AdminStream, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            if !self.refusing.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    limit = self.limit,
                    "admin API: closing new connections, {} are open (the limit)",
                    self.limit
                );
            }
            // Dropping the stream closes it at once rather than leaving it in the backlog.
            return std::future::ready(Err(io::Error::other("admin connection limit reached")));
        };
        self.refusing.store(false, Ordering::Relaxed);
        let idle = self.idle_timeout;
        std::future::ready(Ok((
            AdminStream {
                inner: stream,
                _permit: permit,
                idle,
                deadline: Box::pin(tokio::time::sleep(idle)),
            },
            service,
        )))
    }
}

/// An admitted connection: its permit, and a deadline pushed back by every byte it sends.
pub(super) struct AdminStream {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl AsyncRead for AdminStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    let next = Instant::now() + self.idle;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "admin connection idle past its timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for AdminStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
