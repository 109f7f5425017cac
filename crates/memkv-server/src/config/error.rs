//! Configuration errors, shown as `source:line: key: message`.

use std::fmt;

/// What went wrong, for callers that react differently (tests, `memkv start` exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not valid YAML, or a value has the wrong YAML type.
    Syntax,
    /// A key memkv does not know, at any level.
    UnknownKey,
    /// A value out of range, malformed, or inconsistent with another key.
    InvalidValue,
    /// Valid configuration that this build cannot run (for example `storage.mode: direct`).
    Unsupported,
}

/// A configuration problem, naming where it is. Display: `source:line: key: message`, with the
/// line or key left out when unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    /// The file path, or the name given to [`super::ServerConfig::from_yaml_str`].
    pub source_name: String,
    /// 1-based line of the key in the YAML text.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `network.tls_key` or `storage.drives[1].size`.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source_name)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_leaves_out_unknown_parts() {
        let mut error = ConfigError {
            kind: ConfigErrorKind::InvalidValue,
            source_name: "c.yaml".into(),
            line: Some(3),
            key: Some("rdma.mtu".into()),
            message: "bad".into(),
        };
        assert_eq!(error.to_string(), "c.yaml:3: rdma.mtu: bad");
        error.line = None;
        assert_eq!(error.to_string(), "c.yaml: rdma.mtu: bad");
        error.key = None;
        assert_eq!(error.to_string(), "c.yaml: bad");
    }
}
