//! The RDMA transport: control (Connect, Allocate, Commit, Lookup, Release) stays on the
//! authenticated TCP connections; value bytes move one-sided with memkv-rdma. Each server gets
//! one RC queue pair, bound to the TCP connection that sent Connect (the server drops its end
//! when that connection closes). Rails (`MEMKV_RDMA_DEVICES`) take servers in turn.
//!
//! `transport: auto` falls back to TCP for the rest of the process on the first RDMA failure,
//! logged once at WARN with the reason; `transport: rdma` hands every failure to the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memkv_fabric::{Fabric, FabricConfig};
use memkv_proto::connect::RdmaEndpoint;
use memkv_proto::{Opcode, Status};
use memkv_rdma::{RcQueuePair, RdmaDevice, StagingPool};
use tokio::sync::Mutex;

use crate::config::{ClientConfig, Transport};
use crate::conn::Connection;
use crate::pool::ServerPool;
use crate::{Error, Result};

/// Staging buffers per rail and their size: unregistered values pass through these.
const STAGING_BUFFERS: usize = 16;
const STAGING_SIZE: usize = 4 << 20;

struct Rail {
    device: Arc<RdmaDevice>,
    staging: Arc<StagingPool>,
}

/// One server's queue pair and the control connection that keeps the server's end alive.
pub(crate) struct Session {
    control: Arc<Connection>,
    pub qp: Arc<RcQueuePair>,
    rail: usize,
}

impl Session {
    fn usable(&self) -> bool {
        self.control.is_open() && !self.qp.is_broken()
    }
}

/// The process's RDMA rails and per-server sessions.
pub(crate) struct RdmaPath {
    strict: bool,
    rails: Vec<Rail>,
    sessions: Vec<Mutex<Option<Arc<Session>>>>,
    next_rail: AtomicUsize,
    fell_back: AtomicBool,
    fallback_reason: std::sync::Mutex<Option<String>>,
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
        let strict = match config.transport {
            Transport::Tcp => return Ok(Err("transport tcp".into())),
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
        let cfg = FabricConfig {
            pkey_index: config.pkey_index,
            ..FabricConfig::default()
        };
        let fabric = match Fabric::start(&cfg, &config.rdma_devices) {
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
        let mut rails = Vec::new();
        let mut dropped = Vec::new();
        for name in &names {
            let opened = RdmaDevice::open(&fabric, Some(name), None).and_then(|device| {
                let staging = StagingPool::new(&device, STAGING_SIZE, STAGING_BUFFERS)?;
                Ok(Rail { device, staging })
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
        Ok(Ok(RdmaPath {
            strict,
            fallback_reason: std::sync::Mutex::new(None),
            rails,
            sessions: config.servers.iter().map(|_| Mutex::new(None)).collect(),
            next_rail: AtomicUsize::new(0),
            fell_back: AtomicBool::new(false),
            _fabric: fabric,
        }))
    }

    /// Whether operations should try RDMA now.
    pub fn active(&self) -> bool {
        !self.fell_back.load(Ordering::Relaxed)
    }

    /// Records an RDMA failure. `true`: the caller retries over TCP (`auto`, which from now on
    /// uses TCP for the rest of the process); `false`: the caller returns the error.
    pub fn failed(&self, err: &Error) -> bool {
        if self.strict {
            return false;
        }
        if !self.fell_back.swap(true, Ordering::Relaxed) {
            tracing::warn!("RDMA failed ({err}); switching to TCP for the rest of the process");
            *self
                .fallback_reason
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(err.to_string());
        }
        true
    }

    /// Why an `auto` client switched to TCP in flight, if it did.
    pub fn fallback_reason(&self) -> Option<String> {
        self.fallback_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The staging buffers of `session`'s rail.
    pub fn staging(&self, session: &Session) -> &Arc<StagingPool> {
        &self.rails[session.rail].staging
    }

    /// A buffer registered on the first rail, for zero-copy puts and gets.
    pub fn register(
        &self,
        len: usize,
    ) -> std::result::Result<(usize, memkv_rdma::RegisteredBuffer), memkv_rdma::RdmaError> {
        Ok((
            0,
            memkv_rdma::RegisteredBuffer::new(&self.rails[0].device, len)?,
        ))
    }

    /// The rail `session` uses.
    pub fn rail_of(&self, session: &Session) -> usize {
        session.rail
    }

    /// The devices in use, for reports.
    pub fn rail_names(&self) -> Vec<String> {
        self.rails
            .iter()
            .map(|r| r.device.name().to_owned())
            .collect()
    }

    /// The session with server `index`, connecting (or reconnecting) its queue pair.
    pub async fn session(&self, index: usize, pool: &ServerPool) -> Result<Arc<Session>> {
        let mut slot = self.sessions[index].lock().await;
        if let Some(s) = slot.as_ref().filter(|s| s.usable()) {
            return Ok(Arc::clone(s));
        }
        *slot = None;
        let server = pool.server();
        let control = pool.connection().await?;
        let rail = self.next_rail.fetch_add(1, Ordering::Relaxed) % self.rails.len();
        let qp = Arc::new(
            self.rails[rail]
                .device
                .create_rc()
                .map_err(|e| rdma_err(server, e))?,
        );
        let local = qp.local_endpoint(None).map_err(|e| rdma_err(server, e))?;
        let response = control
            .call(Opcode::Connect, &[], &[&local.encode()], None, Vec::new())
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
        qp.connect_async(&peer)
            .await
            .map_err(|e| rdma_err(server, e))?;
        let session = Arc::new(Session { control, qp, rail });
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }
}
