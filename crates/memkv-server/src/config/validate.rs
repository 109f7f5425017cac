//! Turns the raw YAML sections into checked settings. Every error names the key and its line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{ConfigError, ConfigErrorKind};
use super::locate::KeyLines;
use super::raw::{AutoOrNumber, RawConfig, RawRdma};
use super::sections::*;
use memkv_config::{ByteSize, SizeText, parse_size};
use memkv_proto::AuthKey;

/// Smallest and largest block sizes; blocks must also be whole 4 KiB pages.
pub(super) const MIN_BLOCK: ByteSize = ByteSize::kib(4);
const MAX_BLOCK: ByteSize = ByteSize::gib(1);
const MAX_CONNECTIONS_LIMIT: u64 = 1_000_000;
/// More runtime workers than this is a typo, not a machine.
const MAX_THREADS: u64 = 4096;
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

pub(super) struct Checker<'a> {
    pub source_name: &'a str,
    pub lines: &'a KeyLines,
    /// Relative paths in the file are taken relative to this directory.
    pub base_dir: Option<&'a Path>,
}

pub(super) struct Sections {
    pub network: NetworkConfig,
    pub memory: MemoryConfig,
    pub storage: StorageConfig,
    pub rdma: RdmaConfig,
    pub limits: LimitsConfig,
    pub logging: LoggingConfig,
}

type Checked<T> = Result<T, ConfigError>;

