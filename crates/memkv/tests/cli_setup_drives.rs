//! `memkv setup`'s drive checks: what it refuses without `--force` (and names), what
//! `--idempotent` keeps, what a failed run leaves, and what `--force` overwrites.
//!
//! Scratch files where a file suffices; loop devices (root only; skipped otherwise) where a
//! block device matters: mounts, exclusive holders, partitions, device aliases. Every loop
//! device, partition and mount is undone by a guard's `Drop`, so also when an assertion fails.
//! Signatures that no tool here can write (XFS, btrfs, LVM, md) are test doubles: the magic
//! bytes at the offset where blkid looks for them.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use common::drive_files::{drive, memkv_superblock, peek, poke, scratch, setup, text};

const EXT4_MAGIC: (u64, &[u8]) = (1080, &[0x53, 0xef]);
const MD_MAGIC: [u8; 4] = [0xfc, 0x4e, 0x2b, 0xa9];
/// Linux's O_EXCL (x86_64 and aarch64): on a block device, a claim no other O_EXCL open or
/// mount can share.
const O_EXCL: i32 = 0o200;

/// Loop devices, partitions and mounts are set up one test at a time.
static BLOCK: Mutex<()> = Mutex::new(());

fn block_lock() -> std::sync::MutexGuard<'static, ()> {
    BLOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `memkv setup --drives DRIVES --shard-size 1MiB --config DIR/config.yaml EXTRA...`.
