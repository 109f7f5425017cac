//! `memkv setup`: check drives, format them as one direct-mode store and write a server
//! configuration that uses them.
//!
//! Safe by default: a drive holding a filesystem, a partition table or another memkv store is
//! refused, naming what was found, unless `--force`. `--idempotent` makes a second run with the
//! same arguments a no-op (drives already one store of this geometry, config already as asked),
//! so provisioning scripts can run it on every boot.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memkv_config::ByteSize;
use memkv_server::config::ServerConfig;
use memkv_store::{
    DEFAULT_DRIVE_SIZE, DriveConfig, DriveContents, Store, StoreConfig, StoreMode, check_format,
    inspect_drive,
};

use crate::exit::{self, Exit};

/// Bytes zeroed at each place where a drive that `--force` takes over keeps signatures (`wipe`).
const WIPE: usize = 1 << 20;

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Drives to use, comma-separated: block devices (or files on a disk filesystem).
    #[arg(
        long,
        value_name = "DEV[,DEV...]",
        value_delimiter = ',',
        required = true
    )]
    pub drives: Vec<PathBuf>,
    /// Extent size on the drives (storage.block_size): a number of KiB, as MemKV takes it
    /// (4096 is 4 MiB), or a size with its unit; a power of two from 64 KiB to 1 GiB.
    #[arg(long, value_name = "KB|SIZE", default_value = "4 MiB", value_parser = parse_shard_size)]
    pub shard_size: ByteSize,
    /// RDMA device the server uses (rdma.device).
    #[arg(long, value_name = "DEVICE")]
    pub rdma: Option<String>,
    /// Overwrite drives that hold something (a filesystem, another store) and an existing,
    /// different config file.
    #[arg(long)]
    pub force: bool,
    /// Succeed without changing anything when the drives and the config are already set up as
    /// asked.
    #[arg(long)]
    pub idempotent: bool,
    /// Where to write the server configuration.
    #[arg(long, value_name = "PATH", default_value = "/etc/memkv/config.yaml")]
    pub config: PathBuf,
}

/// A bare number counts KiB (MemKV's `--shard-size KB`); anything else is a size.
fn parse_shard_size(text: &str) -> Result<ByteSize, String> {
    let bare = text.trim();
    if !bare.is_empty() && bare.bytes().all(|b| b.is_ascii_digit()) {
        return bare
            .parse::<u64>()
            .ok()
            .and_then(|kib| kib.checked_mul(1024))
            .map(ByteSize)
            .ok_or_else(|| format!("{bare} KiB is too large"));
    }
    memkv_config::parse_size(text).map_err(|e| e.to_string())
}

pub fn run(args: SetupArgs) -> Result<(), Exit> {
    let fail = |m: String| Exit::with(exit::FAILURE, m);
    let block_size = args.shard_size.bytes();
    // Everything that can refuse the run is checked before a byte is written: a refusal after
    // a wipe or a format would leave drives changed and the run failed.
    let lens = check_drives(&args.drives).map_err(fail)?;
    let found: Vec<DriveContents> = args
        .drives
        .iter()
        .map(|d| inspect_drive(d).map_err(|e| fail(format!("{}: {e}", d.display()))))
        .collect::<Result<_, _>>()?;
    let config_text = config_yaml(&args);
    let set_up = already_one_store(&found, block_size);
    if args.idempotent && set_up && config_matches(&args.config, &config_text) {
        eprintln!(
            "memkv setup: {} drive(s) and {} already set up as asked; nothing changed",
            args.drives.len(),
            args.config.display()
        );
        out!("{config_text}");
        return Ok(());
    }
    let keep_store = args.idempotent && set_up;
    refuse_config_change(&args, &config_text)?;
    if !keep_store {
        // An empty regular file is sized by the store when it formats.
        let sized: Vec<(PathBuf, u64)> = args
            .drives
            .iter()
            .cloned()
            .zip(lens)
            .map(|(d, len)| (d, if len == 0 { DEFAULT_DRIVE_SIZE } else { len }))
            .collect();
        check_format(&sized, block_size).map_err(|e| fail(e.to_string()))?;
        for (drive, contents) in args.drives.iter().zip(&found) {
            if let Some(what) = occupied(contents)
                && !args.force
            {
                return Err(fail(format!(
                    "refusing {}: it holds {what}; --force overwrites it",
                    drive.display()
                )));
            }
        }
        // Every drive opened for writing, and a device exclusively, before any is wiped: one
        // that cannot be (read-only, in use) must not be found after another was overwritten.
        let opened: Vec<std::fs::File> = args
            .drives
            .iter()
            .map(|d| open_to_write(d).map_err(fail))
            .collect::<Result<_, _>>()?;
        for ((drive, contents), file) in args.drives.iter().zip(&found).zip(&opened) {
            if let Some(what) = occupied(contents) {
                wipe(file).map_err(|e| fail(format!("{}: wiping: {e}", drive.display())))?;
                eprintln!("memkv setup: {}: overwrote {what}", drive.display());
            }
        }
        drop(opened);
        format(&args.drives, block_size).map_err(fail)?;
    }
    write_config(&args, &config_text)?;
    eprintln!(
        "memkv setup: {} drive(s) {} as one direct-mode store ({} extents); config in {}",
        args.drives.len(),
        if keep_store { "kept" } else { "formatted" },
        args.shard_size,
        args.config.display()
    );
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for hint in service_user_hints(&args.drives, &passwd) {
        eprintln!("memkv setup: {hint}");
    }
    // As MemKV's setup does, the config on standard output (runbooks redirect it), the rest on
    // standard error.
    out!("{config_text}");
    Ok(())
}