impl Checker<'_> {
    pub fn error(
        &self,
        kind: ConfigErrorKind,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            kind,
            source_name: self.source_name.to_owned(),
            line: self.lines.line_of(key),
            key: Some(key.to_owned()),
            message: message.into(),
        }
    }

    pub(super) fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.error(ConfigErrorKind::InvalidValue, key, message)
    }

    pub(super) fn size(
        &self,
        key: &str,
        text: Option<&SizeText>,
        default: ByteSize,
    ) -> Checked<ByteSize> {
        match text {
            None => Ok(default),
            Some(text) => parse_size(&text.0).map_err(|e| self.invalid(key, e.to_string())),
        }
    }

    pub(super) fn block_size(
        &self,
        key: &str,
        text: Option<&SizeText>,
        default: ByteSize,
    ) -> Checked<ByteSize> {
        let size = self.size(key, text, default)?;
        if size < MIN_BLOCK || size > MAX_BLOCK || size.bytes() % MIN_BLOCK.bytes() != 0 {
            return Err(self.invalid(
                key,
                format!(
                    "{size} is not a multiple of {MIN_BLOCK} between {MIN_BLOCK} and {MAX_BLOCK}"
                ),
            ));
        }
        Ok(size)
    }

    pub(super) fn ranged(
        &self,
        key: &str,
        value: Option<u64>,
        default: u64,
        min: u64,
        max: u64,
    ) -> Checked<u64> {
        let value = value.unwrap_or(default);
        if value < min || value > max {
            return Err(self.invalid(key, format!("{value} is out of range {min}..={max}")));
        }
        Ok(value)
    }

    pub(super) fn path(&self, key: &str, text: &str) -> Checked<PathBuf> {
        if text.trim().is_empty() {
            return Err(self.invalid(key, "the path is empty"));
        }
        let path = PathBuf::from(text);
        Ok(match self.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path,
        })
    }

    pub fn sections(&self, raw: RawConfig) -> Checked<Sections> {
        let memory = raw.memory.unwrap_or_default();
        let memory = MemoryConfig {
            block_size: self.block_size(
                "memory.block_size",
                memory.block_size.as_ref(),
                DEFAULT_MEMORY_BLOCK_SIZE,
            )?,
            max_size: self.size(
                "memory.max_size",
                memory.max_size.as_ref(),
                DEFAULT_MEMORY_MAX_SIZE,
            )?,
            prefault: memory.prefault.unwrap_or(true),
        };
        if memory.max_size < memory.block_size {
            return Err(self.invalid(
                "memory.max_size",
                format!(
                    "{} is smaller than memory.block_size ({})",
                    memory.max_size, memory.block_size
                ),
            ));
        }
        let sections = Sections {
            network: self.network(raw.network.unwrap_or_default())?,
            memory,
            storage: self.storage(raw.storage.unwrap_or_default())?,
            rdma: self.rdma(raw.rdma.unwrap_or_default())?,
            limits: self.limits(raw.limits.unwrap_or_default())?,
            logging: LoggingConfig {
                level: self.log_level(raw.logging.unwrap_or_default().level)?,
            },
        };
        self.staging_fits(&sections)?;
        Ok(sections)
    }

    /// A drive-backed server stages each RDMA value whole, in chunks of `memory.block_size`:
    /// the staging must hold the largest value, or such values could never move over RDMA.
    fn staging_fits(&self, s: &Sections) -> Checked<()> {
        if s.storage.mode == StorageMode::Memory || !s.rdma.enabled {
            return Ok(());
        }
        let staging = s.rdma.staging_size;
        let chunk = s.memory.block_size;
        let largest = s.limits.max_value_size.bytes().div_ceil(chunk.bytes()) * chunk.bytes();
        if staging.bytes() < largest {
            return Err(self.invalid(
                "rdma.staging_size",
                format!(
                    "{staging} cannot stage one value of limits.max_value_size ({}) in chunks \
                     of memory.block_size ({chunk}); it needs at least {}",
                    s.limits.max_value_size,
                    ByteSize(largest)
                ),
            ));
        }
        Ok(())
    }

    fn network(&self, raw: super::raw::RawNetwork) -> Checked<NetworkConfig> {
        let address: SocketAddr = match raw.address {
            None => SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            Some(text) => text.trim().parse().map_err(|_| {
                self.invalid(
                    "network.address",
                    format!("{text:?} is not an IP:port address such as 0.0.0.0:9900 or [::]:9900"),
                )
            })?,
        };
        if address.port() == u16::MAX {
            return Err(self.invalid(
                "network.address",
                "port 65535 leaves no port + 1 for the admin API",
            ));
        }
        let auth_key = raw
            .auth_key
            .map(|text| {
                AuthKey::from_hex(&text)
                    .map_err(|e| self.invalid("network.auth_key", e.to_string()))
            })
            .transpose()?;
        let tls = match (raw.tls_cert, raw.tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: self.path("network.tls_cert", &cert)?,
                key: self.path("network.tls_key", &key)?,
            }),
            (Some(_), None) => {
                return Err(self.invalid(
                    "network.tls_cert",
                    "is set but network.tls_key is not; set both or neither",
                ));
            }
            (None, Some(_)) => {
                return Err(self.invalid(
                    "network.tls_key",
                    "is set but network.tls_cert is not; set both or neither",
                ));
            }
        };
        Ok(NetworkConfig {
            address,
            auth_key,
            tls,
            idle_timeout: raw
                .idle_timeout
                .map_or(DEFAULT_IDLE_TIMEOUT, Duration::from_secs),
            shared_memory: raw.shared_memory.unwrap_or(true),
            threads: raw
                .threads
                .map(|n| self.ranged("network.threads", Some(n), n, 1, MAX_THREADS))
                .transpose()?
                .map(|n| n as usize),
            tcp_congestion: raw
                .tcp_congestion
                .map(|name| self.congestion_name(&name))
                .transpose()?,
        })
    }

    /// A congestion-control name as the kernel takes it (`TCP_CA_NAME_MAX`: 15 bytes and a
    /// NUL). Whether this kernel has it is known only when the listener is bound.
    fn congestion_name(&self, name: &str) -> Checked<String> {
        const KEY: &str = "network.tcp_congestion";
        let valid = !name.is_empty()
            && name.len() <= 15
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(self.invalid(
                KEY,
                format!(
                    "`{name}` is not a congestion-control name (1-15 letters, digits, `_` or `-`, \
                     as in /proc/sys/net/ipv4/tcp_available_congestion_control)"
                ),
            ));
        }
        Ok(name.to_owned())
    }

    fn rdma(&self, raw: RawRdma) -> Checked<RdmaConfig> {
        let defaults = RdmaConfig::default();
        let device = raw.device.unwrap_or(defaults.device);
        if device.trim().is_empty() {
            return Err(self.invalid("rdma.device", "the device name is empty"));
        }
        let gid_index = match raw.gid_index {
            None | Some(AutoOrNumber::Auto) => None,
            Some(AutoOrNumber::Number(n)) => {
                Some(self.ranged("rdma.gid_index", Some(n), 0, 0, 255)? as u8)
            }
        };
        let mtu = match raw.mtu {
            None => None,
            Some(mtu) => Some(
                RDMA_MTUS
                    .into_iter()
                    .find(|&m| u64::from(m) == mtu)
                    .ok_or_else(|| {
                        self.invalid(
                            "rdma.mtu",
                            format!("{mtu} is not one of 256, 512, 1024, 2048, 4096"),
                        )
                    })?,
            ),
        };
        let auto_or = |key: &str, value: Option<AutoOrNumber>, max: u64| -> Checked<Option<u8>> {
            match value {
                None | Some(AutoOrNumber::Auto) => Ok(None),
                Some(AutoOrNumber::Number(n)) => {
                    Ok(Some(self.ranged(key, Some(n), 0, 0, max)? as u8))
                }
            }
        };
        // As in the sibling product's runbook, traffic class 0 means "detect".
        let traffic_class =
            auto_or("rdma.traffic_class", raw.traffic_class, 255)?.filter(|tc| *tc != 0);
        let service_level = auto_or("rdma.service_level", raw.service_level, 15)?;
        // Checked like any number, then kept only to warn at start (`RdmaConfig::num_dcis`).
        let num_dcis = match raw.num_dcis {
            None => None,
            Some(n) => Some(self.ranged("rdma.num_dcis", Some(n), 1, 1, 4096)? as u32),
        };
        let staging_size = self.size(
            "rdma.staging_size",
            raw.staging_size.as_ref(),
            defaults.staging_size,
        )?;
        Ok(RdmaConfig {
            staging_size,
            num_dcis,
            enabled: raw.enabled.unwrap_or(defaults.enabled),
            device,
            gid_index,
            traffic_class,
            service_level,
            mtu,
            pkey_index: match raw.pkey_index {
                None => None,
                Some(n) => {
                    Some(self.ranged("rdma.pkey_index", Some(n), 0, 0, u64::from(u16::MAX))? as u16)
                }
            },
        })
    }

    fn limits(&self, raw: super::raw::RawLimits) -> Checked<LimitsConfig> {
        let defaults = LimitsConfig::default();
        let max_value_size = self.size(
            "limits.max_value_size",
            raw.max_value_size.as_ref(),
            defaults.max_value_size,
        )?;
        if max_value_size.bytes() == 0 {
            return Err(self.invalid("limits.max_value_size", "must be at least 1 byte"));
        }
        if max_value_size > MAX_VALUE_SIZE_LIMIT {
            return Err(self.invalid(
                "limits.max_value_size",
                format!(
                    "{max_value_size} exceeds {MAX_VALUE_SIZE_LIMIT}, the largest value a frame \
                     can carry (a frame's payload length is 32 bits)"
                ),
            ));
        }
        let inflight = self.size(
            "limits.per_connection_inflight_bytes",
            raw.per_connection_inflight_bytes.as_ref(),
            defaults.per_connection_inflight_bytes,
        )?;
        if inflight < max_value_size {
            return Err(self.invalid(
                "limits.per_connection_inflight_bytes",
                format!("{inflight} is smaller than limits.max_value_size ({max_value_size}), so the largest value could never be sent"),
            ));
        }
        let max_connections = self.ranged(
            "limits.max_connections",
            raw.max_connections,
            u64::from(defaults.max_connections),
            1,
            MAX_CONNECTIONS_LIMIT,
        )? as u32;
        Ok(LimitsConfig {
            max_value_size,
            max_connections,
            per_connection_inflight_bytes: inflight,
        })
    }

    fn log_level(&self, level: Option<String>) -> Checked<String> {
        let Some(level) = level else {
            return Ok(DEFAULT_LOG_LEVEL.to_owned());
        };
        let valid = !level.trim().is_empty()
            && level.split(',').all(|directive| {
                let level_part = directive.rsplit('=').next().unwrap_or_default().trim();
                LOG_LEVELS
                    .iter()
                    .any(|l| l.eq_ignore_ascii_case(level_part))
            });
        if !valid {
            return Err(self.invalid(
                "logging.level",
                format!("{level:?} is not a level (trace, debug, info, warn, error, off) or comma-separated target=level directives"),
            ));
        }
        Ok(level.trim().to_owned())
    }
}
