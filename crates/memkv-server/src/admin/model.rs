//! JSON bodies of the admin API. Deserialize is derived too, for `memkv admin status`;
//! missing fields default so a CLI can read a newer or older server's reply.

use serde::{Deserialize, Serialize};

/// `GET /v1/health` status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    #[default]
    Healthy,
    /// Serving, but something is off: a drive offline, RDMA expected but inactive.
    Degraded,
    /// Not serving: the data listener is down or every drive is offline. HTTP 503.
    Unhealthy,
}

/// Body of `GET /v1/health`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthReport {
    pub status: HealthStatus,
    pub rdma_active: bool,
    pub drives_online: u32,
    pub drives_offline: u32,
    pub drives_total: u32,
}

/// What the server knows; [`HealthReport::assess`] turns it into a status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthInputs {
    pub data_listener_up: bool,
    /// RDMA should be serving (enabled and a device was found); inactive then degrades.
    pub rdma_expected: bool,
    pub rdma_active: bool,
    pub drives_online: u32,
    pub drives_offline: u32,
}

impl HealthReport {
    pub fn assess(inputs: HealthInputs) -> Self {
        let drives_total = inputs.drives_online + inputs.drives_offline;
        let status = if !inputs.data_listener_up || (drives_total > 0 && inputs.drives_online == 0)
        {
            HealthStatus::Unhealthy
        } else if inputs.drives_offline > 0 || (inputs.rdma_expected && !inputs.rdma_active) {
            HealthStatus::Degraded
        } else {
            HealthStatus::Healthy
        };
        Self {
            status,
            rdma_active: inputs.rdma_active,
            drives_online: inputs.drives_online,
            drives_offline: inputs.drives_offline,
            drives_total,
        }
    }
}

/// `GET /v1/ready`: 200 `ok` when ready, else 503 with `starting` or `draining`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Starting,
    Ready,
    Draining,
}

impl Readiness {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ok",
            Self::Draining => "draining",
        }
    }
}

/// Body of `GET /v1/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusReport {
    pub version: String,
    /// This run of the server: 32 hex digits drawn at start. Signed admin requests name it
    /// (`memkv_proto::admin_auth`), so a signature is good on this server, until it restarts.
    pub instance: String,
    pub uptime_secs: u64,
    /// The data listener, e.g. `0.0.0.0:9900`.
    pub address: String,
    pub memory: MemoryStatus,
    pub storage: StorageStatus,
    pub connections: ConnectionStatus,
    pub transports: TransportStatus,
    pub rdma: RdmaStatus,
    /// The authenticated client connections open now, oldest first.
    pub clients: Vec<ClientStatus>,
}

/// One client connection in `GET /v1/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientStatus {
    /// Numbered from 1 in connection order; unique while the server runs.
    pub id: u64,
    /// The client's address and port, e.g. `10.0.0.7:41234`.
    pub peer: String,
    /// How its values move: `tcp`, `rdma-rc` or `rdma-dc`.
    pub transport: String,
    /// The server's RDMA device it is served over; `None` for `tcp`.
    pub device: Option<String>,
    /// When it connected, seconds since the Unix epoch.
    pub connected_at_unix: u64,
    pub connected_secs: u64,
    /// Operations served so far.
    pub ops: u64,
    /// Value bytes it stored (TCP payloads, or values committed after an RDMA WRITE).
    pub bytes_in: u64,
    /// Value bytes it fetched (TCP payloads, or values looked up for an RDMA READ).
    pub bytes_out: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryStatus {
    /// How the arena is backed, e.g. `hugepages-2MiB`, `hugepages-1GiB`, `anonymous`.
    pub backing: String,
    pub arena_bytes: u64,
    pub block_size: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageStatus {
    /// `memory`, `file` or `direct`.
    pub mode: String,
    pub raw_bytes_total: u64,
    pub usable_bytes_total: u64,
    pub used_bytes_total: u64,
    /// `usable_bytes_total - used_bytes_total`.
    pub free_bytes_total: u64,
    /// Sum of the stored values' lengths.
    pub value_bytes_total: u64,
    /// Blocks stored now.
    pub blocks: u64,
    /// Memory the index takes: an entry per block (its record, count and key) and the hash
    /// tables.
    pub index_bytes: u64,
    pub evictions: u64,
    pub checksum_failures: u64,
    pub devices: Vec<DeviceStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceStatus {
    pub media: String,
    /// `online`, `failed` (an I/O error took it out of service) or `removed` (by the
    /// operator, `memkv drive remove`).
    pub state: String,
    pub raw_bytes: u64,
    pub usable_bytes: u64,
    pub used_bytes: u64,
    pub online: bool,
    /// Reads of values on this drive that failed with an I/O error (each answered as a miss).
    pub read_errors: u64,
    /// Writes of values to this drive that failed with an I/O error (each failed its put).
    pub write_errors: u64,
}

/// Body of `POST /v1/drives/remove` and `/v1/drives/add`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveChangeRequest {
    /// The drive as the server's configuration names it (`storage.drives[].media`).
    pub media: String,
}

/// Answer of a drive change: whether anything changed, and the drive now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriveChangeReport {
    /// `remove` or `add`.
    pub action: String,
    /// `false`: the drive was already removed (or in service).
    pub changed: bool,
    pub drive: DeviceStatus,
}