/// The packaged service runs as the `memkv` user, which cannot open drives that root owns
/// (setup runs as root): says how to hand each such drive over. Nothing when there is no
/// `memkv` user (`passwd` is /etc/passwd's text).
fn service_user_hints(drives: &[PathBuf], passwd: &str) -> Vec<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Some(uid) = passwd.lines().find_map(|l| {
        let mut fields = l.split(':');
        (fields.next() == Some("memkv")).then(|| fields.nth(1)?.parse::<u32>().ok())?
    }) else {
        return Vec::new();
    };
    drives
        .iter()
        .filter_map(|d| Some((d, std::fs::metadata(d).ok()?)))
        .filter(|(_, m)| m.uid() != uid)
        .map(|(d, m)| {
            let how = if m.file_type().is_block_device() {
                "a udev rule with OWNER=\"memkv\""
            } else {
                "`chown memkv:memkv`"
            };
            format!(
                "{} is not the memkv user's, which the packaged service runs as: give it to \
                 memkv ({how}; docs/operations.md, \"Drives and the memkv user\")",
                d.display()
            )
        })
        .collect()
}

/// Each drive's length, once each drive is known to be a distinct file or device whose path the
/// config can name as given. A regular file of length 0 is sized by the store (0 here).
fn check_drives(drives: &[PathBuf]) -> Result<Vec<u64>, String> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut seen: Vec<((u64, u64), &PathBuf)> = Vec::new();
    let mut lens = Vec::new();
    for d in drives {
        if d.to_string_lossy().chars().any(char::is_control) {
            return Err(format!(
                "{:?}: a drive path with a control character (a newline, a tab) cannot be named in the config; rename or link it",
                d.display().to_string()
            ));
        }
        let meta = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        // A device is the same device by any path; a file the same file by its inode.
        let identity = if meta.file_type().is_block_device() {
            (u64::MAX, meta.rdev())
        } else {
            (meta.dev(), meta.ino())
        };
        if let Some((_, first)) = seen.iter().find(|(id, _)| *id == identity) {
            return Err(format!(
                "{} and {} are the same drive; list each drive once",
                first.display(),
                d.display()
            ));
        }
        seen.push((identity, d));
        let len = std::fs::File::open(d)
            .and_then(|mut f| f.seek(SeekFrom::End(0)))
            .map_err(|e| format!("{}: {e}", d.display()))?;
        lens.push(len);
    }
    Ok(lens)
}

