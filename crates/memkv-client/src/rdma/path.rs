//! The RDMA transport: control (Connect, Allocate, Commit, Lookup, Release) stays on the
//! authenticated TCP connections; value bytes move one-sided with memkv-rdma. Each server gets
//! one RC queue pair per rail (`MEMKV_RDMA_DEVICES`), each bound to the TCP connection that sent
//! its Connect (the server drops its end when that connection closes; it allows 8 per
//! connection). Transfers spread over the rails ([`super::plan`]); a failing rail is dropped
//! for that server while the others carry on ([`super::rails`]).
//!
//! `transport: auto` sends a server's values over TCP for 30 s after an RDMA failure with it
//! ([`super::fallback`]), logged at WARN with the reason, then tries RDMA again; the other
//! servers stay on RDMA. `transport: rdma` hands every failure to the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use memkv_fabric::{Fabric, FabricConfig, FabricError};
use memkv_proto::connect::RdmaEndpoint;
use memkv_proto::{Opcode, Status};
use memkv_rdma::{QpOptions, RdmaDevice, StagingPool};
use tokio::sync::Mutex;

use super::channel::{Channel, dci_pool};
use super::fallback::{Fallback, RETRY_AFTER};
use super::rails::{Health, Rail, RailStats, usable};
use crate::config::{ClientConfig, Transport};
use crate::conn::Connection;
use crate::pool::ServerPool;
use crate::{Error, Result};
use futures::future::join_all;

/// Staging buffers per rail and their size: unregistered values pass through these.
const STAGING_BUFFERS: usize = 16;
const STAGING_SIZE: usize = 4 << 20;

/// One server's channel on one rail (an RC queue pair, or DC initiators towards its DC
/// target) and the control connection that keeps the server's end alive.
/// The remote memory a server announced in its Connect answer on one rail (its arena, or its
/// staging region): where it starts and its rkey. Connect names no length, so only the start
/// and the end of the address space bound a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArenaWindow {
    pub addr: u64,
    pub rkey: u32,
}

pub(crate) struct Session {
    control: Arc<Connection>,
    pub channel: Channel,
    pub rail: usize,
    /// What the server announced in Connect: ranges it gives later must lie there.
    pub arena: ArenaWindow,
}

impl Session {
    fn usable(&self) -> bool {
        self.control.is_open() && !self.channel.is_broken()
    }
}

/// A server's session and health on one rail.
#[derive(Default)]
struct RailSlot {
    session: Mutex<Option<Arc<Session>>>,
    health: std::sync::Mutex<Health>,
}

/// The process's RDMA rails and per-server, per-rail sessions.
pub(crate) struct RdmaPath {
    strict: bool,
    rails: Vec<Rail>,
    /// `[server][rail]`.
    slots: Vec<Vec<RailSlot>>,
    /// Rotates the rail that small transfers and registered buffers start on.
    next_rail: AtomicUsize,
    /// Under `auto`, per server (as listed): whether its values go over TCP for now, after an
    /// RDMA failure with it.
    fallbacks: Vec<Fallback>,
    /// The servers as listed, which name them in errors.
    servers: Vec<String>,
    /// DC access key for servers that answer Connect with their DC target.
    dc_key: u64,
    /// Queue pair settings: work requests share the client's operation deadline.
    qp_options: QpOptions,
    // Dropped last: its event watchers serve the devices above.
    _fabric: Fabric,
}

pub(crate) fn rdma_err(server: &str, reason: impl std::fmt::Display) -> Error {
    Error::Rdma {
        server: server.to_owned(),
        reason: reason.to_string(),
    }
}

impl RdmaPath {
    /// Opens the configured rails. `Ok(Err(reason))`: TCP only (`tcp`, or `auto` with no
    /// usable rail, which is logged once at WARN).
    pub fn start(config: &ClientConfig) -> Result<std::result::Result<RdmaPath, String>> {
        Self::start_on(config, Fabric::start)
    }

