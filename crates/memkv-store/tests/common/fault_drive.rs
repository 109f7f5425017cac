//! TEST DOUBLE: a simulated drive that injects the faults a real one can have, behind the
//! store's drive seam (`memkv_store::DriveIo`, `Store::open_on_drives`). Never used outside
//! tests.
//!
//! It keeps two images: `durable`, what the medium holds for certain, and `current`, what a
//! reader sees (durable plus every write since the last sync, as a page cache or a drive's
//! volatile cache would hold them). Each write is recorded as the whole sectors it touched,
//! with their contents after the write, because a drive persists whole sectors. Then:
//!
//! * **Power loss**: the shared [`Power`] fails every I/O from a chosen write or sync on, and
//!   [`FaultDrive::after_power_loss`] builds what survives: the durable image plus any subset
//!   of the unsynced sector writes ([`Loss`]), with bits flipped in sectors that were being
//!   written (a sector torn mid-write reads back as garbage).
//! * **Media damage**: [`FaultDrive::flip_durable_bit`] flips a bit of a synced sector.
//! * **Bad sectors**: [`FaultDrive::fail_range`] makes reads or writes touching a byte range
//!   fail with EIO, as a drive with unreadable or unwritable sectors does.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::{fmt, io};

use memkv_store::DriveIo;

use super::rng::Rng;

/// The power supply shared by one store's drives: every write and sync is one step, and from
/// step `cut_at` on every I/O (reads too) fails, as if the machine had lost power there.
pub struct Power {
    steps: AtomicU64,
    cut_at: AtomicU64,
}

impl Power {
    /// Power that fails at step `cut_at` (`u64::MAX`: never).
    pub fn cut_at(cut_at: u64) -> Arc<Power> {
        Arc::new(Power {
            steps: AtomicU64::new(0),
            cut_at: AtomicU64::new(cut_at),
        })
    }

    pub fn is_cut(&self) -> bool {
        self.steps.load(Ordering::Acquire) >= self.cut_at.load(Ordering::Acquire)
    }

    /// Writes and syncs done (or refused) so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Acquire)
    }

    fn step(&self) -> io::Result<()> {
        let n = self.steps.fetch_add(1, Ordering::AcqRel);
        if n >= self.cut_at.load(Ordering::Acquire) {
            return Err(power_lost());
        }
        Ok(())
    }

    fn check(&self) -> io::Result<()> {
        if self.is_cut() {
            return Err(power_lost());
        }
        Ok(())
    }
}

fn power_lost() -> io::Error {
    io::Error::other("simulated power loss")
}

/// Which unsynced sector writes survive a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// None: the medium holds exactly what was synced.
    Everything,
    /// All of them, in order (the cache was written back just before the power went).
    Nothing,
    /// Each sector write independently, in order per sector (the device reorders its cache).
    RandomSectors,
    /// Writes in issue order up to a random one, of which a random prefix of sectors lands
    /// (a write torn at a sector boundary); nothing after it.
    TornTail,
}

impl Loss {
    pub const ALL: [Loss; 4] = [
        Loss::Everything,
        Loss::Nothing,
        Loss::RandomSectors,
        Loss::TornTail,
    ];
}

/// Which requests a failing range refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failing {
    Reads,
    Writes,
}

struct SectorWrite {
    sector: u64,
    bytes: Vec<u8>,
}

struct Media {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Since the last sync, in issue order; one entry per sector per write.
    unsynced: Vec<(usize, SectorWrite)>,
    writes: usize,
    failing: Vec<(Range<u64>, Failing)>,
    /// Syncs fail with EIO (a dying device fails its flushes as well as its writes).
    syncs_fail: bool,
    failed_requests: u64,
}

pub struct FaultDrive {
    name: PathBuf,
    sector: usize,
    power: Arc<Power>,
    media: Mutex<Media>,
}

impl fmt::Debug for FaultDrive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FaultDrive({}, {} B sectors)",
            self.name.display(),
            self.sector
        )
    }
}

impl FaultDrive {
    /// A drive named `name` holding `image` (its length is the drive's), torn at `sector`-byte
    /// granularity (512 or 4096), powered by `power`.
    pub fn new(name: &str, image: Vec<u8>, sector: usize, power: Arc<Power>) -> Arc<FaultDrive> {
        assert!(
            image.len() % sector == 0,
            "{name}: image is not whole sectors"
        );
        Arc::new(FaultDrive {
            name: PathBuf::from(name),
            sector,
            power,
            media: Mutex::new(Media {
                current: image.clone(),
                durable: image,
                unsynced: Vec::new(),
                writes: 0,
                failing: Vec::new(),
                syncs_fail: false,
                failed_requests: 0,
            }),
        })
    }

    fn media(&self) -> std::sync::MutexGuard<'_, Media> {
        self.media.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every sync fail with EIO from now on (nothing more becomes durable).
    pub fn fail_syncs(&self) {
        self.media().syncs_fail = true;
    }

    /// Makes requests of kind `kind` that touch `range` fail with EIO from now on.
    pub fn fail_range(&self, range: Range<u64>, kind: Failing) {
        self.media().failing.push((range, kind));
    }

    /// Requests refused because they touched a failing range.
    pub fn failed_requests(&self) -> u64 {
        self.media().failed_requests
    }