fn run(drives: &[&Path], dir: &Path, extra: &[&str]) -> Output {
    let list = drives
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let config = dir.join("config.yaml");
    let mut args = vec![
        "--drives",
        list.as_str(),
        "--shard-size",
        "1MiB",
        "--config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    setup(&args)
}

/// Exit 1, the message names `names` as what the drive holds, and `drive` was not formatted.
fn assert_refused(o: &Output, drive: &Path, names: &str, case: &str) {
    let t = text(o);
    assert_not_formatted(o, drive, case);
    // What it found, not the drive's path (which may contain the same word).
    let found = t.split_once("it holds ").map_or(t.as_str(), |(_, f)| f);
    assert!(
        found.contains(names),
        "{case}: refused, but the message does not name {names:?}: {t}"
    );
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A loop device on `file`, detached (with any partitions added) when dropped.
struct Loop {
    dev: PathBuf,
    parts: bool,
}

impl Loop {
    /// `None` (the test is skipped, and says so) where loop devices cannot be had.
    fn new(file: &Path, extra: &[&str]) -> Option<Loop> {
        if !is_root() || !have("losetup") {
            eprintln!("SKIPPED: needs root and losetup");
            return None;
        }
        let o = Command::new("losetup")
            .args(extra)
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .ok()?;
        if !o.status.success() {
            eprintln!("SKIPPED: losetup: {}", String::from_utf8_lossy(&o.stderr));
            return None;
        }
        let dev = PathBuf::from(String::from_utf8(o.stdout).unwrap().trim());
        Some(Loop { dev, parts: false })
    }

    /// The loop device's first partition (from the MBR on it), as a block device node.
    fn partition1(&mut self) -> PathBuf {
        self.parts = true;
        // This kernel may parse no partition tables itself; partx adds them by ioctl.
        let _ = Command::new("partx").arg("-a").arg(&self.dev).output();
        let p = PathBuf::from(format!("{}p1", self.dev.display()));
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        for _ in 0..50 {
            if p.exists() {
                return p;
            }
            if let Ok(nums) = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")) {
                sh(
                    "mknod",
                    &[p.to_str().unwrap(), "b"]
                        .iter()
                        .copied()
                        .chain(nums.trim().split(':'))
                        .collect::<Vec<_>>(),
                );
                return p;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{} has no partition 1", self.dev.display());
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if self.parts {
            let _ = Command::new("partx").arg("-d").arg(&self.dev).output();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).output();
        // A detach while something still has the device open completes on its last close.
        let name = self.dev.file_name().unwrap().to_str().unwrap().to_owned();
        for _ in 0..50 {
            if !Path::new(&format!("/sys/block/{name}/loop/backing_file")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `dev` mounted on `dir`, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    /// `None` (the test is skipped, saying why) where this machine cannot mount it: no
    /// mkfs.ext4 made the filesystem, or mounting is not allowed here.
    fn new(dev: &Path, dir: &Path) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount").arg(dev).arg(dir).output().ok()?;
        if !o.status.success() {
            eprintln!("SKIPPED: mount: {}", String::from_utf8_lossy(&o.stderr));
            return None;
        }
        Some(Mount(dir.to_owned()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn mkfs_ext4(target: &Path) {
    if have("mkfs.ext4") {
        sh("mkfs.ext4", &["-q", "-F", target.to_str().unwrap()]);
    } else {
        poke(target, EXT4_MAGIC.0, EXT4_MAGIC.1);
    }
}

fn ext4_intact(target: &Path, at: u64) -> bool {
    peek(target, at + EXT4_MAGIC.0, 2) == EXT4_MAGIC.1
}

/// An MBR with one partition: type `kind`, from sector `start`, `sectors` long.
fn write_mbr(path: &Path, kind: u8, start: u32, sectors: u32) {
    let mut entry = [0u8; 16];
    entry[4] = kind;
    entry[8..12].copy_from_slice(&start.to_le_bytes());
    entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    poke(path, 446, &entry);
    poke(path, 510, &[0x55, 0xaa]);
}

/// A GPT for `sector`-byte sectors: protective MBR, header at LBA 1, one Linux-data partition
/// entry at LBA 2 whose space holds nothing (zeros).
fn write_gpt(path: &Path, sector: u64) {
    write_mbr(path, 0xee, 1, u32::MAX);
    let mut header = b"EFI PART".to_vec();
    header.extend_from_slice(&[0, 0, 1, 0]); // revision 1.0
    header.extend_from_slice(&92u32.to_le_bytes());
    poke(path, sector, &header);
    // Linux filesystem data type GUID, first LBA 2048.
    let mut entry = vec![
        0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d,
        0xe4,
    ];
    entry.extend_from_slice(&[0x11; 16]);
    entry.extend_from_slice(&2048u64.to_le_bytes());
    entry.extend_from_slice(&4095u64.to_le_bytes());
    poke(path, 2 * sector, &entry);
}

// ---------------------------------------------------------------------------------------------
// What a drive holds, on scratch files.

#[test]
fn refuses_filesystems_and_swap_naming_them() {
    let dir = scratch("setup-fs");
    let ext4 = drive(&dir, "ext4");
    mkfs_ext4(&ext4);
    assert_refused(&run(&[&ext4], &dir, &[]), &ext4, "ext2/3/4", "ext4");
    assert!(ext4_intact(&ext4, 0));

    let xfs = drive(&dir, "xfs");
    poke(&xfs, 0, b"XFSB\0\0\x10\0");
    assert_refused(&run(&[&xfs], &dir, &[]), &xfs, "XFS", "xfs");

    // btrfs leaves its first 64 KiB zero; its superblock magic is at 64 KiB + 0x40.
    let btrfs = drive(&dir, "btrfs");
    poke(&btrfs, 0x10040, b"_BHRfS_M");
    assert_refused(&run(&[&btrfs], &dir, &[]), &btrfs, "btrfs", "btrfs");

    let swap = drive(&dir, "swap");
    if have("mkswap") {
        sh("mkswap", &[swap.to_str().unwrap()]);
    } else {
        poke(&swap, 4086, b"SWAPSPACE2");
    }
    assert_refused(&run(&[&swap], &dir, &[]), &swap, "swap", "swap");
    assert_eq!(peek(&swap, 4086, 10), b"SWAPSPACE2");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refuses_partition_tables_naming_them() {
    let dir = scratch("setup-pt");
    let mbr = drive(&dir, "mbr");
    write_mbr(&mbr, 0x83, 2048, 2048);
    assert_refused(&run(&[&mbr], &dir, &[]), &mbr, "MBR partition table", "MBR");

    // A GPT whose one partition holds nothing (zeros).
    let gpt = drive(&dir, "gpt");
    write_gpt(&gpt, 512);
    assert_refused(
        &run(&[&gpt], &dir, &[]),
        &gpt,
        "GPT",
        "GPT, empty partition",
    );

    // A protective MBR alone (the GPT header gone): still a partition table.
    let pmbr = drive(&dir, "pmbr");
    write_mbr(&pmbr, 0xee, 1, u32::MAX);
    assert_refused(
        &run(&[&pmbr], &dir, &[]),
        &pmbr,
        "partition table",
        "protective MBR",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A GPT disk with 4 KiB logical sectors keeps its header at 4096, not 512.
#[test]
fn names_a_gpt_on_a_4k_sector_disk_as_gpt() {
    let dir = scratch("setup-gpt4k");
    let gpt = drive(&dir, "gpt4k");
    write_gpt(&gpt, 4096);
    assert_refused(&run(&[&gpt], &dir, &[]), &gpt, "GPT", "GPT, 4 KiB sectors");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refuses_lvm_and_md_superblocks_at_the_start() {
    let dir = scratch("setup-lvm-md");
    // pvcreate's label: "LABELONE" in sector 1, "LVM2 001" 24 bytes on.
    let pv = drive(&dir, "pv");
    poke(
        &pv,
        512,
        b"LABELONE\x01\0\0\0\0\0\0\0\0\0\0\0\x20\0\0\0LVM2 001",
    );
    assert_refused(
        &run(&[&pv], &dir, &[]),
        &pv,
        "LVM physical volume",
        "LVM PV",
    );

    // md metadata 1.1 at 0, 1.2 at 4 KiB.
    for (version, at) in [(1u32, 0u64), (1, 4096)] {
        let md = drive(&dir, &format!("md-at-{at}"));
        let mut sb = MD_MAGIC.to_vec();
        sb.extend_from_slice(&version.to_le_bytes());
        poke(&md, at, &sb);
        assert_refused(
            &run(&[&md], &dir, &[]),
            &md,
            "md RAID member",
            &format!("md superblock at {at}"),
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// md metadata 0.90 and 1.0 keep their superblock at the END of the member (the array's data
/// starts at the member's offset 0). A RAID0/5/10 member other than the first holds a chunk
/// from the middle of the array at its start, all zeros where the array's filesystem has
/// nothing yet: its first 128 KiB are blank, and setup formatted it. It now reads the end too.
#[test]
fn refuses_md_members_with_the_superblock_at_the_end() {
    let dir = scratch("setup-md-end");
    let len = 64u64 << 20;
    // 0.90: the last 64 KiB-aligned 64 KiB block; magic, then major 0, minor 90.
    let v090 = drive(&dir, "md-0.90");
    let at090 = (len & !0xffff) - 0x10000;
    poke(
        &v090,
        at090,
        &[&MD_MAGIC[..], &0u32.to_le_bytes(), &90u32.to_le_bytes()].concat(),
    );
    // 1.0: 8 KiB from the end, 4 KiB aligned; magic, then major 1.
    let v10 = drive(&dir, "md-1.0");
    let at10 = (((len >> 9) - 16) & !7) << 9;
    poke(&v10, at10, &[&MD_MAGIC[..], &1u32.to_le_bytes()].concat());
    let mut formatted = Vec::new();
    for (d, at) in [(&v090, at090), (&v10, at10)] {
        let _ = std::fs::remove_file(dir.join("config.yaml"));
        let o = run(&[d], &dir, &[]);
        if o.status.code() != Some(1) || memkv_superblock(d) {
            formatted.push(format!(
                "{} (md superblock at {at}): exit {:?}, {}",
                d.display(),
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
    }
    assert!(
        formatted.is_empty(),
        "md RAID members formatted without --force:\n{}",
        formatted.join("\n")
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// One drive named twice.

#[test]
fn refuses_one_file_named_twice() {
    let dir = scratch("setup-twice");
    let d0 = drive(&dir, "d0");
    let link = dir.join("link");
    std::os::unix::fs::symlink(&d0, &link).unwrap();
    let hard = dir.join("hard");
    std::fs::hard_link(&d0, &hard).unwrap();
    for (b, case) in [(&d0, "same path"), (&link, "symlink"), (&hard, "hard link")] {
        assert_refused(&run(&[&d0, b], &dir, &[]), &d0, "same drive", case);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refuses_one_block_device_named_twice() {
    let _g = block_lock();
    let dir = scratch("setup-twice-dev");
    let file = drive(&dir, "img");
    let Some(lo) = Loop::new(&file, &[]) else {
        return;
    };
    let link = dir.join("by-id");
    std::os::unix::fs::symlink(&lo.dev, &link).unwrap();
    // A second device node for the same device (as /dev/disk/by-* or a container's /dev has).
    let node = dir.join("node");
    let name = lo.dev.file_name().unwrap().to_str().unwrap().to_owned();
    let nums = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")).unwrap();
    let (major, minor) = nums.trim().split_once(':').unwrap();
    sh("mknod", &[node.to_str().unwrap(), "b", major, minor]);
    for (b, case) in [
        (&lo.dev, "same path"),
        (&link, "symlink"),
        (&node, "second node"),
    ] {
        assert_refused(&run(&[&lo.dev, b], &dir, &[]), &lo.dev, "same drive", case);
    }
    drop(lo);
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Devices in use, partitions.

/// A mounted filesystem is refused without `--force` (by its signature).
#[test]
fn refuses_a_mounted_filesystem_without_force() {
    let _g = block_lock();
    let dir = scratch("setup-mounted");
    let file = drive(&dir, "img");
    let Some(lo) = Loop::new(&file, &[]) else {
        return;
    };
    if !have("mkfs.ext4") {
        eprintln!("SKIPPED: no mkfs.ext4");
        return;
    }
    mkfs_ext4(&lo.dev);
    let Some(m) = Mount::new(&lo.dev, &dir.join("mnt")) else {
        return;
    };
    let o = run(&[&lo.dev], &dir, &[]);
    drop(m);
    assert_refused(&o, &lo.dev, "ext2/3/4", "mounted ext4");
    assert!(ext4_intact(&lo.dev, 0));
    drop(lo);
    let _ = std::fs::remove_dir_all(dir);
}

/// `--force` overwrites what a drive holds; it must not overwrite a filesystem that is mounted
/// (mkfs and wipefs refuse one even when forced); setup wiped and formatted it under the mount.
/// It now opens a device exclusively first, which the kernel refuses while it is mounted.
#[test]
fn force_refuses_a_mounted_filesystem() {
    let _g = block_lock();
    let dir = scratch("setup-mounted-force");
    let file = drive(&dir, "img");
    let Some(lo) = Loop::new(&file, &[]) else {
        return;
    };
    if !have("mkfs.ext4") {
        eprintln!("SKIPPED: no mkfs.ext4");
        return;
    }
    mkfs_ext4(&lo.dev);
    let Some(m) = Mount::new(&lo.dev, &dir.join("mnt")) else {
        return;
    };
    std::fs::write(dir.join("mnt/precious"), b"operator data").unwrap();
    let o = run(&[&lo.dev], &dir, &["--force"]);
    let after = (ext4_intact(&lo.dev, 0), memkv_superblock(&lo.dev));
    drop(m);
    drop(lo);
    assert!(
        o.status.code() == Some(1) && after == (true, false),
        "--force on a MOUNTED ext4: exit {:?}, ext4 superblock intact: {}, memkv superblock written: {}; setup said: {}",
        o.status.code(),
        after.0,
        after.1,
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The run failed (exit 1) and left no memkv superblock on `drive`.
fn assert_not_formatted(o: &Output, drive: &Path, case: &str) {
    let formatted = memkv_superblock(drive);
    assert!(
        o.status.code() == Some(1) && !formatted,
        "{case}: {} was {} (exit {:?}); setup said: {}",
        drive.display(),
        if formatted { "FORMATTED" } else { "kept" },
        o.status.code(),
        text(o)
    );
}

/// A 64 MiB disk image in `dir` with one Linux partition, from 1 MiB to the end.
fn one_partition_image(dir: &Path) -> PathBuf {
    let file = drive(dir, "img");
    write_mbr(&file, 0x83, 2048, (64 << 11) - 2048);
    file
}

/// A disk whose partition is mounted: refused without `--force` (its partition table);
/// with `--force` too, since the disk cannot be opened exclusively (setup zeroed the table and
/// wrote its journal over the mounted partition).
#[test]
fn a_disk_with_a_mounted_partition() {
    let _g = block_lock();
    let dir = scratch("setup-mounted-part");
    let file = one_partition_image(&dir);
    let Some(mut lo) = Loop::new(&file, &["--partscan"]) else {
        return;
    };
    if !have("mkfs.ext4") {
        eprintln!("SKIPPED: no mkfs.ext4");
        return;
    }
    let p1 = lo.partition1();
    mkfs_ext4(&p1);
    let Some(m) = Mount::new(&p1, &dir.join("mnt")) else {
        return;
    };
    let plain = run(&[&lo.dev], &dir, &[]);
    let forced = run(&[&lo.dev], &dir, &["--force"]);
    let after = (
        peek(&lo.dev, 510, 2) == [0x55, 0xaa],
        ext4_intact(&lo.dev, 1 << 20),
        memkv_superblock(&lo.dev),
    );
    drop(m);
    drop(lo);
    assert_eq!(plain.status.code(), Some(1), "{}", text(&plain));
    assert!(
        text(&plain).contains("MBR partition table"),
        "{}",
        text(&plain)
    );
    assert!(
        forced.status.code() == Some(1) && after == (true, true, false),
        "--force on a disk whose partition is MOUNTED: exit {:?}; MBR intact: {}, the mounted \
         partition's ext4 superblock intact: {}, memkv superblock written: {}; setup said: {}",
        forced.status.code(),
        after.0,
        after.1,
        after.2,
        text(&forced)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A blank device another process holds open exclusively (O_EXCL: what mount, swapon, md,
/// device-mapper and mkfs claim a device with) is in use, and refused (it was formatted, no
/// `--force` asked).
#[test]
fn refuses_a_device_held_open_exclusively() {
    let _g = block_lock();
    let dir = scratch("setup-excl");
    let file = drive(&dir, "img");
    let Some(lo) = Loop::new(&file, &[]) else {
        return;
    };
    let holder = OpenOptions::new()
        .read(true)
        .custom_flags(O_EXCL)
        .open(&lo.dev)
        .unwrap();
    // The claim is real: a second exclusive open is refused (EBUSY).
    let second = OpenOptions::new()
        .read(true)
        .custom_flags(O_EXCL)
        .open(&lo.dev);
    assert_eq!(second.err().and_then(|e| e.raw_os_error()), Some(16));
    let o = run(&[&lo.dev], &dir, &[]);
    assert_not_formatted(&o, &lo.dev, "a device held open O_EXCL by another process");
    drop(holder);
    drop(lo);
    let _ = std::fs::remove_dir_all(dir);
}

/// A disk and its own partition in one `--drives`: refused without `--force` (the disk holds a
/// partition table); with `--force` too, as the disk cannot be opened exclusively while its
/// partition is (the two overlapping drives were formatted as one store).
#[test]
fn force_refuses_a_disk_with_its_own_partition() {
    let _g = block_lock();
    let dir = scratch("setup-disk-part");
    let file = one_partition_image(&dir);
    let Some(mut lo) = Loop::new(&file, &["--partscan"]) else {
        return;
    };
    let p1 = lo.partition1();
    let plain = run(&[&lo.dev, &p1], &dir, &[]);
    let forced = run(&[&lo.dev, &p1], &dir, &["--force"]);
    drop(lo);
    assert_eq!(plain.status.code(), Some(1), "{}", text(&plain));
    assert_eq!(
        forced.status.code(),
        Some(1),
        "a disk and its own partition, with --force, were formatted as two drives of one store: {}",
        text(&forced)
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// --idempotent.

#[test]
fn idempotent_formats_nothing_but_blank_drives_or_this_store() {
    let dir = scratch("setup-idem");
    let config = dir.join("config.yaml");
    // Not a store: a filesystem, an unreadable memkv superblock.
    let ext4 = drive(&dir, "ext4");
    mkfs_ext4(&ext4);
    assert_refused(
        &run(&[&ext4], &dir, &["--idempotent"]),
        &ext4,
        "ext2/3/4",
        "ext4",
    );
    let bad = drive(&dir, "bad");
    poke(&bad, 0, b"MEMKVSB\0\x01\0\0\0garbage");
    let o = run(&[&bad], &dir, &["--idempotent"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("cannot read"), "{}", text(&o));
    assert_eq!(peek(&bad, 8, 11), b"\x01\0\0\0garbage");

    // Two one-drive stores are not one two-drive store.
    let (a, b) = (drive(&dir, "a"), drive(&dir, "b"));
    for d in [&a, &b] {
        let o = run(&[d], &dir, &[]);
        assert!(o.status.success(), "{}", text(&o));
        std::fs::remove_file(&config).unwrap();
    }
    let before = (peek(&a, 0, 4096), peek(&b, 0, 4096));
    let o = run(&[&a, &b], &dir, &["--idempotent"]);
    assert_eq!(o.status.code(), Some(1), "two stores: {}", text(&o));
    assert_eq!((peek(&a, 0, 4096), peek(&b, 0, 4096)), before);

    // A three-drive store named with two of its drives.
    let (c0, c1, c2) = (drive(&dir, "c0"), drive(&dir, "c1"), drive(&dir, "c2"));
    let o = run(&[&c0, &c1, &c2], &dir, &[]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_file(&config).unwrap();
    let before = (peek(&c0, 0, 4096), peek(&c1, 0, 4096));
    let o = run(&[&c0, &c1], &dir, &["--idempotent"]);
    assert_eq!(o.status.code(), Some(1), "a subset: {}", text(&o));
    assert_eq!((peek(&c0, 0, 4096), peek(&c1, 0, 4096)), before);

    // This store with no config file yet: kept (superblocks unchanged), the config written.
    let before = (peek(&c0, 0, 4096), peek(&c1, 0, 4096), peek(&c2, 0, 4096));
    let o = run(&[&c0, &c1, &c2], &dir, &["--idempotent"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("kept"), "{}", text(&o));
    assert_eq!(
        (peek(&c0, 0, 4096), peek(&c1, 0, 4096), peek(&c2, 0, 4096)),
        before
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// A run that fails half way.

/// Without `--force` a refused second drive leaves the first as it was.
#[test]
fn a_refused_second_drive_leaves_the_first_untouched() {
    let dir = scratch("setup-half");
    let (d0, d1) = (drive(&dir, "d0"), drive(&dir, "d1"));
    mkfs_ext4(&d1);
    let o = run(&[&d0, &d1], &dir, &[]);
    assert_refused(&o, &d1, "ext2/3/4", "second drive ext4");
    assert!(!memkv_superblock(&d0));
    assert!(peek(&d0, 0, 1 << 20).iter().all(|&b| b == 0));
    // A second drive the store refuses only when it opens it (a character device): still
    // nothing written to the first.
    let o = run(&[&d0, Path::new("/dev/zero")], &dir, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("neither a block device nor a regular file"),
        "{}",
        text(&o)
    );
    assert!(peek(&d0, 0, 1 << 20).iter().all(|&b| b == 0));
    let _ = std::fs::remove_dir_all(dir);
}

/// docs/cli.md: "Everything that can refuse the run is checked before anything is written".
/// With `--force`, the first drive's filesystem was wiped, then the run failed on the second
/// drive, so the operator lost the first drive's data and got no store. Every drive is now
/// checked and opened before any is wiped.
#[test]
fn force_wipes_nothing_when_a_later_drive_then_fails() {
    let dir = scratch("setup-half-force");
    let cases: Vec<(String, PathBuf, &str)> = vec![
        // A character device: inspected as blank, sized 0 (so skipped by check_format), and
        // refused only when the store opens it.
        ("/dev/zero".into(), PathBuf::from("/dev/zero"), "1MiB"),
        // An empty file is sized (1 GiB) only when the store opens it: with 64 KiB extents
        // its journal no longer fits on the 64 MiB first drive.
        ("an empty file".into(), dir.join("empty"), "64KiB"),
    ];
    std::fs::write(dir.join("empty"), b"").unwrap();
    let mut lost = Vec::new();
    for (i, (case, second, shard)) in cases.iter().enumerate() {
        let d0 = drive(&dir, &format!("d0-{i}"));
        mkfs_ext4(&d0);
        let list = format!("{},{}", d0.display(), second.display());
        let config = dir.join(format!("config-{i}.yaml"));
        let o = setup(&[
            "--drives",
            &list,
            "--shard-size",
            shard,
            "--force",
            "--config",
            config.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{case}: {}", text(&o));
        if !ext4_intact(&d0, 0) {
            lost.push(format!(
                "second drive {case}: run failed, first drive's ext4 wiped; setup said: {}",
                text(&o).trim()
            ));
        }
    }
    assert!(lost.is_empty(), "{}", lost.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The same with a second drive that is a read-only block device.
#[test]
fn force_wipes_nothing_when_a_read_only_second_drive_fails() {
    let _g = block_lock();
    let dir = scratch("setup-half-ro");
    let d0 = drive(&dir, "d0");
    mkfs_ext4(&d0);
    let img = drive(&dir, "img");
    let Some(ro) = Loop::new(&img, &["--read-only"]) else {
        return;
    };
    let o = run(&[&d0, &ro.dev], &dir, &["--force"]);
    drop(ro);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        ext4_intact(&d0, 0),
        "the run failed on the read-only second drive, but the first drive's ext4 was wiped: {}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// What --force overwrites.

/// `--force` overwrites a drive's contents (zeroes where signatures live, then formats), replacing a
/// filesystem, a partition table, another store, and says what it overwrote.
#[test]
fn force_overwrites_and_says_what() {
    let dir = scratch("setup-force");
    let d0 = drive(&dir, "d0");
    mkfs_ext4(&d0);
    let d1 = drive(&dir, "d1");
    write_gpt(&d1, 512);
    let o = run(&[&d0, &d1], &dir, &["--force"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("overwrote an ext2/3/4 filesystem"), "{t}");
    assert!(t.contains("overwrote a GPT partition table"), "{t}");
    assert!(memkv_superblock(&d0) && memkv_superblock(&d1));
    assert_eq!(peek(&d1, 510, 2), [0, 0], "protective MBR zeroed");
    // Again with --force over this store: a new store (the old id gone).
    let before = peek(&d0, 0, 4096);
    std::fs::remove_file(dir.join("config.yaml")).unwrap();
    let o = run(&[&d0, &d1], &dir, &["--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("of memkv store"), "{}", text(&o));
    assert_ne!(peek(&d0, 0, 4096), before);
    let _ = std::fs::remove_dir_all(dir);
}

/// `--force` zeroed only the first MiB, so signatures further on survived and named the drive
/// as what it was to every other tool (it now zeroes the first, the 64 MiB and the last MiB): GPT's backup header (last sector), md 0.90/1.0 superblocks
/// (at the end: mdadm --incremental would assemble the old array from it), btrfs's first
/// mirror superblock (64 MiB). wipefs -a, and mkfs through libblkid, erase them all.
#[test]
fn force_leaves_no_signature_of_what_it_overwrote() {
    let dir = scratch("setup-force-end");
    let d0 = dir.join("d0");
    let len = 128u64 << 20;
    std::fs::File::create(&d0).unwrap().set_len(len).unwrap();
    write_gpt(&d0, 512);
    poke(&d0, len - 512, b"EFI PART");
    let md10 = (((len >> 9) - 16) & !7) << 9;
    poke(&d0, md10, &[&MD_MAGIC[..], &1u32.to_le_bytes()].concat());
    poke(&d0, (64 << 20) + 0x40, b"_BHRfS_M");
    let o = run(&[&d0], &dir, &["--force"]);
    assert!(o.status.success(), "{}", text(&o));
    let left: Vec<&str> = [
        (peek(&d0, len - 512, 8) == b"EFI PART", "GPT backup header"),
        (peek(&d0, md10, 4) == MD_MAGIC, "md 1.0 superblock"),
        (
            peek(&d0, (64 << 20) + 0x40, 8) == b"_BHRfS_M",
            "btrfs mirror superblock",
        ),
    ]
    .into_iter()
    .filter_map(|(there, what)| there.then_some(what))
    .collect();
    assert!(
        left.is_empty(),
        "after `setup --force` ({}) these signatures remain on the drive: {left:?}",
        String::from_utf8_lossy(&o.stderr).trim()
    );
    let _ = std::fs::remove_dir_all(dir);
}
