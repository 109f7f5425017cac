//! `memkv put | get | delete | exists`.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use memkv_client::Client;

use crate::exit::{self, Exit};
use crate::progress::Progress;

/// The largest value a server accepts by default (and the client enforces).
const MAX_VALUE: u64 = memkv_proto::Limits::DEFAULT.max_value_len;

/// Keys are bytes: taken from the argument as given, without assuming UTF-8.
fn key_bytes(key: &OsStr) -> &[u8] {
    key.as_bytes()
}

fn is_stdio(file: Option<&Path>) -> bool {
    file.is_none_or(|f| f.as_os_str() == "-")
}

pub async fn put(client: &Client, key: &OsStr, file: Option<&Path>) -> Result<(), Exit> {
    let value = read_value(file)?;
    let progress = Progress::spinner(
        value.len() as u64,
        format!(
            "sending {} to {}",
            indicatif::HumanBytes(value.len() as u64),
            client.owner(key_bytes(key))
        ),
    );
    client.put(key_bytes(key), &value).await?;
    progress.finish();
    Ok(())
}

fn read_value(file: Option<&Path>) -> Result<Vec<u8>, Exit> {
    let too_large = |len: u64| {
        Exit::with(
            exit::FAILURE,
            format!("value of {len} bytes exceeds the limit of {MAX_VALUE} bytes"),
        )
    };
    let (mut reader, expected, name): (Box<dyn Read>, Option<u64>, String) = match file {
        Some(path) if !is_stdio(Some(path)) => {
            let open = |e| Exit::with(exit::FAILURE, format!("{}: {e}", path.display()));
            let f = File::open(path).map_err(open)?;
            let len = f.metadata().map_err(open)?.len();
            if len > MAX_VALUE {
                return Err(too_large(len));
            }
            (Box::new(f), Some(len), path.display().to_string())
        }
        _ => (
            Box::new(std::io::stdin().lock()),
            None,
            "standard input".into(),
        ),
    };
    let progress = Progress::transfer(expected.unwrap_or(0), "reading");
    let mut value = Vec::with_capacity(expected.unwrap_or(0) as usize);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut chunk)
            .map_err(|e| Exit::with(exit::FAILURE, format!("reading {name}: {e}")))?;
        if n == 0 {
            break;
        }
        if value.len() as u64 + n as u64 > MAX_VALUE {
            return Err(too_large(value.len() as u64 + n as u64));
        }
        value.extend_from_slice(&chunk[..n]);
        progress.advance(n as u64);
    }
    progress.finish();
    Ok(value)
}

pub async fn get(client: &Client, key: &OsStr, file: Option<&Path>) -> Result<(), Exit> {
    let Some(value) = client.get(key_bytes(key)).await? else {
        return Err(not_found(key));
    };
    let progress = Progress::transfer(value.len() as u64, "writing");
    let write_error =
        |e: std::io::Error, name: &str| Exit::with(exit::FAILURE, format!("writing {name}: {e}"));
    match file {
        Some(path) if !is_stdio(Some(path)) => {
            write_file(path, &value, &progress)
                .map_err(|e| write_error(e, &path.display().to_string()))?;
        }
        _ => {
            let mut out = std::io::stdout().lock();
            match write_chunks(&mut out, &value, &progress).and_then(|()| out.flush()) {
                Ok(()) => {}
                // A reader that has gone (`memkv get k | head -c1`) is success, as for every
                // command's output (stdout.rs).
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => return Err(write_error(e, "standard output")),
            }
        }
    }
    progress.finish();
    Ok(())
}

/// Writes `value` beside `path` and renames it over `path` once it is complete and on disk,
/// so a failure part way (disk full, a file size limit) leaves the old file as it was.
fn write_file(path: &Path, value: &[u8], progress: &Progress) -> std::io::Result<()> {
    let temp = memkv_config::temp_path_for(path);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        // Replacing the file must not change who may read it.
        if let Ok(old) = std::fs::metadata(path) {
            f.set_permissions(old.permissions())?;
        }
        write_chunks(&mut f, value, progress)?;
        f.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

fn write_chunks(out: &mut dyn Write, value: &[u8], progress: &Progress) -> std::io::Result<()> {
    for chunk in value.chunks(1 << 20) {
        out.write_all(chunk)?;
        progress.advance(chunk.len() as u64);
    }
    Ok(())
}

pub async fn delete(client: &Client, key: &OsStr) -> Result<(), Exit> {
    if client.delete(key_bytes(key)).await? {
        Ok(())
    } else {
        Err(not_found(key))
    }
}

pub async fn exists(client: &Client, key: &OsStr) -> Result<(), Exit> {
    if client.exists(key_bytes(key)).await? {
        Ok(())
    } else {
        Err(Exit::silent(exit::NOT_FOUND))
    }
}

fn not_found(key: &OsStr) -> Exit {
    Exit::with(
        exit::NOT_FOUND,
        format!("key {:?} not found", key.to_string_lossy()),
    )
}
