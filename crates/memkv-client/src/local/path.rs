//! Which servers this client reaches through shared memory. Each server is tried on first
//! use; one that is not on this host (or does not offer it) is tried again only after a
//! while, so a client of remote servers pays one extra round trip per server per
//! [`RETRY_AFTER`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::attach::{Attached, NotLocal};
use crate::client::Client;
use crate::config::{ClientConfig, Transport};
use crate::{Error, Result};

/// How long a server that could not be attached is left on RDMA or TCP before trying again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(60);
/// After a transfer failed on a mapping (a restarted server, most likely): a short pause, then
/// a fresh attach.
const REATTACH_AFTER: Duration = Duration::from_millis(100);

enum Slot {
    Untried,
    /// Under `auto`: an attach runs in the background; operations go around it meanwhile.
    Attaching,
    Attached(Arc<Attached>),
    Unavailable {
        reason: String,
        until: Instant,
    },
}

struct ServerSlot {
    state: Mutex<Slot>,
    /// One attach at a time per server; the others wait for its outcome.
    attaching: tokio::sync::Mutex<()>,
}

pub(crate) struct LocalPath {
    /// `transport: shm`: a server that cannot be attached fails the operation.
    strict: bool,
    servers: Vec<ServerSlot>,
}

impl LocalPath {
    /// `None` under `tcp` and `rdma`, which never use shared memory, and under `auto` with
    /// `shared_memory` off.
    pub fn new(config: &ClientConfig) -> Option<LocalPath> {
        let strict = match config.transport {
            Transport::Auto if !config.shared_memory => return None,
            Transport::Auto => false,
            Transport::Shm => true,
            Transport::Tcp | Transport::Rdma => return None,
        };
        let servers = config
            .servers
            .iter()
            .map(|_| ServerSlot {
                state: Mutex::new(Slot::Untried),
                attaching: tokio::sync::Mutex::new(()),
            })
            .collect();
        Some(LocalPath { strict, servers })
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    fn lock(&self, index: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.servers[index]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The attachment now, without trying: `Ok(None)` when untried or due for a retry.
    fn current(&self, index: usize, server: &str) -> Result<Option<Option<Arc<Attached>>>> {
        match &*self.lock(index) {
            Slot::Attached(a) => Ok(Some(Some(Arc::clone(a)))),
            Slot::Attaching => Ok(Some(None)),
            Slot::Unavailable { reason, until } if Instant::now() < *until => {
                if self.strict {
                    Err(unavailable(server, reason))
                } else {
                    Ok(Some(None))
                }
            }
            _ => Ok(None),
        }
    }

    /// Claims server `index`'s attach for a background task; false when it is not due (one
    /// runs already, or the server is attached or left alone for now).
    fn begin_attach(&self, index: usize) -> bool {
        let mut slot = self.lock(index);
        let due = match &*slot {
            Slot::Untried => true,
            Slot::Unavailable { until, .. } => Instant::now() >= *until,
            Slot::Attaching | Slot::Attached(_) => false,
        };
        if due {
            *slot = Slot::Attaching;
        }
        due
    }

    /// Drops `failed` (if it is still server `index`'s attachment) after a transfer through
    /// it failed; the next operation attaches again.
    pub fn detach(&self, index: usize, failed: &Arc<Attached>, reason: &str) {
        let mut slot = self.lock(index);
        if matches!(&*slot, Slot::Attached(a) if Arc::ptr_eq(a, failed)) {
            tracing::info!(server = index, reason, "same-host transport: detached");
            *slot = Slot::Unavailable {
                reason: reason.to_owned(),
                until: Instant::now() + REATTACH_AFTER,
            };
        }
    }

    /// Lets go of `attached` (if it is still server `index`'s attachment) when its server
    /// closed the connection it is watched on: the next operation attaches afresh, at once.
    fn let_go(&self, index: usize, attached: &Arc<Attached>) {
        let mut slot = self.lock(index);
        if matches!(&*slot, Slot::Attached(a) if Arc::ptr_eq(a, attached)) {
            tracing::info!(
                server = index,
                "same-host transport: the server closed its connection; its arena is let go"
            );
            *slot = Slot::Untried;
        }
    }

    /// Names of the servers attached now (`servers` as the client lists them).
    pub fn attached<'a>(&self, servers: &[&'a str]) -> Vec<&'a str> {
        (0..self.servers.len())
            .filter(|&i| matches!(&*self.lock(i), Slot::Attached(_)))
            .map(|i| servers[i])
            .collect()
    }
}

/// A background attach under `auto`. Dropped with its slot still `Attaching` (the task dropped
/// unfinished, as a runtime shuts down), it makes the slot untried again: otherwise the server
/// would never be attached by this client.
struct AttachTask {
    client: Client,
    index: usize,
}

impl Drop for AttachTask {
    fn drop(&mut self) {
        if let Some(local) = &self.client.inner.local {
            let mut slot = local.lock(self.index);
            if matches!(*slot, Slot::Attaching) {
                *slot = Slot::Untried;
            }
        }
    }
}

fn unavailable(server: &str, reason: &str) -> Error {
    Error::SharedMemory {
        server: server.to_owned(),
        reason: format!("not attached: {reason}"),
    }
}

