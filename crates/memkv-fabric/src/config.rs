//! Fabric knobs as the server and client hand them over, and where each value came from.

use crate::error::FabricError;
use crate::types::Mtu;
use serde::Serialize;

/// Client environment variable naming the P_Key table index.
pub const PKEY_INDEX_ENV: &str = "MEMKV_RDMA_PKEY_INDEX";

/// Per-fabric RDMA settings. `None` means "not configured": memkv detects or defaults the value.
/// The server maps `rdma.*` into this; the client maps `MEMKV_*` / `MEMKV_CONFIG` into it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricConfig {
    /// RoCEv2: the lossless PFC priority. InfiniBand: an SL, mapped to a VL by the SM.
    pub service_level: Option<u8>,
    /// RoCEv2 GRH traffic class (DSCP << 2). Ignored on InfiniBand.
    pub traffic_class: Option<u8>,
    /// RoCEv2 source GID index. Ignored on InfiniBand.
    pub gid_index: Option<u32>,
    pub pkey_index: Option<u16>,
    pub mtu: Option<Mtu>,
}

/// Highest service level the IBTA defines (4 bits).
pub const MAX_SERVICE_LEVEL: u8 = 15;
/// Highest P_Key index accepted from configuration (the 16-bit verbs field).
pub const MAX_PKEY_INDEX: u32 = u16::MAX as u32;

impl FabricConfig {
    /// Checks ranges that do not depend on the port.
    pub fn validate(&self) -> Result<(), FabricError> {
        if let Some(sl) = self.service_level
            && sl > MAX_SERVICE_LEVEL
        {
            return Err(FabricError::InvalidSetting {
                key: "service_level",
                value: sl.to_string(),
                limit: "must be 0..=15",
            });
        }
        Ok(())
    }
}

/// How an operator sets one of the per-node knobs (`traffic_class`, `service_level`,
/// `gid_index`): the server's `rdma.*` key, then the client's key and variable. Fixes name both,
/// since clients start the one-sided transfers and servers answer them, each with its own.
pub fn knob_keys(knob: &str) -> String {
    format!(
        "rdma.{knob} (clients: {knob} in MEMKV_CONFIG or MEMKV_RDMA_{})",
        knob.to_ascii_uppercase()
    )
}

/// Converts a configured byte count into an MTU, naming the accepted values on error.
pub fn parse_mtu(bytes: u32) -> Result<Mtu, FabricError> {
    Mtu::from_bytes(bytes).ok_or(FabricError::InvalidSetting {
        key: "mtu",
        value: bytes.to_string(),
        limit: "must be one of 256, 512, 1024, 2048, 4096",
    })
}

/// Where a resolved value came from, reported by `net show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueSource {
    Config,
    Detected,
    Default,
}

impl std::fmt::Display for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Config => "config",
            Self::Detected => "detected",
            Self::Default => "default",
        })
    }
}

/// Resolves the client's pkey_index: `MEMKV_RDMA_PKEY_INDEX` overrides the `pkey_index` field
/// of the `MEMKV_CONFIG` file, which overrides the default (None, meaning index 0).
/// `env_value` is the raw environment text, if the variable is set.
pub fn resolve_client_pkey_index(
    env_value: Option<&str>,
    config_file_value: Option<u16>,
) -> Result<Option<u16>, FabricError> {
    match env_value {
        Some(text) => {
            let trimmed = text.trim();
            let parsed = trimmed.parse::<u32>().ok().filter(|v| *v <= MAX_PKEY_INDEX);
            match parsed {
                Some(v) => Ok(Some(v as u16)),
                None => Err(FabricError::InvalidSetting {
                    key: PKEY_INDEX_ENV,
                    value: trimmed.chars().take(32).collect(),
                    limit: "must be an integer 0..=65535",
                }),
            }
        }
        None => Ok(config_file_value),
    }
}

/// [`resolve_client_pkey_index`] reading the real process environment.
pub fn client_pkey_index_from_env(
    config_file_value: Option<u16>,
) -> Result<Option<u16>, FabricError> {
    let env = std::env::var(PKEY_INDEX_ENV).ok();
    resolve_client_pkey_index(env.as_deref(), config_file_value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_config_file_which_overrides_default() {
        assert_eq!(resolve_client_pkey_index(Some("2"), Some(1)), Ok(Some(2)));
        assert_eq!(resolve_client_pkey_index(None, Some(1)), Ok(Some(1)));
        assert_eq!(resolve_client_pkey_index(None, None), Ok(None));
        assert_eq!(resolve_client_pkey_index(Some(" 0 "), None), Ok(Some(0)));
    }

    #[test]
    fn bad_env_value_names_the_variable_and_limit() {
        let err = resolve_client_pkey_index(Some("70000"), None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(PKEY_INDEX_ENV) && text.contains("0..=65535"),
            "{text}"
        );
        assert!(resolve_client_pkey_index(Some("one"), None).is_err());
        assert!(resolve_client_pkey_index(Some("-1"), None).is_err());
    }

    #[test]
    fn knob_keys_name_the_server_key_and_the_client_key_and_variable() {
        assert_eq!(
            knob_keys("traffic_class"),
            "rdma.traffic_class (clients: traffic_class in MEMKV_CONFIG or MEMKV_RDMA_TRAFFIC_CLASS)"
        );
    }

    #[test]
    fn service_level_and_mtu_ranges_are_checked() {
        let bad = FabricConfig {
            service_level: Some(16),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("0..=15"));
        assert!(FabricConfig::default().validate().is_ok());
        assert_eq!(parse_mtu(2048), Ok(Mtu::Mtu2048));
        assert!(parse_mtu(9000).unwrap_err().to_string().contains("4096"));
    }
}
