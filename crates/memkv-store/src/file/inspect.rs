//! What a drive holds, for `memkv setup`: nothing, a memkv drive, or something else that
//! formatting would destroy (named, so the operator knows what `--force` would overwrite).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::superblock::{MAGIC, Probe, SUPERBLOCK_LEN, Superblock};

/// Bytes read from the start of a drive: enough for the filesystem signatures checked below.
const INSPECTED: usize = 128 << 10;

/// What a drive holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriveContents {
    /// Zeros in all of the drive's first 128 KiB (where superblocks and signatures live).
    Blank,
    /// A memkv drive: drive `drive_index` of `drive_count` of store `store_id`.
    Memkv {
        store_id: u128,
        drive_index: u32,
        drive_count: u32,
        block_size: u64,
    },
    /// A memkv superblock this build cannot read (newer, or damaged), named.
    UnreadableMemkv(String),
    /// Something else, named ("an ext4 filesystem", "a GPT partition table", ...).
    Foreign(String),
}

/// Reads the start and the end of the drive at `path` (a block device or a file) and says
/// what it holds.
pub fn inspect_drive(path: &Path) -> std::io::Result<DriveContents> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path)?;
    let len = file.seek(SeekFrom::End(0))?;
    file.seek(SeekFrom::Start(0))?;
    let mut head = Vec::with_capacity(INSPECTED);
    (&mut file).take(INSPECTED as u64).read_to_end(&mut head)?;
    let contents = classify(&head);
    if contents != DriveContents::Blank {
        return Ok(contents);
    }
    // A blank start may still be in use: md keeps 0.90 and 1.0 superblocks at the end, and
    // a RAID member's start holds a stripe of the array, which may be zeros.
    let tail_start = len.saturating_sub(INSPECTED as u64).max(INSPECTED as u64);
    if tail_start >= len {
        return Ok(contents);
    }
    let mut tail = Vec::with_capacity(INSPECTED);
    file.seek(SeekFrom::Start(tail_start))?;
    file.take(INSPECTED as u64).read_to_end(&mut tail)?;
    Ok(match tail_signature(len, tail_start, &tail) {
        Some(name) => DriveContents::Foreign(name.to_owned()),
        None => contents,
    })
}

/// md RAID superblocks kept near the end of a member of `len` bytes (`tail` is read from
/// `tail_start`): 0.90's 64 KiB before the last 64 KiB boundary, 1.0's 8 KiB before the end
/// (4 KiB aligned).
fn tail_signature(len: u64, tail_start: u64, tail: &[u8]) -> Option<&'static str> {
    const MD_MAGIC: [u8; 4] = [0xfc, 0x4e, 0x2b, 0xa9];
    let md_090 = (len & !0xffff).checked_sub(0x10000);
    let md_10 = len.checked_sub(8192).map(|at| at & !0xfff);
    [md_090, md_10]
        .into_iter()
        .flatten()
        .filter_map(|at| at.checked_sub(tail_start))
        .any(|at| tail.get(at as usize..at as usize + 4) == Some(&MD_MAGIC[..]))
        .then_some("a Linux md RAID member (superblock at the end)")
}

fn classify(head: &[u8]) -> DriveContents {
    if head.starts_with(MAGIC) {
        let page = &head[..head.len().min(SUPERBLOCK_LEN)];
        return match Superblock::probe(page, "the drive") {
            Ok(Probe::Formatted(sb)) => DriveContents::Memkv {
                store_id: sb.store_id,
                drive_index: sb.drive_index,
                drive_count: sb.drive_count,
                block_size: sb.block_size,
            },
            Ok(Probe::Blank) => DriveContents::Blank,
            Err(e) => DriveContents::UnreadableMemkv(e.to_string()),
        };
    }
    if let Some(name) = signature(head) {
        return DriveContents::Foreign(name.to_owned());
    }
    // Anything written there (an md RAID member keeps its first 4 KiB zero, a filesystem
    // unknown here may too) is something formatting would destroy.
    if head.iter().all(|&b| b == 0) {
        DriveContents::Blank
    } else {
        DriveContents::Foreign("data that is not a memkv drive".to_owned())
    }
}

/// Known on-disk signatures (offset, bytes, what they mean), as blkid finds them.
const SIGNATURES: &[(usize, &[u8], &str)] = &[
    (1080, &[0x53, 0xef], "an ext2/3/4 filesystem"),
    (0, b"XFSB", "an XFS filesystem"),
    (0x10040, b"_BHRfS_M", "a btrfs filesystem"),
    (4086, b"SWAPSPACE2", "a swap area"),
    (4086, b"SWAP-SPACE", "a swap area"),
    (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
    (512, b"EFI PART", "a GPT partition table"),
    // With 4 KiB logical sectors.
    (4096, b"EFI PART", "a GPT partition table"),
    (0, b"\x7fELF", "an ELF file"),
    (4096, &[0xfc, 0x4e, 0x2b, 0xa9], "a Linux md RAID member"),
    (0, &[0xfc, 0x4e, 0x2b, 0xa9], "a Linux md RAID member"),
    (512, b"LABELONE", "an LVM physical volume"),
];

fn signature(head: &[u8]) -> Option<&'static str> {
    let found = SIGNATURES
        .iter()
        .find(|(at, magic, _)| head.get(*at..*at + magic.len()) == Some(*magic))
        .map(|(_, _, name)| *name);
    // An MBR: the boot signature with a partition entry in use.
    found.or_else(|| {
        let mbr =
            head.get(510..512) == Some(&[0x55, 0xaa]) && head[446..510].iter().any(|&b| b != 0);
        mbr.then_some("an MBR partition table")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut head = vec![0u8; INSPECTED];
        head[at..at + bytes.len()].copy_from_slice(bytes);
        head
    }

    #[test]
    fn names_what_it_finds() {
        assert_eq!(classify(&vec![0; INSPECTED]), DriveContents::Blank);
        assert_eq!(classify(&[]), DriveContents::Blank);
        for (at, magic, name) in SIGNATURES {
            assert_eq!(
                classify(&with(*at, magic)),
                DriveContents::Foreign((*name).to_owned())
            );
        }
        let mut mbr = with(510, &[0x55, 0xaa]);
        mbr[450] = 0x83;
        assert_eq!(
            classify(&mbr),
            DriveContents::Foreign("an MBR partition table".into())
        );
        for at in [5, 5000, INSPECTED - 1] {
            assert_eq!(
                classify(&with(at, b"x")),
                DriveContents::Foreign("data that is not a memkv drive".into()),
                "a byte at {at}"
            );
        }
        assert!(matches!(
            classify(&with(0, MAGIC)),
            DriveContents::UnreadableMemkv(_)
        ));
    }

    #[test]
    fn finds_md_superblocks_at_the_end() {
        let len: u64 = 64 << 20;
        let tail_start = len - INSPECTED as u64;
        for at in [(len & !0xffff) - 0x10000, (len - 8192) & !0xfff] {
            let tail = with((at - tail_start) as usize, &[0xfc, 0x4e, 0x2b, 0xa9]);
            assert!(
                tail_signature(len, tail_start, &tail).is_some(),
                "md at {at}"
            );
        }
        assert_eq!(tail_signature(len, tail_start, &vec![0; INSPECTED]), None);
    }
}
