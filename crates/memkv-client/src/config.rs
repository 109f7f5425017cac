//! Client configuration: the YAML file named by `MEMKV_CONFIG`, then `MEMKV_*` environment
//! overrides, then defaults (one server at `127.0.0.1:9900`, the local key file, 4 connections
//! per server, a 5 s deadline).

use std::path::{Path, PathBuf};
use std::time::Duration;

use memkv_proto::AuthKey;
use serde::Deserialize;

use crate::{Error, Result};
use memkv_config::key_file;

mod fabric;
pub use fabric::{FABRIC_ENV_VARS, GID_INDEX_ENV, SERVICE_LEVEL_ENV, TRAFFIC_CLASS_ENV};

/// Server used when none is configured.
pub const DEFAULT_SERVER: &str = "127.0.0.1:9900";
/// Connections per server unless configured.
pub const DEFAULT_NUM_CONNECTIONS: usize = 4;
/// Most connections per server accepted from configuration.
pub const MAX_NUM_CONNECTIONS: usize = 1024;
/// Default DC initiators per rail (MemKV documents `rdma.num_dcis`, 16; in memkv only clients
/// initiate, so the setting lives here).
pub const DEFAULT_NUM_DCIS: u32 = 16;
/// Most DC initiators per rail (memkv-rdma's limit).
pub const MAX_NUM_DCIS: u32 = memkv_rdma::dc::MAX_DCIS;
/// Deadline of one operation unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest deadline accepted from configuration (one hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// How bulk bytes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory with servers on this host, RDMA when a rail can be used (DC on mlx5
    /// devices, RC elsewhere), else TCP; the first RDMA failure switches the process to TCP
    /// (logged once at WARN).
    #[default]
    Auto,
    /// TCP only.
    Tcp,
    /// RDMA only: errors reach the caller.
    Rdma,
    /// Servers on this host through their shared arena only (no RDMA, no TCP for values):
    /// errors reach the caller. `auto` uses shared memory wherever a server offers it.
    Shm,
}

impl Transport {
    fn parse(text: &str, origin: &str) -> Result<Transport> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Transport::Auto),
            "tcp" => Ok(Transport::Tcp),
            "rdma" => Ok(Transport::Rdma),
            "shm" => Ok(Transport::Shm),
            other => Err(Error::Config(format!(
                "{origin}: unknown transport {other:?}; expected auto, tcp, rdma or shm"
            ))),
        }
    }
}

/// Everything a [`crate::Client`] needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server addresses exactly as listed; placement hashes these strings.
    pub servers: Vec<String>,
    /// The shared key.
    pub auth_key: AuthKey,
    /// Requested transport.
    pub transport: Transport,
    /// Authenticated connections kept per server.
    pub num_connections: usize,
    /// Default deadline of one operation.
    pub timeout: Duration,
    /// RDMA P_Key table index (used by the RDMA data plane).
    pub pkey_index: Option<u16>,
    /// RDMA devices (rails) to use.
    pub rdma_devices: Vec<String>,
    /// DC initiators per rail on devices that can do DC (mlx5); unused with RC.
    pub num_dcis: u32,
    /// Ask servers to MAC every payload (for untrusted networks).
    pub payload_mac: bool,
    /// Client-side RDMA path MTU cap (`mtu:` in the file); `None`: the port's active MTU.
    pub rdma_mtu: Option<memkv_fabric::types::Mtu>,
    /// RoCE GRH traffic class (DSCP << 2) of this client's queue pairs; `None` (or 0):
    /// detected per port over dcbnl, as the server's `rdma.traffic_class`. Ignored on
    /// InfiniBand.
    pub traffic_class: Option<u8>,
    /// Service level (0..=15): on RoCE the PFC priority, on InfiniBand an SL the SM maps to a
    /// virtual lane; `None`: detected on RoCE, 0 on InfiniBand.
    pub service_level: Option<u8>,
    /// RoCE source GID index; `None`: memkv-fabric's choice (a RoCE v2 GID with an IPv4
    /// address). Ignored on InfiniBand.
    pub gid_index: Option<u8>,
    /// Under `auto`, whether servers on this host are reached through their shared arena
    /// (default `true`). Not a file or environment setting: a tool that tests the fabric
    /// (`memkv net verify`) turns it off so a same-host server's values still cross the NIC.
    /// `shm` always uses shared memory and `tcp` / `rdma` never do, whatever this says.
    pub shared_memory: bool,
}

