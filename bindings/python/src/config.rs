//! The constructor arguments every class shares, layered over the Rust client's configuration
//! chain: an argument wins over its `MEMKV_*` variable, which wins over `MEMKV_CONFIG`, which
//! wins over the defaults and the local key file.

use memkv_client::ClientConfig;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

use crate::errors::ConfigError;

/// `servers`, `auth_key`, `transport`, `timeout_ms`, `config`, as given.
#[derive(Default)]
pub struct Args {
    servers: Option<String>,
    auth_key: Option<String>,
    transport: Option<String>,
    timeout_ms: Option<String>,
    config: Option<String>,
}

impl Args {
    pub fn from_py(
        servers: Option<&Bound<'_, PyAny>>,
        auth_key: Option<&Bound<'_, PyAny>>,
        transport: Option<String>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        config: Option<std::path::PathBuf>,
    ) -> PyResult<Args> {
        Ok(Args {
            servers: servers.map(server_list).transpose()?,
            auth_key: auth_key.map(key_hex).transpose()?,
            transport,
            timeout_ms: timeout_ms.map(milliseconds).transpose()?,
            config: config.map(|p| p.display().to_string()),
        })
    }

    /// The resolved configuration; errors name the argument when it was one.
    pub fn resolve(&self) -> PyResult<ClientConfig> {
        let given = |name: &str| -> Option<String> {
            match name {
                "MEMKV_SERVERS" => self.servers.clone(),
                "MEMKV_AUTH_KEY" => self.auth_key.clone(),
                "MEMKV_TRANSPORT" => self.transport.clone(),
                "MEMKV_TIMEOUT_MS" => self.timeout_ms.clone(),
                "MEMKV_CONFIG" => self.config.clone(),
                _ => None,
            }
        };
        ClientConfig::from_env_with(&given).map_err(|e| {
            let mut message = e.to_string();
            for (var, arg, set) in [
                ("MEMKV_SERVERS", "servers", self.servers.is_some()),
                ("MEMKV_AUTH_KEY", "auth_key", self.auth_key.is_some()),
                ("MEMKV_TRANSPORT", "transport", self.transport.is_some()),
                ("MEMKV_TIMEOUT_MS", "timeout_ms", self.timeout_ms.is_some()),
            ] {
                if set {
                    message = message.replace(var, &format!("argument {arg}"));
                }
            }
            ConfigError::new_err(message)
        })
    }
}

/// Any int, as text: the configuration chain checks its range, so that -1 or 2**64 get the
/// same `ConfigError` naming the argument and its limit as 0 does.
fn milliseconds(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    // A bool is an int to Python, but `timeout_ms=True` is a mistake, not a 1 ms deadline.
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "timeout_ms: expected an int, got {}",
            obj.get_type().name()?
        )));
    }
    // int() first: an int subclass (an IntEnum) may print as its name.
    Ok(obj
        .py()
        .get_type::<PyInt>()
        .call1((obj,))?
        .str()?
        .to_string())
}

fn server_list(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if obj.is_instance_of::<PyString>() {
        // "host:port,host:port", as MEMKV_SERVERS takes it.
        return obj.extract::<String>();
    }
    let servers: Vec<String> = obj
        .try_iter()?
        .map(|s| s?.extract::<String>())
        .collect::<PyResult<_>>()
        .map_err(|_| PyTypeError::new_err("servers: expected a list of \"host:port\" strings"))?;
    if servers.is_empty() {
        return Err(ConfigError::new_err("servers: the list is empty"));
    }
    if let Some(bad) = servers.iter().find(|s| s.contains(',')) {
        return Err(ConfigError::new_err(format!(
            "servers: {bad:?} holds a comma; give one \"host:port\" per list item"
        )));
    }
    Ok(servers.join(","))
}

fn key_hex(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(raw) = obj.cast::<PyBytes>() {
        let raw = raw.as_bytes();
        if raw.len() != 32 {
            return Err(ConfigError::new_err(format!(
                "auth_key: {} raw bytes given; the key is exactly 32 bytes (or 64 hex digits)",
                raw.len()
            )));
        }
        return Ok(raw.iter().map(|b| format!("{b:02x}")).collect());
    }
    obj.extract::<String>()
        .map_err(|_| PyTypeError::new_err("auth_key: expected 64 hex digits (str) or 32 raw bytes"))
}