    /// [`Self::start`] with the fabric started by `start_fabric`, handed the client's fabric
    /// knobs and rails (a test double plans fixture ports with them instead of this host's).
    fn start_on(
        config: &ClientConfig,
        start_fabric: impl FnOnce(&FabricConfig, &[String]) -> std::result::Result<Fabric, FabricError>,
    ) -> Result<std::result::Result<RdmaPath, String>> {
        let strict = match config.transport {
            Transport::Tcp => return Ok(Err("transport tcp".into())),
            Transport::Shm => return Ok(Err("transport shm".into())),
            Transport::Rdma => true,
            Transport::Auto => false,
        };
        let unavailable = |reason: String| {
            if strict {
                Err(Error::RdmaUnavailable { reason })
            } else {
                tracing::warn!(
                    "RDMA unavailable ({reason}); using TCP for the rest of the process"
                );
                Ok(Err(reason))
            }
        };
        let fabric = match start_fabric(&config.fabric_config(), &config.rdma_devices) {
            Ok(f) => f,
            Err(e) => return unavailable(e.to_string()),
        };
        if let Some(why) = fabric.no_devices() {
            return unavailable(format!("no RDMA devices: {why}"));
        }
        let names: Vec<String> = if config.rdma_devices.is_empty() {
            let mut all: Vec<String> = fabric
                .plans()
                .iter()
                .map(|p| p.facts.device.clone())
                .collect();
            all.dedup();
            all
        } else {
            config.rdma_devices.clone()
        };
        // A work request unanswered for three quarters of the operation's deadline breaks its
        // queue pair and counts as congestion, before the operation itself gives up (which
        // would drop it as a plain cancellation): on a fabric that retries without end
        // (Soft-RoCE takes a retry count of 7 as infinite) that is the only congestion signal.
        let qp_options = QpOptions {
            op_deadline: config.timeout.mul_f64(0.75),
            ..QpOptions::default()
        };
        let mut rails = Vec::new();
        let mut dropped = Vec::new();
        for name in &names {
            let opened = RdmaDevice::open(&fabric, Some(name), None).and_then(|device| {
                let staging = StagingPool::new(&device, STAGING_SIZE, STAGING_BUFFERS)?;
                let dci = dci_pool(&device, config.num_dcis, qp_options.clone());
                Ok(Rail::new(device, staging, dci))
            });
            match opened {
                Ok(rail) => rails.push(rail),
                Err(e) => {
                    tracing::warn!(rail = %name, "RDMA rail dropped: {e}");
                    dropped.push(format!("{name}: {e}"));
                }
            }
        }
        if rails.is_empty() {
            return unavailable(format!("no usable RDMA rail ({})", dropped.join("; ")));
        }
        tracing::info!(
            rails = %rails.iter().map(|r| r.device.name()).collect::<Vec<_>>().join(","),
            "RDMA transport ready"
        );
        let slots = config
            .servers
            .iter()
            .map(|_| (0..rails.len()).map(|_| RailSlot::default()).collect())
            .collect();
        Ok(Ok(RdmaPath {
            strict,
            rails,
            slots,
            next_rail: AtomicUsize::new(0),
            fallbacks: config
                .servers
                .iter()
                .map(|_| Fallback::new(Instant::now()))
                .collect(),
            servers: config.servers.clone(),
            dc_key: config.auth_key.dc_access_key(),
            qp_options,
            _fabric: fabric,
        }))
    }

    /// Whether operations should try RDMA now: with at least one server (those whose values
    /// go over TCP for now refuse in [`Self::sessions`], and their items go over TCP).
    pub fn active(&self) -> bool {
        let now = Instant::now();
        self.fallbacks.iter().any(|f| f.rdma_at(now))
    }

    /// Records an RDMA failure. `true`: the caller retries over TCP (`auto`, which then sends
    /// that server's values over TCP for [`RETRY_AFTER`] before it tries RDMA again); `false`:
    /// the caller returns the error.
    pub fn failed(&self, err: &Error) -> bool {
        if self.strict {
            return false;
        }
        let server = match err {
            Error::Rdma { server, .. } => self.servers.iter().position(|s| s == server),
            _ => None,
        };
        let now = Instant::now();
        // An error that names no listed server (none should) pauses them all.
        let hit: Vec<&Fallback> = match server {
            Some(index) => vec![&self.fallbacks[index]],
            None => self.fallbacks.iter().collect(),
        };
        let mut switched = false;
        for f in hit {
            switched |= f.failed(now, err.to_string());
        }
        if switched {
            tracing::warn!(
                "RDMA failed ({err}); that server's values go over TCP for {RETRY_AFTER:?}, then RDMA is tried again"
            );
        }
        true
    }