/// Which drive change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveAction {
    Remove,
    Add,
}

impl DriveAction {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Remove => "remove",
            Self::Add => "add",
        }
    }
}

/// Why a drive change was refused; each maps onto an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriveChangeError {
    /// No such drive in this server's store (404).
    #[error("{0}")]
    UnknownDrive(String),
    /// Not possible now or for this drive (409): memory mode, the journal's drive, the last
    /// drive in service, a drive that is not this store's.
    #[error("{0}")]
    Refused(String),
    /// The drive could not be read (500).
    #[error("{0}")]
    Io(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectionStatus {
    pub current: u64,
    pub total: u64,
    pub auth_failures: u64,
    /// Authenticated clients by transport (`tcp`, `rdma-rc`, `rdma-dc`, `shm`), from `clients`.
    pub by_transport: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TransportStatus {
    pub tcp: bool,
    pub rdma: bool,
    /// Clients on this host may map the arena (`network.shared_memory`, memory mode).
    pub shared_memory: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaStatus {
    pub active: bool,
    /// Why RDMA is inactive (disabled in config, no device, port down, ...); `None` if active.
    pub reason: Option<String>,
    pub devices: Vec<RdmaDeviceStatus>,
    /// Drive-backed modes with RDMA active: the staging RDMA values pass through.
    pub staging: Option<StagingStatus>,
}

/// `rdma.staging` in `GET /v1/status` (file and direct mode, RDMA active).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StagingStatus {
    /// `rdma.staging_size`, as registered.
    pub bytes_total: u64,
    /// The chunk (`memory.block_size`); each staged value takes a contiguous run of them.
    pub chunk_bytes: u64,
    /// Bytes of chunks held by staged puts and gets.
    pub bytes_in_use: u64,
    /// The largest value that can be staged now.
    pub largest_free_bytes: u64,
    /// Puts between Allocate and Commit, gets between Lookup and Release.
    pub puts_open: u64,
    pub gets_open: u64,
    /// Allocates and Lookups answered Busy since start because staging was full.
    pub busy_total: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaDeviceStatus {
    /// Verbs device, e.g. `mlx5_0`.
    pub name: String,
    pub port: u8,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// Port state as sysfs shows it, e.g. `ACTIVE`.
    pub state: String,
    /// Queue-pair transport in use: `dc` or `rc`.
    pub qp_transport: String,
    /// RoCE: the netdev carrying this port's traffic (its rail); `None` on InfiniBand.
    pub netdev: Option<String>,
    /// RoCE: the rail's MAC, `aa:bb:cc:dd:ee:ff`. With `ipv4`, what `memkv net doctor
    /// --server` compares with a client's neighbour cache (ARP flux between rails).
    pub mac: Option<String>,
    /// RoCE: the rail's IPv4 addresses.
    pub ipv4: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(
        listener: bool,
        online: u32,
        offline: u32,
        expected: bool,
        active: bool,
    ) -> HealthInputs {
        HealthInputs {
            data_listener_up: listener,
            rdma_expected: expected,
            rdma_active: active,
            drives_online: online,
            drives_offline: offline,
        }
    }

    #[test]
    fn assess_covers_each_status() {
        use HealthStatus::*;
        let cases = [
            (inputs(true, 0, 0, false, false), Healthy),
            (inputs(true, 2, 0, true, true), Healthy),
            (inputs(true, 2, 1, false, false), Degraded),
            (inputs(true, 2, 0, true, false), Degraded),
            (inputs(true, 0, 3, false, false), Unhealthy),
            (inputs(false, 2, 0, false, false), Unhealthy),
        ];
        for (input, expected) in cases {
            let report = HealthReport::assess(input);
            assert_eq!(report.status, expected, "{input:?}");
            assert_eq!(
                report.drives_total,
                input.drives_online + input.drives_offline
            );
        }
    }

    #[test]
    fn health_json_uses_lowercase_status() {
        let report = HealthReport::assess(inputs(true, 1, 1, false, false));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["status"], "degraded");
        assert_eq!(json["drives_total"], 2);
        let back: HealthReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, report);
        let partial: StatusReport = serde_json::from_str(r#"{"version":"9","extra":1}"#).unwrap();
        assert_eq!(partial.version, "9");
    }
}