impl ClientConfig {
    /// A configuration with defaults for everything but the servers and key.
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>, auth_key: AuthKey) -> Self {
        ClientConfig {
            servers: servers.into_iter().map(Into::into).collect(),
            auth_key,
            transport: Transport::Auto,
            num_connections: DEFAULT_NUM_CONNECTIONS,
            timeout: DEFAULT_TIMEOUT,
            pkey_index: None,
            rdma_devices: Vec::new(),
            num_dcis: DEFAULT_NUM_DCIS,
            payload_mac: false,
            rdma_mtu: None,
            traffic_class: None,
            service_level: None,
            gid_index: None,
            shared_memory: true,
        }
    }

    /// Reads `MEMKV_CONFIG` (if set) and the `MEMKV_*` environment of this process.
    pub fn from_env() -> Result<ClientConfig> {
        ConfigSources::load(&|_| None)?.config()
    }

    /// Like [`ClientConfig::from_env`], with `overrides` consulted before the environment
    /// for each variable (a CLI's `--servers` stands in for `MEMKV_SERVERS`, and so on);
    /// errors name the variable.
    pub fn from_env_with(overrides: &dyn Fn(&str) -> Option<String>) -> Result<ClientConfig> {
        ConfigSources::load(&named_after_variables(overrides))?.config()
    }

    /// Builds a configuration from a config file's text, an environment lookup and the key
    /// file to fall back on. Environment values win over the file.
    pub fn resolve(
        file: Option<(&Path, &str)>,
        env: &dyn Fn(&str) -> Option<String>,
        key_file_path: &Path,
    ) -> Result<ClientConfig> {
        let env = named_after_variables(env);
        ConfigSources::new(file, Box::new(move |name| Ok(env(name))))?
            .config_with_key_file(key_file_path)
    }
}

/// A value standing in for a `MEMKV_*` variable, and the name errors give it (`--servers`
/// for a flag: the user may never have set the variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The text, as the variable would hold it.
    pub value: String,
    /// What errors call it: the variable, or the flag or argument given in its place.
    pub origin: String,
}

impl Setting {
    pub fn new(value: impl Into<String>, origin: impl Into<String>) -> Setting {
        Setting {
            value: value.into(),
            origin: origin.into(),
        }
    }
}

fn named_after_variables(
    overrides: &dyn Fn(&str) -> Option<String>,
) -> impl Fn(&str) -> Option<Setting> + '_ {
    move |name| overrides(name).map(|value| Setting::new(value, name))
}

type Lookup<'a> = dyn Fn(&str) -> Result<Option<Setting>> + 'a;

/// The overrides, this process's `MEMKV_*` environment and the `MEMKV_CONFIG` file, read once.
/// Each setting is resolved when asked for, so a command resolves only what it uses (`admin
/// status` and `drive list` need servers and a deadline, never an auth key).
pub struct ConfigSources<'a> {
    env: Box<Lookup<'a>>,
    /// The file's path as errors name it; empty without a file.
    origin: String,
    raw: RawClientConfig,
}