    /// What a reader sees now (synced or not): the image a clean shutdown leaves.
    pub fn current_image(&self) -> Vec<u8> {
        self.media().current.clone()
    }

    /// Sectors written since the last sync.
    pub fn unsynced_sectors(&self) -> usize {
        self.media().unsynced.len()
    }

    /// The image that survives a power loss now: durable sectors plus the unsynced sector
    /// writes `loss` keeps, then one bit flipped in each of `torn_garbage` of the sectors
    /// that were being written (chosen at random; none if nothing was unsynced).
    pub fn after_power_loss(&self, loss: Loss, torn_garbage: usize, rng: &mut Rng) -> Vec<u8> {
        let m = self.media();
        let mut image = m.durable.clone();
        let land = |image: &mut Vec<u8>, w: &SectorWrite| {
            let at = w.sector as usize * self.sector;
            image[at..at + self.sector].copy_from_slice(&w.bytes);
        };
        match loss {
            Loss::Everything => {}
            Loss::Nothing => m.unsynced.iter().for_each(|(_, w)| land(&mut image, w)),
            Loss::RandomSectors => m
                .unsynced
                .iter()
                .filter(|_| rng.below(2) == 0)
                .for_each(|(_, w)| land(&mut image, w)),
            Loss::TornTail => {
                if let Some((first, _)) = m.unsynced.first() {
                    let last = m.unsynced.last().map_or(*first, |(n, _)| *n);
                    let torn = first + rng.below((last - first + 1) as u64) as usize;
                    let mut kept_of_torn = None;
                    for (n, w) in &m.unsynced {
                        if *n < torn {
                            land(&mut image, w);
                        } else if *n == torn {
                            let sectors = m.unsynced.iter().filter(|(k, _)| *k == torn).count();
                            let keep = *kept_of_torn.get_or_insert(rng.below(sectors as u64 + 1));
                            if keep > 0 {
                                kept_of_torn = Some(keep - 1);
                                land(&mut image, w);
                            }
                        }
                    }
                }
            }
        }
        if !m.unsynced.is_empty() {
            for _ in 0..torn_garbage {
                let (_, w) = &m.unsynced[rng.below(m.unsynced.len() as u64) as usize];
                let bit = rng.below(self.sector as u64 * 8) as usize;
                image[w.sector as usize * self.sector + bit / 8] ^= 1 << (bit % 8);
            }
        }
        image
    }

    /// Flips one bit of the synced sector holding byte `at` (media damage after the fact).
    pub fn flip_durable_bit(&self, at: u64, bit: u8) {
        let mut m = self.media();
        m.durable[at as usize] ^= 1 << (bit % 8);
        m.current[at as usize] ^= 1 << (bit % 8);
    }

    fn refuse_failing(
        &self,
        m: &mut Media,
        offset: u64,
        len: usize,
        kind: Failing,
    ) -> io::Result<()> {
        let end = offset + len as u64;
        let hit = m
            .failing
            .iter()
            .any(|(r, k)| *k == kind && r.start < end && offset < r.end);
        if hit {
            m.failed_requests += 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    fn check_range(&self, offset: u64, len: usize, m: &Media) -> io::Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > m.current.len() as u64)
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: {len} bytes at {offset} run past its end ({} bytes)",
                    self.name.display(),
                    m.current.len()
                ),
            ));
        }
        Ok(())
    }
}

impl DriveIo for FaultDrive {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.power.check()?;
        let mut m = self.media();
        self.check_range(offset, buf.len(), &m)?;
        self.refuse_failing(&mut m, offset, buf.len(), Failing::Reads)?;
        buf.copy_from_slice(&m.current[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.power.step()?;
        let mut m = self.media();
        self.check_range(offset, buf.len(), &m)?;
        self.refuse_failing(&mut m, offset, buf.len(), Failing::Writes)?;
        let at = offset as usize;
        m.current[at..at + buf.len()].copy_from_slice(buf);
        let first = at / self.sector;
        let end = (at + buf.len()).div_ceil(self.sector);
        let n = m.writes;
        m.writes += 1;
        for s in first..end {
            let bytes = m.current[s * self.sector..(s + 1) * self.sector].to_vec();
            let write = SectorWrite {
                sector: s as u64,
                bytes,
            };
            m.unsynced.push((n, write));
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.power.step()?;
        let mut m = self.media();
        if m.syncs_fail {
            m.failed_requests += 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let Media {
            durable, unsynced, ..
        } = &mut *m;
        for (_, w) in unsynced.drain(..) {
            let at = w.sector as usize * self.sector;
            durable[at..at + self.sector].copy_from_slice(&w.bytes);
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.media().current.len() as u64
    }

    fn path(&self) -> &Path {
        &self.name
    }
}

/// Simulated drives `sim-drive-0`, `sim-drive-1`, ... holding `images`, on one power supply
/// that is never cut; also as the `DriveIo`s a store opens on.
pub fn sim_drives(images: Vec<Vec<u8>>) -> (Vec<Arc<FaultDrive>>, Vec<Arc<dyn DriveIo>>) {
    let power = Power::cut_at(u64::MAX);
    let drives: Vec<Arc<FaultDrive>> = images
        .into_iter()
        .enumerate()
        .map(|(i, img)| FaultDrive::new(&format!("sim-drive-{i}"), img, 4096, Arc::clone(&power)))
        .collect();
    let io = drives
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn DriveIo>)
        .collect();
    (drives, io)
}
