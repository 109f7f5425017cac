//! State shared by the listener, every connection and the admin API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use memkv_proto::{AuthKey, Limits};
use memkv_store::{DeviceStats, Store, StoreError};

use crate::admin::{
    DeviceStatus, DriveAction, DriveChangeError, DriveChangeReport, HealthInputs, HealthReport,
    MemoryStatus, RdmaStatus, Readiness, StagingStatus, StatusReport, StatusSource, StorageStatus,
    TransportStatus,
};
use crate::clients::ClientRegistry;
use crate::config::{ServerConfig, StorageMode};
use crate::metrics::ConnectionCounters;

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

/// Everything a connection needs.
pub struct Shared {
    /// Its arena registration holds a handle on the store's arena, so drop order is free.
    pub rdma: crate::rdma::RdmaState,
    /// The same-host transport, when the arena is shared with local clients.
    pub local: Option<Arc<crate::local::LocalTransport>>,
    pub config: ServerConfig,
    pub store: Store,
    pub key: AuthKey,
    pub limits: Limits,
    pub started: Instant,
    pub data_address: std::net::SocketAddr,
    phase: AtomicU8,
    pub listener_up: AtomicBool,
    pub connections: Arc<ConnectionCounters>,
    /// Data connections still in their handshake, oldest first.
    pub handshakes: Arc<crate::data::pending::PendingHandshakes>,
    pub clients: Arc<ClientRegistry>,
    /// This run's instance id (see `StatusReport::instance`).
    pub instance: String,
    /// The store's counts already added to their counters (see [`counted_past`]).
    last_evictions: AtomicU64,
    last_checksum_failures: AtomicU64,
}

impl Shared {
    pub fn new(
        config: ServerConfig,
        store: Store,
        key: AuthKey,
        data_address: std::net::SocketAddr,
        rdma: crate::rdma::RdmaState,
        local: Option<Arc<crate::local::LocalTransport>>,
        instance: String,
    ) -> Arc<Shared> {
        let limits = crate::store_config::wire_limits(&config);
        Arc::new(Shared {
            config,
            store,
            key,
            limits,
            started: Instant::now(),
            data_address,
            phase: AtomicU8::new(STARTING),
            listener_up: AtomicBool::new(false),
            connections: Arc::default(),
            handshakes: Arc::default(),
            clients: Arc::default(),
            rdma,
            local,
            instance,
            last_evictions: AtomicU64::new(0),
            last_checksum_failures: AtomicU64::new(0),
        })
    }

    pub fn set_ready(&self) {
        self.phase.store(READY, Ordering::Release);
    }

    pub fn set_draining(&self) {
        self.phase.store(DRAINING, Ordering::Release);
    }

    pub fn auth_failed(&self) {
        self.connections.auth_failed();
    }

    /// Where a drive-backed server stages RDMA values, when RDMA serves.
    pub fn staging(&self) -> Option<&crate::staging::Staging> {
        self.rdma.serving.as_ref().and_then(|s| s.staging.as_ref())
    }

    /// The RDMA device RDMA clients are served over, when RDMA serves.
    pub fn rdma_device(&self) -> Option<&str> {
        self.rdma.serving.as_ref().map(|s| s.device.name())
    }

    /// Moves the store's eviction and checksum-failure counts and its size into the metrics.
    pub fn sync_store_metrics(&self) {
        let stats = self.store.stats();
        crate::metrics::record_capacity(&stats);
        crate::metrics::record_drives(&stats.per_device);
        if let Some(staging) = self.staging() {
            crate::metrics::record_staging(&staging.report());
        }
        let new = counted_past(&self.last_evictions, stats.evictions);
        if new > 0 {
            crate::metrics::record_evictions(new);
        }
        let new = counted_past(&self.last_checksum_failures, stats.checksum_failures);
        if new > 0 {
            crate::metrics::record_checksum_failures(new);
        }
    }
}

