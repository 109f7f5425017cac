//! A server that leaves a dial unanswered past a caller's deadline (a host that died without a
//! reset, a frozen process, a partition) is probed in the background, one dial at a time,
//! while callers fail at once. Without this, every caller after the back-off dialled again and
//! waited out its whole deadline, so an engine's calls to a dead host stalled one deadline each
//! for as long as the host stayed down.
//!
//! A request left unanswered past its deadline on an open connection (a hung or stopped
//! process, whose kernel keeps the connections open) does the same: each call used to wait
//! out its whole deadline on them for as long as the server stayed hung. Either way the open
//! connections are passed over too until the probe's ping is answered (a dial that goes
//! unanswered while a connection is open means the same hung server, reached by another
//! slot). A server that is only slow answers the ping at once, so a false alarm costs
//! milliseconds of fast failures.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use memkv_proto::AuthKey;

use memkv_proto::{Opcode, Status};

use crate::Error;
use crate::conn::{CLIENT_LIMITS, Connection, Dial, Sink};
use crate::pool::BACKOFF_MAX;

/// How long one background dial may take before it counts as unanswered. A dial is a TCP
/// connect and a four-frame handshake: milliseconds to a live server.
pub(crate) const PROBE_DIAL_LIMIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    /// Set while the server is not answering: what callers are told.
    down: Option<Error>,
    /// A probe task is running.
    probing: bool,
    /// The connection the probe opened, for the next caller to take into its slot.
    found: Option<Connection>,
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

    /// A connection the probe opened, once.
    pub fn take_found(&self) -> Option<Connection> {
        self.state().found.take()
    }

    /// A caller's deadline passed while its dial or request had no answer: callers fail at
    /// once from now on, and a probe dials and pings until the server answers. Needs a Tokio runtime; without one
    /// (a runtime shutting down) nothing is started and callers dial as before.
    pub fn start(self: &Arc<Self>, target: Target, err: Error) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut state = self.state();
        state.down = Some(err);
        if state.probing {
            return;
        }
        state.probing = true;
        drop(state);
        tracing::warn!(
            server = %target.server,
            "no answer within the caller's deadline: failing calls at once and checking the server in the background"
        );
        runtime.spawn(run(Arc::downgrade(self), target));
    }
}

async fn run(probe: Weak<Probe>, target: Target) {
    let dial = Dial {
        server: &target.server,
        key: &target.key,
        payload_mac: target.payload_mac,
        limits: CLIENT_LIMITS,
    };
    loop {
        let outcome = tokio::time::timeout(PROBE_DIAL_LIMIT, answering(&dial)).await;
        {
            let Some(probe) = probe.upgrade() else {
                return;
            };
            let mut state = probe.state();
            match outcome {
                Ok(Ok(conn)) => {
                    tracing::info!(server = %target.server, "answering again");
                    *state = State {
                        found: Some(conn),
                        ..State::default()
                    };
                    return;
                }
                // Until a dial succeeds, callers keep failing at once (a refusal too: the host
                // is back but its server is not, and the probe's next dial finds it).
                Ok(Err(err)) => state.down = Some(err),
                // Unanswered: that dial already waited, and the next one, waiting at once, is
                // answered the moment a stopped server resumes.
                Err(_) => continue,
            }
        }
        tokio::time::sleep(BACKOFF_MAX).await;
    }
}

/// A new connection to the server, once it has answered a ping on it: a hung server's kernel
/// may still complete a connect, and its process a handshake.
async fn answering(dial: &Dial<'_>) -> crate::Result<Connection> {
    let conn = Connection::open(dial).await?;
    let probe = b"memkv probe";
    match conn
        .call(Opcode::Ping, &[], &[probe], None, Sink::default())
        .await
    {
        Ok(r) if r.status == Status::Ok => Ok(conn),
        Ok(r) => Err(Error::from_status(dial.server, r.status, &r.payload)),
        Err(e) => Err(e.into_error()),
    }
}
