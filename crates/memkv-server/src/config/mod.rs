//! Server configuration: YAML file (`/etc/memkv/config.yaml` or `memkv start --config PATH`)
//! or the embedded zero-config default. See `config.example.yaml` in this crate for every key,
//! its default and the accepted forms. The server does not read `MEMKV_CONFIG` (that
//! variable is the client's).
//!
//! Sizes and the key file are `memkv-config`'s, shared with the client and the CLI.

mod error;
mod locate;
mod raw;
mod sections;
mod validate;
mod validate_storage;

use std::path::{Path, PathBuf};

pub use error::{ConfigError, ConfigErrorKind};
pub use memkv_config::{ACCEPTED_SIZE_FORMS, ByteSize, SizeError, parse_size};
pub use memkv_config::{
    KeyFileError, default_key_file_path, load_or_create_key_file, read_key_file,
};
pub use memkv_proto::{AUTH_KEY_HEX_LEN, AuthKey, KeyParseError as AuthKeyError};
pub use sections::*;

use locate::KeyLines;
use raw::RawConfig;
use validate::Checker;

/// Used by `memkv start` when `--config` is not given and this file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/memkv/config.yaml";
/// `source_name` of the embedded default.
pub const EMBEDDED_SOURCE: &str = "<embedded default>";

/// Upper bound on a config file; anything larger is a mistake (a device path, a log file).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A checked server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where it came from: the file path, a caller-chosen name, or [`EMBEDDED_SOURCE`].
    pub source_name: String,
    pub network: NetworkConfig,
    pub memory: MemoryConfig,
    pub storage: StorageConfig,
    pub rdma: RdmaConfig,
    pub limits: LimitsConfig,
    pub logging: LoggingConfig,
    key_lines: KeyLines,
}

/// The environment variable a server takes its auth key from when `network.auth_key` is not
/// set (the clients' variable: one exported key serves both).
pub const AUTH_KEY_ENV: &str = "MEMKV_AUTH_KEY";

/// Where the server's auth key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthKeySource {
    /// `network.auth_key` in the configuration.
    Config,
    /// The `MEMKV_AUTH_KEY` environment variable.
    Env,
    KeyFile {
        path: PathBuf,
        created: bool,
    },
}

/// Why no auth key could be had.
#[derive(Debug, thiserror::Error)]
pub enum ResolveKeyError {
    #[error("{AUTH_KEY_ENV}: {0}")]
    Env(AuthKeyError),
    #[error(transparent)]
    KeyFile(#[from] KeyFileError),
}

impl ServerConfig {
    /// Reads and checks a YAML file. Relative paths inside it (TLS files, file-mode drives)
    /// are taken relative to the file's directory.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let source_name = path.display().to_string();
        let io_error = |message: String| ConfigError {
            kind: ConfigErrorKind::Io,
            source_name: source_name.clone(),
            line: None,
            key: None,
            message,
        };
        let metadata =
            std::fs::metadata(path).map_err(|e| io_error(format!("cannot read: {e}")))?;
        if metadata.len() > MAX_CONFIG_BYTES {
            return Err(io_error(format!(
                "file is {} bytes; a config file is at most {MAX_CONFIG_BYTES}",
                metadata.len()
            )));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| io_error(format!("cannot read: {e}")))?;
        Self::parse(&text, &source_name, path.parent())
    }

    /// Checks YAML text. `source_name` only labels errors; relative paths stay relative.
    pub fn from_yaml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        Self::parse(text, source_name, None)
    }

    /// The zero-config default: loopback 127.0.0.1:9900, memory mode with a 1 GiB pool, every
    /// other key at its documented default.
    pub fn embedded_default() -> Self {
        let mut config =
            Self::from_yaml_str("", EMBEDDED_SOURCE).expect("embedded default is valid");
        config.network.address.set_ip([127, 0, 0, 1].into());
        config
    }

    /// What `memkv start` uses: `explicit` if given, else [`DEFAULT_CONFIG_PATH`] if it
    /// exists, else the embedded default. Logs which one at INFO.
    pub fn load_for_start(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_or_fallback(explicit, Path::new(DEFAULT_CONFIG_PATH))
    }

    fn load_or_fallback(explicit: Option<&Path>, default_path: &Path) -> Result<Self, ConfigError> {
        let config = match explicit {
            Some(path) => Self::load(path)?,
            None if default_path.exists() => Self::load(default_path)?,
            None => Self::embedded_default(),
        };
        tracing::info!(source = %config.source_name, "server configuration loaded");
        Ok(config)
    }

    /// The server's auth key, first of: `network.auth_key`; `MEMKV_AUTH_KEY`; the key in
    /// [`default_key_file_path`] (created on first use).
    pub fn resolve_auth_key(&self) -> Result<(AuthKey, AuthKeySource), ResolveKeyError> {
        self.resolve_auth_key_at(&default_key_file_path())
    }

    /// As [`Self::resolve_auth_key`] with an explicit key file (tests, embedding programs).
    pub fn resolve_auth_key_at(
        &self,
        key_file: &Path,
    ) -> Result<(AuthKey, AuthKeySource), ResolveKeyError> {
        let env = std::env::var(AUTH_KEY_ENV).ok();
        self.resolve_auth_key_with(env.as_deref(), key_file)
    }

    /// As [`Self::resolve_auth_key_at`] with `env_key` standing for `MEMKV_AUTH_KEY`'s value.
    /// An explicit `network.auth_key` wins over the variable (a warning says so when they
    /// differ); the variable wins over the key file, which is then not read or created.
    pub fn resolve_auth_key_with(
        &self,
        env_key: Option<&str>,
        key_file: &Path,
    ) -> Result<(AuthKey, AuthKeySource), ResolveKeyError> {
        let env_key = env_key.map(str::trim).filter(|k| !k.is_empty());
        if let Some(key) = &self.network.auth_key {
            if env_key.is_some_and(|k| !k.eq_ignore_ascii_case(&key.to_hex())) {
                tracing::warn!(
                    "{AUTH_KEY_ENV} is set but differs from network.auth_key in {}; using network.auth_key",
                    self.source_name
                );
            }
            return Ok((key.clone(), AuthKeySource::Config));
        }
        if let Some(hex) = env_key {
            let key = AuthKey::from_hex(hex).map_err(ResolveKeyError::Env)?;
            return Ok((key, AuthKeySource::Env));
        }
        let (key, created) = load_or_create_key_file(key_file)?;
        Ok((
            key,
            AuthKeySource::KeyFile {
                path: key_file.to_owned(),
                created,
            },
        ))
    }

    /// An error about `key` of this config, located on the key's line in the source text.
    /// For start-time checks outside this module (e.g. a drive that cannot be opened).
    pub fn error_at(
        &self,
        kind: ConfigErrorKind,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        self.checker(None).error(kind, key, message)
    }

    fn checker<'a>(&'a self, base_dir: Option<&'a Path>) -> Checker<'a> {
        Checker {
            source_name: &self.source_name,
            lines: &self.key_lines,
            base_dir,
        }
    }

    fn parse(text: &str, source_name: &str, base_dir: Option<&Path>) -> Result<Self, ConfigError> {
        let key_lines = KeyLines::scan(text);
        let raw = deserialize_raw(text, source_name, &key_lines)?;
        let checker = Checker {
            source_name,
            lines: &key_lines,
            base_dir,
        };
        let sections = checker.sections(raw)?;
        Ok(Self {
            source_name: source_name.to_owned(),
            network: sections.network,
            memory: sections.memory,
            storage: sections.storage,
            rdma: sections.rdma,
            limits: sections.limits,
            logging: sections.logging,
            key_lines,
        })
    }
}

