//! The I/O seam: everything above this trait addresses drives by byte offset only, so a direct
//! NVMe backend (io_uring + O_DIRECT) can slot in without touching the index or journal.
//! Callers already keep journal writes page-aligned; data writes start at extent boundaries.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use crate::arena::{BufferLease, DriveMap, InFlight, IncrementalXxh3};

/// Positional, synchronous block I/O on one drive.
pub(crate) trait ExtentIo: Send + Sync {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Copies the bytes at `offset` into `value[range]` and feeds them to `hash` in the same
    /// pass, for drives that can hand out their bytes without a separate copy (a mapped file).
    /// `Ok(false)`: not possible here (nothing was copied); use [`Self::read_at`]. A direct
    /// (O_DIRECT) drive keeps this default.
    fn read_hashed_at(
        &self,
        _offset: u64,
        _value: &mut [u8],
        _range: Range<usize>,
        _hash: &mut IncrementalXxh3,
    ) -> io::Result<bool> {
        Ok(false)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// A registered buffer for a caller to fill and hand to [`Self::write_leased`], so bytes
    /// arriving from a socket land where the drive writes them from. `None`: none to spare
    /// now, or the drive has no registered buffers (only a direct drive has).
    fn try_lease(&self) -> Option<BufferLease> {
        None
    }
    /// Starts writing the first `len` bytes of `lease` (a multiple of 4 KiB) at `offset`.
    fn write_leased(&self, _lease: BufferLease, _offset: u64, _len: usize) -> io::Result<InFlight> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this drive has no registered buffers",
        ))
    }
    /// Starts reading `len` bytes (a multiple of 4 KiB) at `offset` into the front of `lease`.
    fn read_leased(&self, _lease: BufferLease, _offset: u64, _len: usize) -> io::Result<InFlight> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this drive has no registered buffers",
        ))
    }
    /// Makes every completed write durable (data only; metadata as needed to read it back).
    fn sync(&self) -> io::Result<()>;
    fn len(&self) -> u64;
    fn path(&self) -> &Path;
    /// Tells the drive `len` bytes at `offset` hold nothing (BLKDISCARD on a block device, a
    /// punched hole in a file); they read as zeros afterwards.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()>;
}

/// A drive the store is opened on instead of the paths in its config
/// ([`crate::Store::open_on_drives`]): positional, synchronous block I/O by byte offset.
///
/// This is the seam the fault-injection tests put a simulated drive behind (power loss, torn
/// sectors, bit flips, failing extents); any other backing (a remote volume, a device the
/// store should not open itself) fits it too. The store keeps its own layout on it: drive 0
/// holds the superblock and the journal, every drive holds extents.
pub trait DriveIo: Send + Sync {
    /// Fills `buf` from `offset`, or fails (the drive then goes offline for this store).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at `offset`; not durable until [`Self::sync`] returns.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable.
    fn sync(&self) -> io::Result<()>;
    /// Usable bytes.
    fn size(&self) -> u64;
    /// The name the store uses for this drive in errors, logs and stats.
    fn path(&self) -> &Path;
    /// Drops `len` bytes at `offset` (freed extents, in batches). The default refuses, and the
    /// store then stops asking this drive.
    fn discard(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this drive takes no discards",
        ))
    }
}

/// An injected [`DriveIo`] seen through the store's own trait (no one-pass hashing reads).
pub(crate) struct InjectedDrive(pub std::sync::Arc<dyn DriveIo>);

impl ExtentIo for InjectedDrive {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, buf)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn len(&self) -> u64 {
        self.0.size()
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0.discard(offset, len)
    }
}

/// A drive that is a regular file, accessed through the page cache: written with `pwrite`,
/// read through a shared mapping where the kernel allows (one pass that copies and hashes),
/// else with `pread`.
pub(crate) struct FileDrive {
    file: File,
    block_device: bool,
    map: Option<DriveMap>,
    path: PathBuf,
    len: u64,
}

impl FileDrive {
    /// Opens (creating if needed) `path`. `size`: grow the file to this length; `None` keeps
    /// a non-empty file's length or makes an empty one `default_size` bytes (sparse).
    /// `mapped`: read through a mapping where the kernel allows; else always `pread`.
    pub fn open(
        path: &Path,
        size: Option<u64>,
        default_size: u64,
        mapped: bool,
    ) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let block_device = file.metadata()?.file_type().is_block_device();
        let len = drive_len(&file, size, default_size)?;
        Ok(Self {
            map: if mapped {
                DriveMap::new(&file, len)
            } else {
                None
            },
            file,
            block_device,
            path: path.to_owned(),
            len,
        })
    }
}

impl ExtentIo for FileDrive {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn read_hashed_at(
        &self,
        offset: u64,
        value: &mut [u8],
        range: Range<usize>,
        hash: &mut IncrementalXxh3,
    ) -> io::Result<bool> {
        match &self.map {
            Some(m) => m.copy_hashed(offset, value, range, hash),
            None => Ok(false),
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        crate::arena::discard_range(&self.file, self.block_device, offset, len)
    }
}

/// The length a drive is used at. A block device keeps its size (`size`, when given, must not
/// exceed it; a block device's metadata says 0 and it cannot be resized, so file mode could not
/// open one); a regular file is created at `size` (else `default_size`), or grown to `size`.
pub(crate) fn drive_len(file: &File, size: Option<u64>, default_size: u64) -> io::Result<u64> {
    if file.metadata()?.file_type().is_block_device() {
        use std::io::{Seek, SeekFrom};
        // Seeking to the end of a block device gives its size without an ioctl.
        let mut f = file;
        let device = f.seek(SeekFrom::End(0))?;
        f.seek(SeekFrom::Start(0))?;
        return match size {
            Some(s) if s > device => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("size {s} is larger than the device ({device} bytes)"),
            )),
            Some(s) => Ok(s),
            None => Ok(device),
        };
    }
    let current = file.metadata()?.len();
    let len = match size {
        Some(s) => s.max(current),
        None if current == 0 => default_size,
        None => current,
    };
    if len != current {
        file.set_len(len)?;
    }
    Ok(len)
}
