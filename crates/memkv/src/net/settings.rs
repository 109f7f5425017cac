//! The fabric settings `net show` and `net doctor` check, the server's and the client's kept
//! apart: the server's `rdma.*` from its configuration file (`--config PATH`, else
//! `/etc/memkv/config.yaml` when it exists, as `memkv start` reads it), and the client's
//! `pkey_index`, `mtu`, `traffic_class`, `service_level` and `gid_index` read as the client
//! reads them (`MEMKV_RDMA_PKEY_INDEX`, `MEMKV_RDMA_TRAFFIC_CLASS`, `MEMKV_RDMA_SERVICE_LEVEL`
//! and `MEMKV_RDMA_GID_INDEX` over the same keys of `MEMKV_CONFIG`; `mtu` from `MEMKV_CONFIG`).

use std::path::{Path, PathBuf};

use memkv_client::config::FABRIC_ENV_VARS;
use memkv_client::{ConfigSources, Setting};
use memkv_fabric::FabricConfig;
use memkv_fabric::config::parse_mtu;
use memkv_server::config::{DEFAULT_CONFIG_PATH, RdmaConfig, ServerConfig};

use crate::exit::{self, Exit};

/// The server's settings, from one configuration file.
pub struct ServerSettings {
    pub path: PathBuf,
    pub fabric: FabricConfig,
    /// `rdma.enabled: false`: the server never opens a verbs device.
    pub rdma_disabled: bool,
}

/// The client's settings and where they came from.
pub struct ClientSettings {
    /// e.g. `MEMKV_CONFIG /etc/memkv/client.yaml`, `MEMKV_RDMA_TRAFFIC_CLASS`.
    pub sources: Vec<String>,
    pub fabric: FabricConfig,
}

pub struct FabricSettings {
    pub server: Option<ServerSettings>,
    /// `None` when neither `MEMKV_CONFIG` nor any of [`FABRIC_ENV_VARS`] is set.
    pub client: Option<ClientSettings>,
}

impl FabricSettings {
    /// Reads both. `root` prefixes the default server path (a TEST DOUBLE fixture tree; `/`
    /// on a host). A configuration that cannot be read is an error naming it, as the server
    /// or client would refuse it.
    pub fn load(explicit_server: Option<&Path>, root: Option<&Path>) -> Result<Self, Exit> {
        let default = match root {
            Some(root) => root.join(DEFAULT_CONFIG_PATH.trim_start_matches('/')),
            None => PathBuf::from(DEFAULT_CONFIG_PATH),
        };
        let server_path = match explicit_server {
            Some(path) => Some(path.to_owned()),
            None => default.exists().then_some(default),
        };
        let server = server_path.map(|path| server_settings(&path)).transpose()?;
        Ok(FabricSettings {
            server,
            client: client_settings()?,
        })
    }

    /// What the checks run with: the server's settings on a server node, else the client's.
    pub fn primary(&self) -> FabricConfig {
        match (&self.server, &self.client) {
            (Some(s), _) => s.fabric,
            (None, Some(c)) => c.fabric,
            (None, None) => FabricConfig::default(),
        }
    }

    /// The client's settings when a server's are primary (checked beside them).
    pub fn secondary_client(&self) -> Option<FabricConfig> {
        match (&self.server, &self.client) {
            (Some(_), Some(c)) => Some(c.fabric),
            _ => None,
        }
    }

    /// One line per source: which file or variables each set of values came from.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        match &self.server {
            Some(s) => {
                out.push_str(&format!(
                    "server settings   : {} ({})",
                    s.path.display(),
                    describe_fabric(&s.fabric, "rdma.")
                ));
                if s.rdma_disabled {
                    out.push_str("; rdma.enabled: false, the server serves TCP only");
                }
                out.push('\n');
            }
            None => out.push_str(&format!(
                "server settings   : none ({DEFAULT_CONFIG_PATH} absent, no --config)\n"
            )),
        }
        match &self.client {
            Some(c) => {
                out.push_str(&format!(
                    "client settings   : {} ({})",
                    c.sources.join(", "),
                    describe_fabric(&c.fabric, "")
                ));
                if self.server.is_some() {
                    out.push_str("; net show plans ports with the server's, doctor checks both");
                }
                out.push('\n');
            }
            None => out.push_str(&format!(
                "client settings   : none (MEMKV_CONFIG, {} unset)\n",
                FABRIC_ENV_VARS.join(", ")
            )),
        }
        out
    }
}

fn describe_fabric(c: &FabricConfig, prefix: &str) -> String {
    let mut parts = vec![
        format!(
            "{prefix}pkey_index {}",
            c.pkey_index.map_or("default 0".into(), |i| i.to_string())
        ),
        format!(
            "{prefix}mtu {}",
            c.mtu
                .map_or("default 4096, capped".into(), |m| m.bytes().to_string())
        ),
    ];
    if let Some(sl) = c.service_level {
        parts.push(format!("{prefix}service_level {sl}"));
    }
    if let Some(tc) = c.traffic_class {
        parts.push(format!("{prefix}traffic_class {tc}"));
    }
    if let Some(g) = c.gid_index {
        parts.push(format!("{prefix}gid_index {g}"));
    }
    parts.join(", ")
}

fn server_settings(path: &Path) -> Result<ServerSettings, Exit> {
    let config = ServerConfig::load(path).map_err(|e| Exit::with(exit::FAILURE, e.to_string()))?;
    let fabric = server_fabric(&config.rdma)
        .map_err(|e| Exit::with(exit::FAILURE, format!("{}: {e}", path.display())))?;
    Ok(ServerSettings {
        path: path.to_owned(),
        fabric,
        rdma_disabled: !config.rdma.enabled,
    })
}

/// The server's `rdma.*` as the server maps them (memkv-server's `rdma::fabric_config`).
fn server_fabric(rdma: &RdmaConfig) -> Result<FabricConfig, String> {
    Ok(FabricConfig {
        service_level: rdma.service_level,
        traffic_class: rdma.traffic_class,
        gid_index: rdma.gid_index.map(u32::from),
        pkey_index: rdma.pkey_index,
        mtu: rdma
            .mtu
            .map(parse_mtu)
            .transpose()
            .map_err(|e| format!("rdma.mtu: {e}"))?,
    })
}

fn set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The client's fabric knobs, resolved and mapped by the client's own code (the
/// `FabricConfig` its rails are planned with). The servers and auth key are not needed here:
/// stand-ins keep their absence from failing.
fn client_settings() -> Result<Option<ClientSettings>, Exit> {
    let mut sources = Vec::new();
    if let Some(path) = std::env::var_os("MEMKV_CONFIG").filter(|v| !v.is_empty()) {
        sources.push(format!("MEMKV_CONFIG {}", Path::new(&path).display()));
    }
    sources.extend(
        FABRIC_ENV_VARS
            .iter()
            .filter(|name| set(name))
            .map(|name| (*name).to_owned()),
    );
    if sources.is_empty() {
        return Ok(None);
    }
    let stand_in_key = "0".repeat(memkv_server::config::AUTH_KEY_HEX_LEN);
    let overrides = |name: &str| match name {
        "MEMKV_AUTH_KEY" => Some(Setting::new(stand_in_key.clone(), "net")),
        "MEMKV_SERVERS" => Some(Setting::new("127.0.0.1:9900".to_owned(), "net")),
        _ => None,
    };
    let config = ConfigSources::load(&overrides)
        .and_then(|sources| sources.config())
        .map_err(|e| Exit::with(exit::FAILURE, e.to_string()))?;
    Ok(Some(ClientSettings {
        sources,
        fabric: config.fabric_config(),
    }))
}
