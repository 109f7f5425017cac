//! The validated configuration sections and their defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use memkv_config::ByteSize;
use memkv_proto::AuthKey;

pub const DEFAULT_PORT: u16 = 9900;
pub const DEFAULT_MEMORY_BLOCK_SIZE: ByteSize = ByteSize::mib(2);
/// `memory.max_size` when not set, in a file and in the embedded default alike.
pub const DEFAULT_MEMORY_MAX_SIZE: ByteSize = ByteSize::gib(1);
pub const DEFAULT_STORAGE_BLOCK_SIZE: ByteSize = ByteSize::mib(4);
pub const DEFAULT_RDMA_DEVICE: &str = "mlx5_0";
pub const DEFAULT_RDMA_MTU: u32 = 4096;
/// `rdma.staging_size` when not set: four of the largest values (64 MiB by default), or 64 of
/// the typical 4 MiB KV-cache blocks, in flight over RDMA at once on a drive-backed server.
pub const DEFAULT_RDMA_STAGING_SIZE: ByteSize = ByteSize::mib(256);
pub const RDMA_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
pub const DEFAULT_MAX_VALUE_SIZE: ByteSize = ByteSize::mib(64);
/// Room a frame keeps beside its largest value: a batch answer's count and item header.
pub const FRAME_SLACK_BYTES: u64 = 4096;
/// The largest `limits.max_value_size`: a frame's payload length is 32 bits, and the frame
/// limit is one value plus [`FRAME_SLACK_BYTES`].
pub const MAX_VALUE_SIZE_LIMIT: ByteSize = ByteSize(u32::MAX as u64 - FRAME_SLACK_BYTES);
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
pub const DEFAULT_INFLIGHT_BYTES: ByteSize = ByteSize::mib(256);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_RESERVATION_LEASE: Duration = Duration::from_secs(30);
pub const DEFAULT_PIN_LEASE: Duration = Duration::from_secs(10);
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// PEM certificate chain and private key for the admin HTTPS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Data listener. The admin API listens on the same IP at port + 1 ([`Self::admin_address`]).
    pub address: SocketAddr,
    /// `None`: use the generated key file (see `config::key_file`).
    pub auth_key: Option<AuthKey>,
    pub tls: Option<TlsFiles>,
    /// Connections idle this long are closed; zero disables the timeout.
    pub idle_timeout: Duration,
    /// Memory mode: clients on this host move values through the arena, mapped into their
    /// process (the same-host transport), instead of through the socket.
    pub shared_memory: bool,
    /// memkv extension: threads serving connections (the async runtime's workers); `None`,
    /// one per CPU. Fewer leave cores to an engine on the same host.
    pub threads: Option<usize>,
    /// memkv extension: the TCP congestion control of data connections (`TCP_CONGESTION` on
    /// the listener, which accepted connections inherit); `None`, the host's default, but
    /// loopback connections leave BBR for cubic (`congestion::loopback_off_bbr`).
    pub tcp_congestion: Option<String>,
}

impl NetworkConfig {
    /// Same IP, port + 1. Port 0 (an ephemeral data port, used by tests) gives port 0 too.
    pub fn admin_address(&self) -> SocketAddr {
        let mut admin = self.address;
        admin.set_port(match self.address.port() {
            0 => 0,
            port => port.saturating_add(1),
        });
        admin
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    pub block_size: ByteSize,
    pub max_size: ByteSize,
    /// Populate every arena page at start (in parallel), so first writes do not fault and
    /// zero pages on the data path, and RDMA registration does not fault them one by one.
    pub prefault: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageMode {
    Memory,
    File,
    /// Block devices (or files) through O_DIRECT and io_uring.
    Direct,
}

impl StorageMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::File => "file",
            Self::Direct => "direct",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionPolicy {
    /// Evict least recently used blocks when full.
    Lru,
    /// Refuse writes when full.
    None,
}

/// How file mode reads values back (`storage.file_reads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileReads {
    #[default]
    Mapped,
    Pread,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveConfig {
    pub media: PathBuf,
    /// File mode: the capacity to use. `None`: the existing file's size.
    pub size: Option<ByteSize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    pub mode: StorageMode,
    pub block_size: ByteSize,
    pub drives: Vec<DriveConfig>,
    pub eviction: EvictionPolicy,
    /// memkv extension: file mode reads through a mapping of each drive (`mapped`, fastest) or
    /// with `pread` (`pread`: a disk error is always an error, never SIGBUS).
    pub file_reads: FileReads,
    /// How long an allocated-but-uncommitted block is held for its writer.
    pub reservation_lease: Duration,
    /// How long a looked-up block stays pinned for a one-sided RDMA read.
    pub pin_lease: Duration,
    /// memkv extension: drive-backed modes discard freed extents every second (BLKDISCARD,
    /// or hole punching on drive files).
    pub discard: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// memkv extension: `false` never opens a verbs device (TCP only).
    pub enabled: bool,
    pub device: String,
    /// `None`: chosen automatically (see the fabric runbooks).
    pub gid_index: Option<u8>,
    /// `None` (`auto`, or 0): detected from the port's DCB settings on RoCEv2.
    pub traffic_class: Option<u8>,
    /// `None` (`auto`): detected on RoCEv2 (the PFC priority), 0 on InfiniBand.
    pub service_level: Option<u8>,
    /// `None`: 4096, capped at the port's active MTU. An explicit value above the active MTU
    /// of `device`'s port is an error: the server refuses to start, naming both MTUs and the
    /// port (the InfiniBand runbook; an empty P_Key entry, by contrast, keeps it on TCP).
    pub mtu: Option<u32>,
    /// `None`: index 0, the default partition.
    pub pkey_index: Option<u16>,
    /// memkv extension: drive-backed modes (file, direct) stage RDMA transfers in this much
    /// registered memory, in chunks of `memory.block_size` (docs/ARCHITECTURE.md).
    pub staging_size: ByteSize,
    /// MemKV's server key, accepted so that its configs start: a memkv server opens no DC
    /// initiators (clients start every transfer), so it changes nothing, and start-up warns.
    pub num_dcis: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsConfig {
    pub max_value_size: ByteSize,
    pub max_connections: u32,
    pub per_connection_inflight_bytes: ByteSize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingConfig {
    /// A tracing filter: a level (`info`) or comma-separated `target=level` directives.
    pub level: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            per_connection_inflight_bytes: DEFAULT_INFLIGHT_BYTES,
        }
    }
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            device: DEFAULT_RDMA_DEVICE.to_owned(),
            gid_index: None,
            traffic_class: None,
            service_level: None,
            mtu: None,
            pkey_index: None,
            staging_size: DEFAULT_RDMA_STAGING_SIZE,
            num_dcis: None,
        }
    }
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            level: DEFAULT_LOG_LEVEL.to_owned(),
        }
    }
}
