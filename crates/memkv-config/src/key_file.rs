//! The generated auth key file used when no `network.auth_key` is configured.
//!
//! Location ([`default_key_file_path`]): `$XDG_STATE_HOME/memkv/auth_key` when XDG_STATE_HOME is
//! an absolute path, else `$HOME/.local/state/memkv/auth_key` when HOME is set, else (typically
//! root under a service manager) `/var/lib/memkv/auth_key`. The file holds the 64 hex characters
//! and a newline, mode 0600. A key file that group or others can read still loads, with a
//! warning, so a deliberately shared key keeps working.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use memkv_proto::{AuthKey, KeyParseError as AuthKeyError};

use crate::files::temp_path_for;

/// A key file could not be read or written. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("auth key file {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("auth key file {}: {source}", path.display())]
    BadKey { path: PathBuf, source: AuthKeyError },
    #[error("auth key file {}: cannot generate a key: {source}", path.display())]
    Random {
        path: PathBuf,
        source: getrandom::Error,
    },
}

/// Where the server keeps its generated key; see the module documentation.
pub fn default_key_file_path() -> PathBuf {
    key_file_path_from(
        std::env::var_os("XDG_STATE_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

fn key_file_path_from(xdg_state_home: Option<PathBuf>, home: Option<PathBuf>) -> PathBuf {
    if let Some(state) = xdg_state_home.filter(|p| p.is_absolute()) {
        return state.join("memkv").join("auth_key");
    }
    if let Some(home) = home.filter(|p| !p.as_os_str().is_empty()) {
        return home.join(".local/state/memkv/auth_key");
    }
    PathBuf::from("/var/lib/memkv/auth_key")
}

/// Largest key file read; a key file holds 65 bytes.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Reads a key file: 64 hex characters, optionally surrounded by whitespace.
pub fn read_key_file(path: &Path) -> Result<AuthKey, KeyFileError> {
    let io_error = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    let metadata = fs::metadata(path).map_err(io_error)?;
    let mode = metadata.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{:o}", mode & 0o777),
            "auth key file is accessible to group or others; run chmod 600 on it"
        );
    }
    let text = crate::files::read_to_string_limited(path, MAX_KEY_FILE_BYTES).map_err(io_error)?;
    AuthKey::from_hex(&text).map_err(|source| KeyFileError::BadKey {
        path: path.to_owned(),
        source,
    })
}

/// Loads the key at `path`, or generates one and stores it there (mode 0600, parent
/// directories created 0700). Returns the key and whether it was created now.
///
/// Creation is atomic: the key is written to a temporary file in the same directory and then
/// hard-linked into place, so a concurrent starter either wins or reads the winner's key.
pub fn load_or_create_key_file(path: &Path) -> Result<(AuthKey, bool), KeyFileError> {
    match read_key_file(path) {
        Err(KeyFileError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
        other => return other.map(|key| (key, false)),
    }
    let io_error = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    let key = crate::generate_auth_key().map_err(|source| KeyFileError::Random {
        path: path.to_owned(),
        source,
    })?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io_error)?;
    }
    let temp = temp_path_for(path);
    let written = write_new_private_file(&temp, format!("{}\n", key.to_hex()).as_bytes());
    if let Err(source) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_error(source));
    }
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok((key, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            read_key_file(path).map(|key| (key, false))
        }
        Err(source) => Err(io_error(source)),
    }
}

/// Unique per process and call, so concurrent creators never share a temporary file.
fn write_new_private_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "memkv-keyfile-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn path_follows_xdg_then_home_then_var_lib() {
        assert_eq!(
            key_file_path_from(Some("/s".into()), Some("/h".into())),
            PathBuf::from("/s/memkv/auth_key")
        );
        assert_eq!(
            key_file_path_from(Some("relative".into()), Some("/h".into())),
            PathBuf::from("/h/.local/state/memkv/auth_key")
        );
        assert_eq!(
            key_file_path_from(None, Some("".into())),
            PathBuf::from("/var/lib/memkv/auth_key")
        );
        assert_eq!(
            key_file_path_from(None, None),
            PathBuf::from("/var/lib/memkv/auth_key")
        );
    }

    #[test]
    fn creates_once_with_private_mode_then_reuses() {
        let dir = scratch_dir("create");
        let path = dir.join("state/memkv/auth_key");
        let (first, created) = load_or_create_key_file(&path).unwrap();
        assert!(created);
        let metadata = fs::metadata(&path).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), 65);
        assert!(text.ends_with('\n'));
        let (second, created) = load_or_create_key_file(&path).unwrap();
        assert!(!created);
        assert_eq!(first, second);
        assert_eq!(read_key_file(&path).unwrap(), first);
        let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file left behind");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn concurrent_creators_agree_on_one_key() {
        let dir = scratch_dir("race");
        let path = dir.join("auth_key");
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| load_or_create_key_file(&path).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
        assert!(results.iter().all(|(key, _)| *key == results[0].0));
        assert_eq!(read_key_file(&path).unwrap(), results[0].0);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_key_file_names_the_file() {
        let dir = scratch_dir("bad");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("auth_key");
        fs::write(&path, "abc\n").unwrap();
        let message = load_or_create_key_file(&path).unwrap_err().to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains("expected 64 hex characters, got 3"),
            "{message}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_file_is_an_error_for_read() {
        let dir = scratch_dir("missing");
        let err = read_key_file(&dir.join("nope")).unwrap_err();
        assert!(matches!(err, KeyFileError::Io { .. }));
    }
}