impl<'a> ConfigSources<'a> {
    /// Reads `MEMKV_CONFIG` (an override of it included) once; a `MEMKV_*` variable that is
    /// not UTF-8 is refused by name rather than taken as unset.
    pub fn load(overrides: &'a dyn Fn(&str) -> Option<Setting>) -> Result<ConfigSources<'a>> {
        let env = move |name: &str| match overrides(name) {
            Some(setting) => Ok(Some(setting)),
            None => match std::env::var(name) {
                Ok(value) => Ok(Some(Setting::new(value, name))),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => Err(Error::Config(format!(
                    "{name}: the value is not valid UTF-8"
                ))),
            },
        };
        let file = match env("MEMKV_CONFIG")? {
            Some(setting) if !setting.value.is_empty() => {
                let path = PathBuf::from(setting.value);
                let text = read_config_file(&path)?;
                Some((path, text))
            }
            _ => None,
        };
        let file = file.as_ref().map(|(p, t)| (p.as_path(), t.as_str()));
        ConfigSources::new(file, Box::new(env))
    }

    fn new(file: Option<(&Path, &str)>, env: Box<Lookup<'a>>) -> Result<ConfigSources<'a>> {
        let (origin, raw) = match file {
            Some((path, text)) => (path.display().to_string(), parse_file(path, text)?),
            None => (String::new(), RawClientConfig::default()),
        };
        Ok(ConfigSources { env, origin, raw })
    }

    fn env(&self, name: &str) -> Result<Option<Setting>> {
        (self.env)(name)
    }

    fn key(&self, name: &str) -> String {
        format!("{}: {name}", self.origin)
    }

    /// The server list.
    pub fn servers(&self) -> Result<Vec<String>> {
        match self.env("MEMKV_SERVERS")? {
            Some(list) => parse_server_list(&list.value, &list.origin),
            None => match &self.raw.servers {
                Some(list) => check_servers(list.clone(), &self.key("servers")),
                None => Ok(vec![DEFAULT_SERVER.to_owned()]),
            },
        }
    }

    /// The deadline of one operation, when one is configured.
    pub fn timeout(&self) -> Result<Option<Duration>> {
        let ms = match self.env("MEMKV_TIMEOUT_MS")? {
            Some(n) => Some(parse_int(&n.value, &n.origin, 1, MAX_TIMEOUT_MS)?),
            None => match (self.raw.timeout_ms, &self.raw.deadline) {
                (Some(_), Some(_)) => {
                    return Err(Error::Config(format!(
                        "{}: set timeout_ms or deadline, not both",
                        self.origin
                    )));
                }
                (Some(ms), None) => Some(in_range(ms, &self.key("timeout_ms"), 1, MAX_TIMEOUT_MS)?),
                (None, Some(text)) => Some(parse_duration_ms(text, &self.key("deadline"))?),
                (None, None) => None,
            },
        };
        Ok(ms.map(Duration::from_millis))
    }

    /// The auth key, falling back on the local key file.
    pub fn auth_key(&self) -> Result<AuthKey> {
        self.auth_key_with(&key_file::default_key_file_path())
    }

    fn auth_key_with(&self, key_file_path: &Path) -> Result<AuthKey> {
        match (self.env("MEMKV_AUTH_KEY")?, &self.raw.auth_key) {
            (Some(hex), _) => parse_key(&hex.value, &hex.origin),
            (None, Some(hex)) => parse_key(hex, &self.key("auth_key")),
            (None, None) => key_file::read_key_file(key_file_path).map_err(|e| {
                Error::Config(format!(
                    "no auth key configured (MEMKV_AUTH_KEY, auth_key in MEMKV_CONFIG) and the \
                     local key file is unusable: {e}"
                ))
            }),
        }
    }

    /// The whole configuration, falling back on the local key file.
    pub fn config(&self) -> Result<ClientConfig> {
        self.config_with_key_file(&key_file::default_key_file_path())
    }

    fn config_with_key_file(&self, key_file_path: &Path) -> Result<ClientConfig> {
        let env = |name: &str| self.env(name);
        let raw = &self.raw;
        let origin = &self.origin;
        let key = |name: &str| self.key(name);
        let servers = self.servers()?;
        let auth_key = self.auth_key_with(key_file_path)?;
        let transport = match (env("MEMKV_TRANSPORT")?, &raw.transport) {
            (Some(t), _) => Transport::parse(&t.value, &t.origin)?,
            (None, Some(t)) => Transport::parse(t, &key("transport"))?,
            (None, None) => Transport::Auto,
        };
        let num_connections = match env("MEMKV_NUM_CONNECTIONS")? {
            Some(n) => parse_int(&n.value, &n.origin, 1, MAX_NUM_CONNECTIONS as u64)?,
            None => match raw.num_connections {
                Some(n) => in_range(n, &key("num_connections"), 1, MAX_NUM_CONNECTIONS as u64)?,
                None => DEFAULT_NUM_CONNECTIONS as u64,
            },
        } as usize;
        let timeout = self.timeout()?.unwrap_or(DEFAULT_TIMEOUT);
        let pkey_index = match env("MEMKV_RDMA_PKEY_INDEX")? {
            Some(n) => Some(parse_int(&n.value, &n.origin, 0, u16::MAX.into())? as u16),
            None => raw.pkey_index,
        };
        let rdma_devices = match env("MEMKV_RDMA_DEVICES")? {
            Some(list) => split_list(&list.value),
            None => raw.rdma_devices.clone().unwrap_or_default(),
        };
        let num_dcis = match env("MEMKV_RDMA_NUM_DCIS")? {
            Some(n) => parse_int(&n.value, &n.origin, 1, MAX_NUM_DCIS.into())?,
            None => match raw.num_dcis {
                Some(n) => in_range(n, &key("num_dcis"), 1, MAX_NUM_DCIS.into())?,
                None => DEFAULT_NUM_DCIS.into(),
            },
        } as u32;
        let rdma_mtu = match raw.mtu {
            Some(bytes) => Some(
                memkv_fabric::config::parse_mtu(bytes)
                    .map_err(|e| Error::Config(format!("{origin}: {e}")))?,
            ),
            None => None,
        };
        let knobs = self.fabric_knobs(fabric::RawKnobs {
            traffic_class: raw.traffic_class.as_ref(),
            service_level: raw.service_level.as_ref(),
            gid_index: raw.gid_index.as_ref(),
        })?;
        // MemKV client configs carry a licence; memkv has no licence gate.
        if raw.license.is_some() {
            tracing::debug!(
                "{origin}: license is accepted and not needed: memkv has no licence gate"
            );
        }
        if env("MEMKV_LICENSE")?.is_some() {
            tracing::debug!("MEMKV_LICENSE is accepted and not needed: memkv has no licence gate");
        }
        Ok(ClientConfig {
            servers,
            auth_key,
            transport,
            num_connections,
            timeout,
            pkey_index,
            rdma_devices,
            num_dcis,
            payload_mac: raw.payload_mac.unwrap_or(false),
            rdma_mtu,
            traffic_class: knobs.traffic_class,
            service_level: knobs.service_level,
            gid_index: knobs.gid_index,
            shared_memory: true,
        })
    }
}

/// The `MEMKV_CONFIG` file as written; unknown keys are refused by name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClientConfig {
    servers: Option<Vec<String>>,
    auth_key: Option<String>,
    transport: Option<String>,
    num_connections: Option<u64>,
    timeout_ms: Option<u64>,
    deadline: Option<String>,
    pkey_index: Option<u16>,
    rdma_devices: Option<Vec<String>>,
    num_dcis: Option<u64>,
    payload_mac: Option<bool>,
    /// RDMA path MTU in bytes (256, 512, 1024, 2048 or 4096), as MemKV client configs give it.
    mtu: Option<u32>,
    /// `auto` or 0..=255 (0 is auto), as the server's `rdma.traffic_class`.
    traffic_class: Option<fabric::RawKnob>,
    /// `auto` or 0..=15, as the server's `rdma.service_level`.
    service_level: Option<fabric::RawKnob>,
    /// `auto` or 0..=255, as the server's `rdma.gid_index`.
    gid_index: Option<fabric::RawKnob>,
    /// A MemKV licence (file path or text); accepted so MemKV configs load, never used.
    license: Option<serde_norway::Value>,
}

/// Config files are a few hundred bytes; refuse to read something huge by mistake.
const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

fn read_config_file(path: &Path) -> Result<String> {
    memkv_config::read_to_string_limited(path, MAX_CONFIG_FILE_BYTES).map_err(|source| Error::Io {
        context: format!("MEMKV_CONFIG file {}", path.display()),
        source: std::sync::Arc::new(source),
    })
}

fn parse_file(path: &Path, text: &str) -> Result<RawClientConfig> {
    if text.trim().is_empty() {
        return Ok(RawClientConfig::default());
    }
    serde_norway::from_str(text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

fn parse_key(hex: &str, origin: &str) -> Result<AuthKey> {
    AuthKey::from_hex(hex).map_err(|e| Error::Config(format!("{origin}: {e}")))
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses `host:port,host:port`.
pub fn parse_server_list(text: &str, origin: &str) -> Result<Vec<String>> {
    check_servers(split_list(text), origin)
}

fn check_servers(servers: Vec<String>, origin: &str) -> Result<Vec<String>> {
    if servers.is_empty() {
        return Err(Error::Config(format!("{origin}: the server list is empty")));
    }
    for (i, s) in servers.iter().enumerate() {
        server_address_problem(s).map_or(Ok(()), |why| {
            Err(Error::Config(format!(
                "{origin}: server {} ({s:?}) is not host:port: {why}",
                i + 1
            )))
        })?;
        if servers[..i].contains(s) {
            return Err(Error::Config(format!(
                "{origin}: server {s:?} is listed twice"
            )));
        }
    }
    Ok(servers)
}

/// What is wrong with a server's data address, when it is not `HOST:PORT` (a host name, an
/// IPv4 address or a bracketed IPv6 address; a port from 1 to 65534, since the admin API
/// listens on port + 1). Caught here rather than by a resolver that fails later with a less
/// helpful error (`http://h:9900` would be looked up as the host `http`).
pub fn server_address_problem(server: &str) -> Option<String> {
    if let Some((scheme, _)) = server.split_once("://") {
        return Some(format!("drop the \"{scheme}://\""));
    }
    let Some((host, port)) = server.rsplit_once(':') else {
        return Some("there is no :PORT".into());
    };
    if let Err(why) = check_host(host) {
        return Some(why);
    }
    match port.parse::<u16>() {
        Ok(p) if port.bytes().all(|b| b.is_ascii_digit()) && p > 0 && p < u16::MAX => None,
        _ => Some(format!(
            "port {port:?} is not a number from 1 to 65534 (the admin API uses port + 1)"
        )),
    }
}

/// A host name, an IPv4 address or a bracketed IPv6 address; why not, otherwise.
fn check_host(host: &str) -> std::result::Result<(), String> {
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if let Some(inner) = host.strip_prefix('[') {
        return match inner
            .strip_suffix(']')
            .map(str::parse::<std::net::Ipv6Addr>)
        {
            Some(Ok(_)) => Ok(()),
            _ => Err(format!("{host:?} is not a bracketed IPv6 address")),
        };
    }
    if host.contains(':') {
        return Err("an IPv6 address goes in brackets".into());
    }
    // Host names are letters, digits, '-' and '.' (and '_', which some resolvers allow).
    match host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        Some(c) => Err(format!("the host {host:?} holds {c:?}")),
        None => Ok(()),
    }
}

fn parse_int(text: &str, origin: &str, min: u64, max: u64) -> Result<u64> {
    let n = text.trim().parse::<u64>().map_err(|_| {
        Error::Config(format!(
            "{origin}: {:?} is not an integer in {min}..={max}",
            text.chars().take(32).collect::<String>()
        ))
    })?;
    in_range(n, origin, min, max)
}

fn in_range(n: u64, origin: &str, min: u64, max: u64) -> Result<u64> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(Error::Config(format!(
            "{origin}: {n} is out of range {min}..={max}"
        )))
    }
}

/// `"250ms"`, `"5s"`, `"1m"`, or a bare number of milliseconds.
fn parse_duration_ms(text: &str, origin: &str) -> Result<u64> {
    let duration = memkv_config::parse_duration(text, memkv_config::BareNumber::Milliseconds)
        .map_err(|e| Error::Config(format!("{origin}: {e}")))?;
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    in_range(ms, origin, 1, MAX_TIMEOUT_MS)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fabric_tests;
