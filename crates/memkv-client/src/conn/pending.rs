//! Requests waiting for their responses, shared by callers and the reader task.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use memkv_proto::Opcode;
use tokio::sync::{Notify, oneshot};

use super::{Response, Sink};
use crate::Error;

pub(crate) type Reply = Result<Response, Error>;

/// One outstanding request.
pub(crate) struct Entry {
    pub opcode: Opcode,
    pub tx: oneshot::Sender<Reply>,
    /// Where the response payload is read to.
    pub sink: Sink,
}

struct State {
    map: HashMap<u64, Entry>,
    closed: Option<Error>,
}

/// The outstanding requests of one connection and whether it is closed.
pub(crate) struct Pending {
    server: String,
    closed: AtomicBool,
    /// Wakes [`Pending::closed`] waiters.
    closing: Notify,
    state: Mutex<State>,
}

impl Pending {
    pub fn new(server: &str) -> Pending {
        Pending {
            server: server.to_owned(),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
            state: Mutex::new(State {
                map: HashMap::new(),
                closed: None,
            }),
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves the map consistent (single inserts/removes).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers request `id`; fails when the connection is already closed.
    pub fn register(
        &self,
        id: u64,
        opcode: Opcode,
        sink: Sink,
    ) -> Result<(oneshot::Receiver<Reply>, Registration<'_>), (Error, Sink)> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.lock();
        if let Some(e) = &state.closed {
            return Err((e.clone(), sink));
        }
        state.map.insert(id, Entry { opcode, tx, sink });
        Ok((
            rx,
            Registration {
                pending: self,
                id,
                armed: true,
            },
        ))
    }

    /// Removes and returns request `id` (the reader calls this when its response arrives).
    pub fn take(&self, id: u64) -> Option<Entry> {
        self.lock().map.remove(&id)
    }

    /// Marks the connection closed and fails every outstanding request with `err`.
    pub fn close(&self, err: Error) {
        let drained: Vec<Entry> = {
            let mut state = self.lock();
            if state.closed.is_none() {
                state.closed = Some(err.clone());
            }
            self.closed.store(true, Ordering::Release);
            state.map.drain().map(|(_, e)| e).collect()
        };
        self.closing.notify_waiters();
        for entry in drained {
            let _ = entry.tx.send(Err(err.clone()));
        }
    }

    /// Returns once the connection is closed (at once if it is).
    pub async fn closed(&self) {
        // Registered before the check: a close in between still wakes it.
        let notified = self.closing.notified();
        if self.is_closed() {
            return;
        }
        notified.await;
    }

    /// Why the connection closed (or a generic reason if it has not).
    pub fn closed_error(&self) -> Error {
        self.lock()
            .closed
            .clone()
            .unwrap_or_else(|| Error::Disconnected {
                server: self.server.clone(),
                reason: "the connection closed".into(),
            })
    }
}

/// Removes its request from the map when the caller stops waiting (deadline, cancellation).
pub(crate) struct Registration<'a> {
    pending: &'a Pending,
    id: u64,
    armed: bool,
}

impl Registration<'_> {
    /// The response was delivered; nothing to clean up.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pending.take(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_fails_outstanding_and_refuses_new_requests() {
        let p = Pending::new("s:1");
        let (mut rx, reg) = p.register(1, Opcode::TcpGet, Sink::default()).unwrap();
        p.close(Error::Disconnected {
            server: "s:1".into(),
            reason: "test".into(),
        });
        assert!(matches!(rx.try_recv(), Ok(Err(Error::Disconnected { .. }))));
        drop(reg);
        assert!(p.is_closed());
        assert!(p.register(2, Opcode::TcpGet, Sink::default()).is_err());
    }

    #[test]
    fn an_abandoned_request_leaves_the_map() {
        let p = Pending::new("s:1");
        let (_rx, reg) = p.register(7, Opcode::Ping, Sink::default()).unwrap();
        drop(reg);
        assert!(p.take(7).is_none());
        let (_rx, reg) = p.register(8, Opcode::Ping, Sink::default()).unwrap();
        assert!(p.take(8).is_some());
        reg.disarm();
    }
}
