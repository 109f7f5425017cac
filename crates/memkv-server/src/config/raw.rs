//! The YAML file as written: every key optional, unknown keys refused, values kept close to
//! their text so `validate` can report problems with the key and line.

use serde::Deserialize;

use memkv_config::SizeText;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub network: Option<RawNetwork>,
    pub memory: Option<RawMemory>,
    pub storage: Option<RawStorage>,
    pub rdma: Option<RawRdma>,
    pub limits: Option<RawLimits>,
    pub logging: Option<RawLogging>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    pub address: Option<String>,
    pub auth_key: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub idle_timeout: Option<u64>,
    pub shared_memory: Option<bool>,
    pub threads: Option<u64>,
    pub tcp_congestion: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemory {
    pub block_size: Option<SizeText>,
    pub max_size: Option<SizeText>,
    pub prefault: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    pub mode: Option<String>,
    pub block_size: Option<SizeText>,
    pub drives: Option<Vec<RawDrive>>,
    pub eviction: Option<String>,
    pub file_reads: Option<String>,
    pub reservation_lease_secs: Option<u64>,
    pub pin_lease_secs: Option<u64>,
    pub discard: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDrive {
    pub media: String,
    pub size: Option<SizeText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRdma {
    pub enabled: Option<bool>,
    pub device: Option<String>,
    pub gid_index: Option<AutoOrNumber>,
    pub traffic_class: Option<AutoOrNumber>,
    pub service_level: Option<AutoOrNumber>,
    pub mtu: Option<u64>,
    pub pkey_index: Option<u64>,
    pub num_dcis: Option<u64>,
    pub staging_size: Option<SizeText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_value_size: Option<SizeText>,
    pub max_connections: Option<u64>,
    pub per_connection_inflight_bytes: Option<SizeText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLogging {
    pub level: Option<String>,
}

/// `auto` or a non-negative integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOrNumber {
    Auto,
    Number(u64),
}

impl<'de> Deserialize<'de> for AutoOrNumber {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = AutoOrNumber;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`auto` or a non-negative integer")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<AutoOrNumber, E> {
                Ok(AutoOrNumber::Number(v))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AutoOrNumber, E> {
                if v == "auto" {
                    Ok(AutoOrNumber::Auto)
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}
