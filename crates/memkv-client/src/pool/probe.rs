//! A server that leaves a dial or a request unanswered past a caller's deadline (a host that
//! died without a reset, a stopped or stuck process, a partition) is checked in the
//! background, one connection at a time, while callers fail at once. Without this, every
//! call waited out its whole deadline for as long as the server stayed silent: on the
//! connections it kept open (a stopped process's kernel keeps them), or on a fresh dial after
//! the back-off. An engine calling memkv in its step lost that much on every step.
//!
//! A request's silence is confirmed first: a caller's own short deadline, or a large transfer
//! on a busy link, also ends in a timeout, and a server that answers a fresh connection's ping
//! within [`CONFIRM_LIMIT`] is left in use. Any answer from the server ends the check: a ping,
//! and also a refusal (a server at `limits.max_connections` still serves the connections it
//! has). While the server is down the open connections are passed over too: a dial that goes
//! unanswered while a connection is open means the same silent server, reached by another
//! slot.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use memkv_proto::{AuthKey, Opcode};

use crate::Error;
use crate::conn::{CLIENT_LIMITS, Connection, Dial, Sink};
use crate::pool::BACKOFF_MAX;

/// How long one background check (connect, handshake, ping) may take before the server counts
/// as silent. Milliseconds to a live server.
pub(crate) const PROBE_DIAL_LIMIT: Duration = Duration::from_secs(5);
/// How long the check that confirms a request's silence may take.
pub(crate) const CONFIRM_LIMIT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    /// Set while the server is not answering: what callers are told.
    down: Option<Error>,
    /// A check task is running.
    probing: bool,
}

/// Shared by a server's pool and its probe task (which holds it weakly, so a dropped client
/// stops probing).
#[derive(Default)]
pub(crate) struct Probe {
    state: Mutex<State>,
}

/// What a probe dials with, owned, since it outlives the caller that started it.
pub(crate) struct Target {
    pub server: String,
    pub key: AuthKey,
    pub payload_mac: bool,
}

impl Probe {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The error for callers while the server is not answering.
    pub fn down(&self) -> Option<Error> {
        self.state().down.clone()
    }

    /// A caller's dial went unanswered past its deadline: callers fail at once from now on,
    /// and the server is checked until it answers.
    pub fn dial_unanswered(self: &Arc<Self>, target: Target, err: Error) {
        self.start(target, err, false);
    }

    /// A request went unanswered past its caller's deadline: the server is checked, and if a
    /// fresh connection's ping is not answered within [`CONFIRM_LIMIT`] either, callers fail at
    /// once until it is.
    pub fn request_unanswered(self: &Arc<Self>, target: Target, err: Error) {
        self.start(target, err, true);
    }

    /// Needs a Tokio runtime; without one nothing starts and callers go on as before.
    fn start(self: &Arc<Self>, target: Target, err: Error, confirm: bool) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut state = self.state();
        if !confirm {
            state.down = Some(err.clone());
        }
        if state.probing {
            return;
        }
        state.probing = true;
        drop(state);
        runtime.spawn(run(
            Checking(Arc::downgrade(self)),
            target,
            confirm.then_some(err),
        ));
    }
}

/// Held by the check task: when it ends, however it ends (a runtime shutting down drops it
/// unfinished), the next silence can start another, and callers are not failed by a check
/// that no longer runs.
struct Checking(Weak<Probe>);

impl Drop for Checking {
    fn drop(&mut self) {
        if let Some(probe) = self.0.upgrade() {
            *probe.state() = State::default();
        }
    }
}

/// `unconfirmed`: a request's silence, not yet made the callers' error.
async fn run(checking: Checking, target: Target, mut unconfirmed: Option<Error>) {
    let dial = Dial {
        server: &target.server,
        key: &target.key,
        payload_mac: target.payload_mac,
        limits: CLIENT_LIMITS,
    };
    loop {
        let limit = match unconfirmed {
            Some(_) => CONFIRM_LIMIT,
            None => PROBE_DIAL_LIMIT,
        };
        let outcome = tokio::time::timeout(limit, answer(&dial)).await;
        let Some(probe) = checking.0.upgrade() else {
            return;
        };
        match outcome {
            // `checking` clears the state as the task ends.
            Ok(Ok(())) => {
                if unconfirmed.is_none() {
                    tracing::info!(server = %target.server, "answering again");
                }
                return;
            }
            Ok(Err(err)) => {
                // Nobody there (refused, no route): the host is back but not its server, or
                // neither; the next check finds it.
                probe.state().down = Some(err);
                unconfirmed = None;
            }
            Err(_) => {
                if let Some(err) = unconfirmed.take() {
                    tracing::warn!(
                        server = %target.server,
                        "a request and a fresh ping went unanswered: failing calls at once and checking the server in the background"
                    );
                    probe.state().down = Some(err);
                }
                // That check already waited; the next one, waiting at once, is answered the
                // moment a stopped server resumes.
                continue;
            }
        }
        drop(probe);
        tokio::time::sleep(BACKOFF_MAX).await;
    }
}

/// Whether the server answers: a new connection's handshake and a ping on it, or any refusal
/// the server itself sends (it is there, and serves the connections it has). `Err`: the
/// connect failed, nobody answered.
async fn answer(dial: &Dial<'_>) -> crate::Result<()> {
    let conn = match Connection::open(dial).await {
        Ok(conn) => conn,
        Err(e) if answered_by_the_server(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    // Any answer will do, an error status too.
    conn.call(Opcode::Ping, &[], &[b"memkv probe"], None, Sink::default())
        .await
        .map(drop)
        .map_err(|e| e.into_error())
}

/// A handshake the server refused, or answered in a way this client cannot use: the server
/// process answered.
fn answered_by_the_server(e: &Error) -> bool {
    match e {
        Error::Unauthorized { .. } | Error::UnsupportedVersion { .. } | Error::Server { .. } => {
            true
        }
        Error::Unreachable { source, .. } => source.kind() == std::io::ErrorKind::ResourceBusy,
        _ => false,
    }
}