impl StatusSource for Shared {
    fn status(&self) -> StatusReport {
        let stats = self.store.stats();
        let arena = self.store.arena();
        let clients = self.clients.snapshot(self.rdma_device());
        let mut connections = self.connections.snapshot();
        for c in &clients {
            *connections
                .by_transport
                .entry(c.transport.clone())
                .or_default() += 1;
        }
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instance: self.instance.clone(),
            uptime_secs: self.started.elapsed().as_secs(),
            address: self.data_address.to_string(),
            memory: MemoryStatus {
                backing: arena
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |a| format!("{:?}", a.backing)),
                arena_bytes: arena.as_ref().map_or(0, |a| a.len as u64),
                block_size: self.config.memory.block_size.0,
            },
            storage: StorageStatus {
                mode: self.config.storage.mode.as_str().to_owned(),
                raw_bytes_total: stats.raw_bytes,
                usable_bytes_total: stats.usable_bytes,
                used_bytes_total: stats.used_bytes,
                free_bytes_total: stats.usable_bytes.saturating_sub(stats.used_bytes),
                value_bytes_total: stats.value_bytes,
                blocks: stats.blocks,
                index_bytes: stats.index_bytes,
                evictions: stats.evictions,
                checksum_failures: stats.checksum_failures,
                devices: stats
                    .per_device
                    .iter()
                    .map(|d| DeviceStatus {
                        media: d.path.display().to_string(),
                        state: drive_state(d).to_owned(),
                        raw_bytes: d.raw,
                        usable_bytes: d.usable,
                        used_bytes: d.used,
                        online: d.online,
                        read_errors: d.read_errors,
                        write_errors: d.write_errors,
                    })
                    .collect(),
            },
            connections,
            transports: TransportStatus {
                tcp: true,
                rdma: self.rdma.active_now(),
                shared_memory: self.local.is_some(),
            },
            rdma: RdmaStatus {
                active: self.rdma.active_now(),
                reason: self.rdma.reason_now(),
                devices: self.rdma.devices_now(),
                staging: self.staging().map(|s| {
                    let r = s.report();
                    let chunk = r.usage.chunk_size as u64;
                    StagingStatus {
                        bytes_total: r.usage.chunks_total as u64 * chunk,
                        chunk_bytes: chunk,
                        bytes_in_use: r.usage.chunks_in_use as u64 * chunk,
                        largest_free_bytes: r.usage.largest_free_run as u64 * chunk,
                        puts_open: r.puts_open as u64,
                        gets_open: r.gets_open as u64,
                        busy_total: r.busy_total,
                    }
                }),
            },
            clients,
        }
    }

    fn health(&self) -> HealthReport {
        let stats = self.store.stats();
        let online = stats.per_device.iter().filter(|d| d.online).count() as u32;
        let offline = stats.per_device.len() as u32 - online;
        HealthReport::assess(HealthInputs {
            data_listener_up: self.listener_up.load(Ordering::Acquire),
            rdma_expected: self.rdma.expected,
            rdma_active: self.rdma.active_now(),
            drives_online: if self.config.storage.mode != StorageMode::Memory {
                online
            } else {
                0
            },
            drives_offline: offline,
        })
    }

    fn sync_metrics(&self) {
        self.sync_store_metrics();
    }

    fn admin_key(&self) -> Option<AuthKey> {
        Some(self.key.clone())
    }

    fn instance(&self) -> Option<String> {
        Some(self.instance.clone())
    }

    fn change_drive(
        &self,
        action: DriveAction,
        media: &str,
    ) -> Result<DriveChangeReport, DriveChangeError> {
        if self.config.storage.mode == StorageMode::Memory {
            return Err(DriveChangeError::Refused(
                "storage.mode memory has no drives".into(),
            ));
        }
        let path = std::path::Path::new(media);
        let changed = match action {
            DriveAction::Remove => self.store.remove_drive(path),
            DriveAction::Add => self.store.add_drive(path),
        }
        .map_err(|e| match e {
            StoreError::UnknownDrive(m) => DriveChangeError::UnknownDrive(m),
            StoreError::Io(e) => DriveChangeError::Io(e.to_string()),
            StoreError::BadRequest(m) => DriveChangeError::Refused(m),
            other => DriveChangeError::Refused(other.to_string()),
        })?;
        self.sync_store_metrics();
        // Found as the store found it: by path (`dir//d1` and `dir/d1/` are `dir/d1`).
        let drive = self
            .status()
            .storage
            .devices
            .into_iter()
            .find(|d| std::path::Path::new(&d.media) == path)
            .unwrap_or_default();
        Ok(DriveChangeReport {
            action: action.as_str().to_owned(),
            changed,
            drive,
        })
    }

    fn readiness(&self) -> Readiness {
        match self.phase.load(Ordering::Acquire) {
            READY => Readiness::Ready,
            DRAINING => Readiness::Draining,
            _ => Readiness::Starting,
        }
    }
}

/// How far the store's cumulative `count` is past the highest count already turned into
/// counter increments (`counted`), which it then becomes. Callers run concurrently, each with
/// its own snapshot of the store: a `swap` would let an older snapshot lower `counted`, and
/// the next caller would count the same events again. The maximum only rises, so each event
/// is counted once whatever order the snapshots arrive in.
fn counted_past(counted: &AtomicU64, count: u64) -> u64 {
    count.saturating_sub(counted.fetch_max(count, Ordering::Relaxed))
}

/// How `/v1/status` names a drive's state.
fn drive_state(d: &DeviceStats) -> &'static str {
    if d.online {
        "online"
    } else if d.removed {
        "removed"
    } else {
        "failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_snapshot_arriving_late_counts_nothing_twice() {
        let counted = AtomicU64::new(0);
        assert_eq!(counted_past(&counted, 10), 10);
        // A caller that read the store before the one above finishes after it.
        assert_eq!(counted_past(&counted, 7), 0);
        assert_eq!(counted_past(&counted, 12), 2);
        assert_eq!(counted.load(Ordering::Relaxed), 12);
    }
}
