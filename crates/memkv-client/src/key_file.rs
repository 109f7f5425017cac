//! The local auth key file the server generates when no key is configured, so a client on
//! the same machine works without configuration.
//!
//! Location: `$XDG_STATE_HOME/memkv/auth_key` when XDG_STATE_HOME is absolute, else
//! `$HOME/.local/state/memkv/auth_key`, else `/var/lib/memkv/auth_key`. Contents: 64 hex
//! characters and a newline. (The same rule as the server's; kept here so the client does not
//! depend on the server crate.)

use std::path::{Path, PathBuf};

use memkv_proto::AuthKey;

/// Where the local key file lives.
pub fn default_key_file_path() -> PathBuf {
    key_file_path_from(
        std::env::var_os("XDG_STATE_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

pub(crate) fn key_file_path_from(
    xdg_state_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> PathBuf {
    if let Some(state) = xdg_state_home.filter(|p| p.is_absolute()) {
        return state.join("memkv").join("auth_key");
    }
    if let Some(home) = home.filter(|p| !p.as_os_str().is_empty()) {
        return home.join(".local/state/memkv/auth_key");
    }
    PathBuf::from("/var/lib/memkv/auth_key")
}

/// Reads a key file; the error names the file and never echoes its contents.
pub fn read_key_file(path: &Path) -> Result<AuthKey, String> {
    let shown = path.display();
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{shown}: {e}"))?
        .len();
    if len > 4096 {
        return Err(format!(
            "{shown}: {len} bytes is not a key file (64 hex characters)"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    AuthKey::from_hex(&text).map_err(|e| format!("{shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_follows_xdg_then_home_then_var_lib() {
        assert_eq!(
            key_file_path_from(Some("/s".into()), Some("/h".into())),
            PathBuf::from("/s/memkv/auth_key")
        );
        assert_eq!(
            key_file_path_from(Some("rel".into()), Some("/h".into())),
            PathBuf::from("/h/.local/state/memkv/auth_key")
        );
        assert_eq!(
            key_file_path_from(None, None),
            PathBuf::from("/var/lib/memkv/auth_key")
        );
    }

    #[test]
    fn reads_a_key_and_names_the_file_on_error() {
        let dir = std::env::temp_dir().join(format!("memkv-client-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("auth_key");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(read_key_file(&path).unwrap().to_hex(), "ab".repeat(32));
        std::fs::write(&path, "secretsecret\n").unwrap();
        let err = read_key_file(&path).unwrap_err();
        assert!(err.contains("auth_key") && !err.contains("secret"), "{err}");
        let missing = read_key_file(&dir.join("nope")).unwrap_err();
        assert!(missing.contains("nope"), "{missing}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