/// The config file is replaced only when it already says this, or with `--force`.
fn refuse_config_change(args: &SetupArgs, text: &str) -> Result<(), Exit> {
    let path = &args.config;
    // An empty file is nothing to lose: `memkv setup ... > config.yaml` creates (truncates)
    // it before setup runs.
    let empty = std::fs::metadata(path).is_ok_and(|m| m.len() == 0);
    if path.exists() && !empty && !config_matches(path, text) && !args.force {
        return Err(Exit::with(
            exit::FAILURE,
            format!(
                "refusing to replace {}: it differs from the configuration asked for; --force replaces it",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// What formatting a drive would destroy, if anything.
fn occupied(contents: &DriveContents) -> Option<String> {
    match contents {
        DriveContents::Blank => None,
        DriveContents::Memkv {
            store_id,
            drive_index,
            drive_count,
            ..
        } => Some(format!(
            "drive {} of {drive_count} of memkv store {store_id:032x}",
            drive_index + 1
        )),
        DriveContents::UnreadableMemkv(why) => {
            Some(format!("a memkv drive this build cannot read ({why})"))
        }
        DriveContents::Foreign(what) => Some(what.clone()),
    }
}

/// Whether the drives are, in this order, all the drives of one memkv store with these extents.
fn already_one_store(found: &[DriveContents], block_size: u64) -> bool {
    let mut id = None;
    found.iter().enumerate().all(|(i, c)| match c {
        DriveContents::Memkv {
            store_id,
            drive_index,
            drive_count,
            block_size: b,
        } => {
            let same = *id.get_or_insert(*store_id) == *store_id;
            same && *drive_index as usize == i
                && *drive_count as usize == found.len()
                && *b == block_size
        }
        _ => false,
    })
}

/// `drive` opened for writing: a block device exclusively (O_EXCL), which the kernel refuses
/// while it is mounted, holds a mounted partition, or another program holds it (an md array,
/// LVM, a running memkv server's `setup` run), so nothing in use is formatted, `--force` or
/// not. A regular file or a device that is neither is refused here too, before anything is
/// written.
fn open_to_write(drive: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let meta = std::fs::metadata(drive).map_err(|e| format!("{}: {e}", drive.display()))?;
    let kind = meta.file_type();
    let mut options = OpenOptions::new();
    options.write(true);
    if kind.is_block_device() {
        // The kernel opens a read-only device for writing, and fails the writes.
        let (major, minor) = dev_numbers(meta.rdev());
        let ro = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/ro"));
        if ro.is_ok_and(|ro| ro.trim() == "1") {
            return Err(format!(
                "refusing {}: the device is read-only",
                drive.display()
            ));
        }
        options.custom_flags(libc::O_EXCL);
    } else if !kind.is_file() {
        return Err(format!(
            "refusing {}: neither a block device nor a regular file",
            drive.display()
        ));
    }
    options.open(drive).map_err(|e| {
        if e.raw_os_error() == Some(libc::EBUSY) {
            format!(
                "refusing {}: it is in use (mounted, a partition of it mounted, or held by                  another program such as md or LVM); --force does not override this",
                drive.display()
            )
        } else {
            format!("{}: cannot open it for writing: {e}", drive.display())
        }
    })
}

/// A device number's major and minor numbers (glibc's encoding, as the kernel hands it out).
fn dev_numbers(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// Zeroes where signatures live, so no tool (blkid, mdadm's assembly, a partitioner) finds
/// what the drive held: the first MiB (memkv's superblock, filesystems, LVM, md 1.1/1.2, the
/// primary GPT), the MiB at 64 MiB (btrfs's first mirror superblock) and the last MiB (the
/// backup GPT, md 0.90/1.0 superblocks).
fn wipe(file: &std::fs::File) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    let len = f.seek(SeekFrom::End(0))?;
    let wipe = WIPE as u64;
    let zeros = vec![0u8; WIPE];
    for at in [0, 64 << 20, len.saturating_sub(wipe)] {
        let n = wipe.min(len.saturating_sub(at));
        if n > 0 {
            file.write_all_at(&zeros[..n as usize], at)?;
        }
    }
    file.sync_all()
}

/// Formats the drives by opening them once as a direct-mode store.
fn format(drives: &[PathBuf], block_size: u64) -> Result<(), String> {
    let mut config = StoreConfig::direct(
        drives
            .iter()
            .map(|path| DriveConfig {
                path: path.clone(),
                size: None,
            })
            .collect(),
    );
    if let StoreMode::Direct { block_size: b, .. } = &mut config.mode {
        *b = block_size;
    }
    let store = Store::open(config).map_err(|e| format!("formatting the drives: {e}"))?;
    store
        .close()
        .map_err(|e| format!("closing the new store: {e}"))
}

fn config_yaml(args: &SetupArgs) -> String {
    let mut text = String::from(
        "# Written by `memkv setup`. See config.example.yaml for every key.\nstorage:\n  mode: direct\n",
    );
    text.push_str(&format!("  block_size: {}\n  drives:\n", args.shard_size));
    for d in &args.drives {
        text.push_str(&format!("    - media: {}\n", yaml_string(&absolute(d))));
    }
    if let Some(device) = &args.rdma {
        text.push_str(&format!(
            "rdma:\n  device: {}\n",
            yaml_string(Path::new(device))
        ));
    }
    text
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// A double-quoted YAML scalar (paths may hold characters YAML would otherwise read).
fn yaml_string(p: &Path) -> String {
    let s = p.display().to_string();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn config_matches(path: &Path, text: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|current| current == text)
}

fn write_config(args: &SetupArgs, text: &str) -> Result<(), Exit> {
    let fail = |m: String| Exit::with(exit::FAILURE, m);
    let path = &args.config;
    // Whether it may be replaced was decided before the drives were touched
    // (`refuse_config_change`). Checked before it is written: what setup writes must be what the server loads.
    let temp = path.with_extension("yaml.new");
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| fail(format!("{}: {e}", parent.display())))?;
    }
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    };
    write().map_err(|e| fail(format!("{}: {e}", temp.display())))?;
    if let Err(e) = ServerConfig::load(&temp) {
        let _ = std::fs::remove_file(&temp);
        return Err(fail(format!(
            "the configuration setup wrote does not load: {e}"
        )));
    }
    std::fs::rename(&temp, path).map_err(|e| fail(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drives_not_the_memkv_users_get_a_hint_only_where_there_is_such_a_user() {
        let dir = std::env::temp_dir().join(format!("memkv-setup-hint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let drive = dir.join("d0");
        std::fs::write(&drive, b"").unwrap();
        let drives = [drive.clone()];
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&drive).unwrap());
        let other = owner + 1;
        let passwd =
            format!("root:x:0:0::/root:/bin/sh\nmemkv:x:{other}:{other}::/:/usr/sbin/nologin\n");
        let hints = service_user_hints(&drives, &passwd);
        assert_eq!(hints.len(), 1);
        assert!(hints[0].contains("chown memkv:memkv"), "{}", hints[0]);
        let theirs = format!("memkv:x:{owner}:{owner}::/:/usr/sbin/nologin\n");
        assert!(service_user_hints(&drives, &theirs).is_empty());
        assert!(service_user_hints(&drives, "root:x:0:0::/root:/bin/sh\n").is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
