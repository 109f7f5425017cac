//! `memkv setup` refuses before it writes: drives it would destroy, arguments the store would
//! refuse, a config it may not replace, and paths the config could not name.

mod common;

use common::drive_files::{drive, memkv_superblock, peek, poke, scratch, setup, text};

/// `memkv setup --drives DRIVES --shard-size 1MiB --config CONFIG EXTRA...`.
fn setup_1mib(drives: &str, config: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--drives",
        drives,
        "--shard-size",
        "1MiB",
        "--config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    setup(&args)
}

/// A Linux md RAID member (metadata 1.2) keeps its superblock 4 KiB into the device and
/// leaves the first 4 KiB zero: refused without `--force` (a drive is blank only when all of
/// its first 128 KiB are zero).
#[test]
fn md_raid_member_is_refused_without_force() {
    let dir = scratch("md");
    let d0 = drive(&dir, "d0");
    // md superblock 1.x magic 0xa92b4efc (little-endian), major_version 1, at 4096.
    poke(&d0, 4096, &[0xfc, 0x4e, 0x2b, 0xa9, 1, 0, 0, 0]);
    let config = dir.join("config.yaml");
    let o = setup_1mib(d0.to_str().unwrap(), &config, &[]);
    let formatted = memkv_superblock(&d0);
    assert!(
        o.status.code() == Some(1) && !formatted,
        "a drive with data 4 KiB in (an md RAID superblock) was {} (exit {:?}): {}",
        if formatted { "formatted" } else { "kept" },
        o.status.code(),
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The same file reached by two paths (here a symlink) is one drive: refused, where it used to
/// be formatted as two drives of one store that the server could not open.
#[test]
fn same_drive_by_two_paths_is_refused() {
    let dir = scratch("alias");
    let d0 = drive(&dir, "d0");
    let alias = dir.join("alias");
    std::os::unix::fs::symlink(&d0, &alias).unwrap();
    let config = dir.join("config.yaml");
    let drives = format!("{},{}", d0.display(), alias.display());
    let o = setup_1mib(&drives, &config, &[]);
    // What the server would meet: the store setup just "formatted" does not open.
    let mut store = memkv_store::StoreConfig::direct(
        [&d0, &alias]
            .iter()
            .map(|p| memkv_store::DriveConfig {
                path: p.to_path_buf(),
                size: None,
            })
            .collect(),
    );
    if let memkv_store::StoreMode::Direct { block_size, .. } = &mut store.mode {
        *block_size = 1 << 20;
    }
    let opened = memkv_store::Store::open(store).map(|s| s.close());
    assert_eq!(
        o.status.code(),
        Some(1),
        "one file given as two drives was accepted: {}; opening that store: {:?}",
        text(&o),
        opened.err().map(|e| e.to_string())
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A refusal to replace an existing, different config leaves the drives as they were (it used
/// to come after they were formatted).
#[test]
fn config_refusal_leaves_drives_unformatted() {
    let dir = scratch("config");
    let d0 = drive(&dir, "d0");
    let config = dir.join("config.yaml");
    std::fs::write(&config, "# another server's config\n").unwrap();
    let o = setup_1mib(d0.to_str().unwrap(), &config, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("refusing to replace"), "{}", text(&o));
    assert!(
        !memkv_superblock(&d0),
        "setup failed (config refused) but formatted the drive anyway: {}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A shard size the store refuses (a power of two from 64 KiB to 1 GiB), or one too large for
/// the drive (the metadata and one shard must fit), is refused before `--force` wipes anything.
#[test]
fn a_refused_shard_size_wipes_nothing_even_with_force() {
    for (shard, why) in [
        ("12KiB", "not a power of two"),
        ("1GiB", "larger than the drive"),
    ] {
        let dir = scratch(&format!("shard-{shard}"));
        let d0 = drive(&dir, "d0");
        poke(&d0, 1080, &[0x53, 0xef]);
        let config = dir.join("config.yaml");
        let o = setup(&[
            "--drives",
            d0.to_str().unwrap(),
            "--shard-size",
            shard,
            "--force",
            "--config",
            config.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{shard}: {}", text(&o));
        assert_eq!(
            peek(&d0, 1080, 2),
            [0x53, 0xef],
            "{shard} ({why}) was refused, but the ext4 filesystem was wiped: {}",
            text(&o)
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A drive path holding a newline would come back from the config's YAML as another path
/// (folded to a space): refused before anything is written.
#[test]
fn config_names_the_drive_that_was_formatted() {
    let dir = scratch("newline");
    let d0 = drive(&dir, "d\n0");
    let config = dir.join("config.yaml");
    let o = setup_1mib(d0.to_str().unwrap(), &config, &[]);
    // A newline cannot survive the config's round trip: refused, before anything is written.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("control character"), "{}", text(&o));
    assert!(!memkv_superblock(&d0), "nothing formatted");
    assert!(!config.exists(), "no config written");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--idempotent` keeps a store only when it is exactly what is asked: another order,
/// another shard size or a missing drive is refused (exit 1) and leaves the drives as they
/// were.
#[test]
fn idempotent_refuses_a_different_setup() {
    let dir = scratch("idem");
    let (d0, d1) = (drive(&dir, "d0"), drive(&dir, "d1"));
    let config = dir.join("config.yaml");
    let c = config.to_str().unwrap();
    let drives = format!("{},{}", d0.display(), d1.display());
    let first = setup(&["--drives", &drives, "--shard-size", "1MiB", "--config", c]);
    assert!(first.status.success(), "{}", text(&first));
    let before = (peek(&d0, 0, 4096), peek(&d1, 0, 4096));
    let cfg_before = std::fs::read(&config).unwrap();
    let swapped = format!("{},{}", d1.display(), d0.display());
    let cases: [&[&str]; 4] = [
        &["--drives", &swapped, "--shard-size", "1MiB"],
        &["--drives", &drives, "--shard-size", "2MiB"],
        &["--drives", d0.to_str().unwrap(), "--shard-size", "1MiB"],
        &[
            "--drives",
            &drives,
            "--shard-size",
            "1MiB",
            "--rdma",
            "mlx5_0",
        ],
    ];
    for args in cases {
        let o = setup(&[args, &["--idempotent", "--config", c]].concat());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert_eq!(
            (peek(&d0, 0, 4096), peek(&d1, 0, 4096)),
            before,
            "{args:?} changed a superblock"
        );
        assert_eq!(std::fs::read(&config).unwrap(), cfg_before, "{args:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An empty drive list or an empty entry is refused with a clear message, never a panic.
#[test]
fn empty_drive_entries_are_refused_clearly() {
    let dir = scratch("empty");
    let d0 = drive(&dir, "d0");
    let config = dir.join("config.yaml");
    let c = config.to_str().unwrap();
    let trailing = format!("{},", d0.display());
    for drives in ["", ",", trailing.as_str()] {
        let o = setup(&["--drives", drives, "--config", c]);
        let code = o.status.code();
        assert!(
            code == Some(1) || code == Some(2),
            "--drives {drives:?}: exit {code:?}: {}",
            text(&o)
        );
        assert!(!text(&o).contains("panicked"), "{}", text(&o));
        assert!(!memkv_superblock(&d0), "--drives {drives:?} formatted d0");
        assert!(!config.exists());
    }
    let _ = std::fs::remove_dir_all(dir);
}