impl Client {
    /// Server `index`'s mapped arena; `Ok(None)`: serve it another way.
    ///
    /// Under `auto` this never waits: an untried server's attach starts in the background and
    /// the operation goes over TCP or RDMA meanwhile. Mapping a large arena takes seconds
    /// under load (the first client faults in every page), and an engine's first save used
    /// to wait for it and time out. A server that does not answer costs the operation one
    /// deadline, on the way around.
    ///
    /// Under `transport: shm` there is no way around: a server that cannot be attached is an
    /// error, and waiting for another caller's attach and attaching keep to this caller's
    /// deadline ([`Error::Timeout`]).
    pub(crate) async fn local_arena(&self, index: usize) -> Result<Option<Arc<Attached>>> {
        let Some(local) = &self.inner.local else {
            return Ok(None);
        };
        let server = self.server_name(index);
        if let Some(known) = local.current(index, server)? {
            return Ok(known);
        }
        if !local.strict {
            if local.begin_attach(index) {
                let task = AttachTask {
                    client: self.clone(),
                    index,
                };
                tokio::spawn(async move {
                    // Its outcome is in the slot for the next operation; a failure is logged.
                    let _ = task.client.attach_once(index).await;
                    drop(task);
                });
            }
            return Ok(None);
        }
        // A task of its own: mapping a large arena can take longer than a deadline (the first
        // client faults in every page of it). An attach abandoned with its operation was
        // started over by the next one, so a client whose deadline was shorter never attached.
        let client = self.clone();
        let attaching = tokio::spawn(async move { client.attach_once(index).await });
        // The operation renames the timeout after itself (`local/routes.rs`).
        match tokio::time::timeout(self.timeout, attaching).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Err(Error::Config(format!("local attach panicked: {e}"))),
            Err(_) => Err(Error::Timeout {
                server: server.to_owned(),
                op: "attach",
                after: self.timeout,
            }),
        }
    }

    async fn attach_once(&self, index: usize) -> Result<Option<Arc<Attached>>> {
        let Some(local) = &self.inner.local else {
            return Ok(None);
        };
        let server = self.server_name(index);
        let _one_at_a_time = local.servers[index].attaching.lock().await;
        // Under `auto` the slot says `Attaching`: this is that attach.
        if !matches!(*local.lock(index), Slot::Attaching)
            && let Some(known) = local.current(index, server)?
        {
            return Ok(known);
        }
        let why = match self.attach_local(index).await {
            Ok(attached) => {
                tracing::info!(
                    server,
                    arena_bytes = attached.arena.len(),
                    "same-host transport: values move through the server's arena"
                );
                let attached = Arc::new(attached);
                *local.lock(index) = Slot::Attached(Arc::clone(&attached));
                self.let_go_when_closed(index, &attached).await;
                return Ok(Some(attached));
            }
            Err(why) => why,
        };
        let mut slot = local.lock(index);
        let reason = why.to_string();
        match &why {
            NotLocal::Failed(_) => {
                tracing::warn!(server, %reason, "same-host transport: attach failed")
            }
            _ => tracing::debug!(server, %reason, "same-host transport: not used"),
        }
        let retry = match why {
            // The server is down or slow: the operation fails anyway; try again soon.
            NotLocal::Failed(Error::Timeout { .. } | Error::Unreachable { .. }) => {
                REATTACH_AFTER * 10
            }
            // A refusal, or a server that does not know LocalAttach (an older one
            // closes the connection): do not ask again for a while.
            NotLocal::Failed(_) | NotLocal::Refused(_) | NotLocal::Elsewhere(_) => RETRY_AFTER,
        };
        *slot = Slot::Unavailable {
            reason: reason.clone(),
            until: Instant::now() + retry,
        };
        match why {
            NotLocal::Failed(e @ Error::Timeout { .. }) => Err(e),
            _ if local.strict => Err(unavailable(server, &reason)),
            _ => Ok(None),
        }
    }

    /// Watches one of server `index`'s connections and lets go of `attached` when it closes.
    /// Without it a client with nothing to do kept a stopped server's arena mapped, and with
    /// it every value the server held, until its next operation: a server restarted under
    /// idle clients found its hugepages still held by its old arena and fell back to 4 KiB
    /// pages. A server closes its connections as it stops (and idle ones after
    /// `network.idle_timeout`; the next operation then attaches again). The watch keeps
    /// neither the connection, the client nor the mapping alive.
    async fn let_go_when_closed(&self, index: usize, attached: &Arc<Attached>) {
        let Ok(connection) = self.inner.pools[index].connection().await else {
            return;
        };
        let closing = connection.into_connection().closing();
        let client = Arc::downgrade(&self.inner);
        let attached = Arc::downgrade(attached);
        tokio::spawn(async move {
            closing.await;
            if let (Some(inner), Some(attached)) = (client.upgrade(), attached.upgrade())
                && let Some(local) = &inner.local
            {
                local.let_go(index, &attached);
            }
        });
    }

    /// Each server's mapped arena for the servers in `servers` (indices, repeats allowed);
    /// attaches the untried ones at once. An error (strict mode) is the server's.
    pub(crate) async fn local_arenas(
        &self,
        servers: impl Iterator<Item = usize>,
    ) -> Vec<Option<Result<Option<Arc<Attached>>>>> {
        let mut wanted = vec![false; self.inner.pools.len()];
        for s in servers {
            wanted[s] = true;
        }
        let indices: Vec<usize> = (0..wanted.len()).filter(|&i| wanted[i]).collect();
        let found = futures::future::join_all(indices.iter().map(|&i| self.local_arena(i))).await;
        let mut out: Vec<Option<Result<Option<Arc<Attached>>>>> =
            (0..wanted.len()).map(|_| None).collect();
        for (i, r) in indices.into_iter().zip(found) {
            out[i] = Some(r);
        }
        out
    }
}