    /// Whether an item the server answered Busy for (a drive-backed server whose RDMA staging
    /// is full) goes over TCP: under `auto` that item alone does, and RDMA stays in use; under
    /// `rdma` the error is the caller's.
    pub fn busy_to_tcp(&self, err: &Error) -> bool {
        !self.strict && err.is_busy()
    }

    /// Why an `auto` client sends values over TCP for now, after RDMA failures (one reason per
    /// server affected); `None` while RDMA is in use with every server.
    pub fn fallback_reason(&self) -> Option<String> {
        let now = Instant::now();
        let reasons: Vec<String> = self
            .fallbacks
            .iter()
            .filter_map(|f| f.reason_at(now))
            .collect();
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// The rail `session` uses.
    pub fn rail(&self, session: &Session) -> &Rail {
        &self.rails[session.rail]
    }

    pub fn rail_at(&self, rail: usize) -> &Rail {
        &self.rails[rail]
    }

    /// The staging buffers of `session`'s rail.
    pub fn staging(&self, session: &Session) -> &Arc<StagingPool> {
        &self.rails[session.rail].staging
    }

    /// A number that rotates per call: where spreading starts.
    pub fn rotate(&self) -> usize {
        self.next_rail.fetch_add(1, Ordering::Relaxed)
    }

    /// A buffer registered on the next rail in turn (buffers spread over the rails), for
    /// zero-copy puts and gets.
    pub fn register(
        &self,
        len: usize,
    ) -> std::result::Result<(usize, memkv_rdma::RegisteredBuffer), memkv_rdma::RdmaError> {
        let rail = self.rotate() % self.rails.len();
        Ok((
            rail,
            memkv_rdma::RegisteredBuffer::new(&self.rails[rail].device, len)?,
        ))
    }

    /// Caller memory registered as it is on the next rail in turn.
    pub fn register_caller(
        &self,
        memory: Box<dyn memkv_rdma::CallerMemory>,
    ) -> std::result::Result<(usize, memkv_rdma::RegisteredBuffer), memkv_rdma::RdmaError> {
        let rail = self.rotate() % self.rails.len();
        Ok((
            rail,
            memkv_rdma::RegisteredBuffer::over(&self.rails[rail].device, memory)?,
        ))
    }

    /// The devices in use, for reports.
    pub fn rail_names(&self) -> Vec<String> {
        self.rails
            .iter()
            .map(|r| r.device.name().to_owned())
            .collect()
    }

    /// Per-rail counters: doorbells, bytes moved, servers the rail is dropped for.
    pub fn rail_stats(&self, servers: &[&str]) -> Vec<RailStats> {
        let now = Instant::now();
        self.rails
            .iter()
            .enumerate()
            .map(|(r, rail)| {
                let mut doorbells = rail.retired_doorbells.load(Ordering::Relaxed)
                    + rail.dci.as_ref().map_or(0, |p| p.doorbells());
                let mut dropped = Vec::new();
                let mut dc_sessions = 0;
                for (server, slots) in servers.iter().zip(&self.slots) {
                    if let Ok(s) = slots[r].session.try_lock()
                        && let Some(s) = s.as_ref()
                    {
                        doorbells += s.channel.doorbells();
                        dc_sessions += usize::from(matches!(s.channel, Channel::Dc { .. }));
                    }
                    let health = slots[r].health.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(reason) = health.reason(now) {
                        dropped.push(((*server).to_owned(), reason.to_owned()));
                    }
                }
                RailStats {
                    device: rail.device.name().to_owned(),
                    doorbells,
                    bytes: rail.bytes.load(Ordering::Relaxed),
                    dropped,
                    transport: if dc_sessions > 0 { "DC" } else { "RC" },
                    transport_reason: match (&rail.no_dc, dc_sessions) {
                        (_, 1..) => "both sides support DC".to_owned(),
                        (Some(why), _) => format!("no DC on this side: {why}"),
                        (None, _) => "the server offers no DC target".to_owned(),
                    },
                    traffic_class: rail.device.plan().traffic_class.map(|tc| tc.value),
                    service_level: rail.device.plan().service_level.value,
                }
            })
            .collect()
    }

    /// Drops `rail` for server `index` after `reason` (logged the first time), unless it is
    /// the client's only rail: then the failure is the caller's alone.
    pub fn rail_failed(
        &self,
        index: usize,
        server: &str,
        rail: usize,
        reason: &dyn std::fmt::Display,
    ) {
        if self.rails.len() < 2 {
            return;
        }
        let first = self.slots[index][rail]
            .health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drop_until(Instant::now(), reason.to_string());
        let device = self.rails[rail].device.name();
        if first {
            tracing::warn!(
                rail = %device,
                %server,
                "RDMA rail dropped for this server ({reason}); the other rails carry its transfers"
            );
        } else {
            tracing::debug!(rail = %device, %server, "RDMA rail dropped again ({reason})");
        }
    }

    /// Sessions with server `index` on its live rails, connected (or reconnected) at once. A
    /// rail that cannot connect is dropped for the server; with none left, the first error.
    pub async fn sessions(&self, index: usize, pool: &ServerPool) -> Result<Vec<Arc<Session>>> {
        let now = Instant::now();
        if let Some(reason) = self.fallbacks[index].reason_at(now) {
            // Its values go over TCP for now (`auto` only: under `rdma` nothing falls back).
            return Err(rdma_err(
                pool.server(),
                format!("on TCP for now, after an RDMA failure ({reason})"),
            ));
        }
        let live: Vec<bool> = self.slots[index]
            .iter()
            .map(|s| s.health.lock().unwrap_or_else(|p| p.into_inner()).live(now))
            .collect();
        let rails = usable(&live);
        let opened = join_all(rails.iter().map(|&r| self.session(index, r, pool))).await;
        let mut sessions = Vec::with_capacity(opened.len());
        let mut first_error = None;
        for (&rail, result) in rails.iter().zip(opened) {
            match result {
                Ok(s) => sessions.push(s),
                Err(e) => {
                    if matches!(e, Error::Rdma { .. }) {
                        self.rail_failed(index, pool.server(), rail, &e);
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if sessions.is_empty() => Err(e),
            _ => Ok(sessions),
        }
    }

    /// The session with server `index` on `rail`, connecting (or reconnecting) its queue pair.
    async fn session(&self, index: usize, rail: usize, pool: &ServerPool) -> Result<Arc<Session>> {
        let mut slot = self.slots[index][rail].session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| s.usable()) {
            return Ok(Arc::clone(s));
        }
        if let Some(old) = slot.take() {
            self.rails[rail]
                .retired_doorbells
                .fetch_add(old.channel.doorbells(), Ordering::Relaxed);
        }
        let server = pool.server();
        let control = pool.connection().await?.into_connection();
        let qp = Arc::new(
            self.rails[rail]
                .device
                .create_rc_with(self.qp_options.clone())
                .map_err(|e| rdma_err(server, e))?,
        );
        let dci = self.rails[rail].dci.as_ref();
        let local = RdmaEndpoint {
            dc_capable: dci.is_some(),
            ..qp.local_endpoint(None).map_err(|e| rdma_err(server, e))?
        };
        let response = control
            .call(
                Opcode::Connect,
                &[],
                &[&local.encode()],
                None,
                Default::default(),
            )
            .await
            .map_err(|e| e.into_error())?;
        if response.status != Status::Ok {
            let message = String::from_utf8_lossy(&response.payload);
            return Err(rdma_err(
                server,
                format!("Connect refused ({}): {message}", response.status),
            ));
        }
        let peer = RdmaEndpoint::decode(&response.payload).map_err(|e| rdma_err(server, e))?;
        let channel = match (peer.dc_target, dci) {
            (true, Some(pool)) => Channel::Dc {
                peer: pool
                    .add_peer(&peer, self.dc_key)
                    .map_err(|e| rdma_err(server, e))?,
                pool: Arc::clone(pool),
            },
            (true, None) => {
                return Err(rdma_err(
                    server,
                    "the server answered Connect with a DC target, but this rail offered no DC",
                ));
            }
            (false, _) => {
                qp.connect_async(&peer)
                    .await
                    .map_err(|e| rdma_err(server, e))?;
                Channel::Rc(qp)
            }
        };
        tracing::debug!(%server, rail = self.rails[rail].device.name(), transport = channel.transport(), "RDMA session ready");
        let session = Arc::new(Session {
            control,
            channel,
            rail,
            arena: ArenaWindow {
                addr: peer.arena_addr,
                rkey: peer.arena_rkey,
            },
        });
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