/// serde_norway with `deny_unknown_fields`, its errors rewritten as `source:line: key: message`.
fn deserialize_raw(
    text: &str,
    source_name: &str,
    lines: &KeyLines,
) -> Result<RawConfig, ConfigError> {
    // An empty file, or one holding only comments, means "all defaults".
    let value: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| serde_error(&e, source_name, lines))?;
    if value.is_null() {
        return Ok(RawConfig::default());
    }
    serde_norway::from_str(text).map_err(|e| serde_error(&e, source_name, lines))
}

fn serde_error(error: &serde_norway::Error, source_name: &str, lines: &KeyLines) -> ConfigError {
    let mut line = error.location().map(|l| l.line());
    let mut message = error.to_string();
    let suffix = error
        .location()
        .map(|l| format!(" at line {} column {}", l.line(), l.column()));
    let at_start = error
        .location()
        .is_some_and(|l| l.line() == 1 && l.column() == 1);
    match suffix.as_deref().and_then(|s| message.strip_suffix(s)) {
        Some(stripped) => message = stripped.to_owned(),
        // serde_norway leaves the position out of its text at the very start.
        None if at_start => {}
        // A YAML scanner error ("found character that cannot start any token at line 2
        // column 1, while scanning ..."): no key to name, the text says where.
        None => {
            return ConfigError {
                kind: ConfigErrorKind::Syntax,
                source_name: source_name.to_owned(),
                line,
                key: None,
                message,
            };
        }
    }
    let unknown_field = unknown_field_name(&message).map(str::to_owned);
    let unknown_field = unknown_field.as_deref();
    let key = match (line.and_then(|l| lines.key_at_line(l)), unknown_field) {
        // The scanner found the offending key itself on that line.
        (Some(found), Some(field)) if found.rsplit('.').next() == Some(field) => {
            Some(found.to_owned())
        }
        (Some(found), None) => Some(found.to_owned()),
        // Flow-style YAML the scanner does not index: rebuild from serde's parent path.
        (_, Some(field)) => {
            Some(serde_parent_path(&message).map_or(field.to_owned(), |p| format!("{p}.{field}")))
        }
        (None, None) => None,
    };
    // serde points at the first of two duplicate keys; the second is the mistake.
    if message.contains("duplicate entry")
        && let Some(second) = key.as_deref().and_then(|k| lines.lines_of(k).nth(1))
    {
        line = Some(second);
    }
    // serde prefixes its message with the parent path, which the key already shows.
    if let Some((prefix, rest)) = message.split_once(": ")
        && !prefix.contains(' ')
        && key.as_deref().is_some_and(|k| k.starts_with(prefix))
    {
        message = rest.to_owned();
    }
    let kind = if let Some(field) = unknown_field {
        let expected = message.split_once("`, ").map_or("", |(_, rest)| rest);
        message = format!("unknown key `{field}`; {expected}");
        ConfigErrorKind::UnknownKey
    } else {
        ConfigErrorKind::Syntax
    };
    ConfigError {
        kind,
        source_name: source_name.to_owned(),
        line,
        key,
        message,
    }
}

/// `unknown field `adress`, expected ...` -> `adress`.
fn unknown_field_name(message: &str) -> Option<&str> {
    let start = message.find("unknown field `")? + "unknown field `".len();
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

/// `network: unknown field ...` -> `network`; `None` at the top level.
fn serde_parent_path(message: &str) -> Option<&str> {
    let (prefix, _) = message.split_once(": ")?;
    (!prefix.contains(' ') && !prefix.is_empty()).then_some(prefix)
}

#[cfg(test)]
mod tests;
