//! The power-loss simulation behind tests/power_loss.rs: a deterministic workload runs on a
//! store opened on simulated drives ([`super::fault_drive`]) until the power is cut at a
//! seeded step; the drives keep what a power loss leaves; the store is reopened and every key
//! is checked against what was acknowledged. One seed replays a whole run.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use memkv_store::{
    DriveConfig, DriveIo, EvictionPolicy, Store, StoreConfig, StoreError, StoreMode,
};

use crate::common::fault_drive::{FaultDrive, Loss, Power};
use crate::common::rng::Rng;

pub const SEED_ENV: &str = "MEMKV_POWER_LOSS_SEED";
pub const CRASHES_ENV: &str = "MEMKV_POWER_LOSS_CRASHES";

pub const DRIVES: usize = 2;
const BLOCK: u64 = 64 << 10;
/// 2 MiB of superblock and journal, then 24 extents of 64 KiB.
pub const DRIVE_BYTES: usize = (2 << 20) + 24 * BLOCK as usize;
pub const KEYS: u64 = 12;
/// Writes and syncs one life may reach before its power is cut (about a dozen puts).
pub const MAX_STEPS: u64 = 80;

/// What a crash does to the drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Unsynced sector writes are lost or kept, each sector old or new, never garbage.
    PowerLoss,
    /// As `PowerLoss`, and one or two sectors that were being written read back with a bit
    /// flipped (a sector torn inside itself).
    TornGarbage,
    /// After a clean shutdown, one bit flips in a synced sector (media damage).
    MediaDamage,
}

/// Which drive-backed mode the simulated drives stand in for: file mode's page cache over a
/// 512-byte-sector drive tears at 512 B, direct mode's 4 KiB-aligned writes at 4 KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    File,
    Direct,
}

impl Mode {
    pub fn sector(self) -> usize {
        match self {
            Mode::File => 512,
            Mode::Direct => 4096,
        }
    }
}

/// The outcome table of a run.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub crashes: u64,
    pub cut_while_opening: u64,
    pub acknowledged_ops: u64,
    pub in_flight_landed: u64,
    pub in_flight_lost: u64,
    /// Acknowledged values that read back missing after a crash.
    pub lost_acknowledged: u64,
    /// Keys that read back an older acknowledged value.
    pub rolled_back: u64,
    /// Keys whose bytes match no value ever written to them (never allowed).
    pub corrupt_served: u64,
    /// Reads that found a value failing its checksum (counted and dropped, never served).
    pub corrupt_detected: u64,
    /// Reopens refused with an error (the first messages are kept).
    pub refused: u64,
    pub refusals: Vec<String>,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = [
            ("crashes simulated", self.crashes),
            ("  of which cut while opening", self.cut_while_opening),
            ("acknowledged operations", self.acknowledged_ops),
            ("in-flight operations that landed", self.in_flight_landed),
            ("in-flight operations lost", self.in_flight_lost),
            ("lost acknowledged writes", self.lost_acknowledged),
            ("rolled back to an older value", self.rolled_back),
            ("corrupt values served", self.corrupt_served),
            ("corrupt values detected and dropped", self.corrupt_detected),
            ("reopens refused", self.refused),
        ];
        for (name, n) in rows {
            writeln!(f, "| {name:<36} | {n:>9} |")?;
        }
        for r in &self.refusals {
            writeln!(f, "refused: {r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Put { key: u64, version: u64, len: usize },
    Delete { key: u64 },
}

impl Op {
    pub fn key(self) -> u64 {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }

    /// What the key holds once this operation has landed: a value's (version, length), or none.
    pub fn outcome(self) -> Option<(u64, usize)> {
        match self {
            Op::Put { version, len, .. } => Some((version, len)),
            Op::Delete { .. } => None,
        }
    }
}

/// Every value a key ever held, and what it holds as acknowledged.
#[derive(Default)]
struct Model {
    current: HashMap<u64, Option<(u64, usize)>>,
    history: HashMap<u64, Vec<(u64, usize)>>,
}

impl Model {
    fn apply(&mut self, op: Op) {
        self.current.insert(op.key(), op.outcome());
        if let Some(value) = op.outcome() {
            self.history.entry(op.key()).or_default().push(value);
        }
    }

    fn acked(&self, key: u64) -> Option<(u64, usize)> {
        self.current.get(&key).copied().flatten()
    }
}

/// Deterministic bytes for (key, version, len).
pub fn content(key: u64, version: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(key.wrapping_mul(1_000_003) ^ version.rotate_left(17));
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn key_bytes(k: u64) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

fn config(mode: Mode) -> StoreConfig {
    let drives: Vec<DriveConfig> = (0..DRIVES)
        .map(|i| DriveConfig {
            path: format!("sim-drive-{i}").into(),
            size: None,
        })
        .collect();
    let mut cfg = match mode {
        Mode::File => StoreConfig::file(drives),
        Mode::Direct => StoreConfig::direct(drives),
    };
    match &mut cfg.mode {
        StoreMode::File { block_size, .. } | StoreMode::Direct { block_size, .. } => {
            *block_size = BLOCK
        }
        StoreMode::Memory { .. } => unreachable!("drive-backed modes only"),
    }
    // Acknowledged values must never disappear, so nothing may be evicted.
    cfg.eviction = EvictionPolicy::None;
    cfg
}

pub fn open(mode: Mode, drives: &[Arc<FaultDrive>]) -> memkv_store::Result<Store> {
    let io: Vec<Arc<dyn DriveIo>> = drives
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn DriveIo>)
        .collect();
    Store::open_on_drives(config(mode), io)
}

pub fn drives_on(images: Vec<Vec<u8>>, sector: usize, power: &Arc<Power>) -> Vec<Arc<FaultDrive>> {
    images
        .into_iter()
        .enumerate()
        .map(|(i, img)| FaultDrive::new(&format!("sim-drive-{i}"), img, sector, Arc::clone(power)))
        .collect()
}

/// One simulated machine: a run of crashes over the same drives.
pub struct Simulation {
    pub seed: u64,
    mode: Mode,
    fault: Fault,
    rng: Rng,
    model: Model,
    images: Vec<Vec<u8>>,
    next_version: u64,
    pub tally: Tally,
}

impl Simulation {
    pub fn new(seed: u64, mode: Mode, fault: Fault) -> Self {
        Simulation {
            seed,
            mode,
            fault,
            rng: Rng(seed),
            model: Model::default(),
            images: vec![vec![0; DRIVE_BYTES]; DRIVES],
            next_version: 0,
            tally: Tally::default(),
        }
    }

    fn context(&self) -> String {
        format!(
            "{SEED_ENV}={} replays this ({:?} mode, {:?}, crash {})",
            self.seed, self.mode, self.fault, self.tally.crashes
        )
    }

    /// Runs `crashes` lives, each ended by the run's fault, and checks every reopen.
    pub fn run(&mut self, crashes: u64) {
        for _ in 0..crashes {
            match self.fault {
                Fault::PowerLoss | Fault::TornGarbage => self.crash_once(),
                Fault::MediaDamage => self.damage_once(),
            }
            self.tally.crashes += 1;
        }
    }

    fn crash_once(&mut self) {
        let power = Power::cut_at(self.rng.below(MAX_STEPS));
        let drives = drives_on(std::mem::take(&mut self.images), self.mode.sector(), &power);
        let in_flight = self.live(&drives, &power);
        let loss = Loss::ALL[self.rng.below(Loss::ALL.len() as u64) as usize];
        let garbage = match self.fault {
            Fault::TornGarbage => 1 + self.rng.below(2) as usize,
            _ => 0,
        };
        self.images = drives
            .iter()
            .map(|d| d.after_power_loss(loss, garbage, &mut self.rng))
            .collect();
        self.verify(in_flight);
    }

    fn damage_once(&mut self) {
        // A clean life (it ends by closing the store), then one flipped bit in synced bytes:
        // somewhere in the metadata (superblock and journal) or in a data extent.
        let power = Power::cut_at(u64::MAX);
        let drives = drives_on(std::mem::take(&mut self.images), self.mode.sector(), &power);
        let steps = self.rng.below(MAX_STEPS);
        let in_flight = self.live_for(&drives, &power, steps);
        assert!(
            in_flight.is_none(),
            "{}: an operation failed without a fault",
            self.context()
        );
        let drive = self.rng.below(DRIVES as u64) as usize;
        let at = if self.rng.below(2) == 0 {
            self.rng.below(2 << 20)
        } else {
            self.rng.below(DRIVE_BYTES as u64)
        };
        drives[drive].flip_durable_bit(at, self.rng.below(8) as u8);
        self.images = drives.iter().map(|d| d.current_image()).collect();
        self.verify(None);
    }

    /// Opens the store and runs the workload until the power is cut. Returns the operation
    /// that was in flight then (not acknowledged, so it may or may not have landed).
    fn live(&mut self, drives: &[Arc<FaultDrive>], power: &Arc<Power>) -> Option<Op> {
        self.live_for(drives, power, u64::MAX)
    }

    fn live_for(&mut self, drives: &[Arc<FaultDrive>], power: &Power, ops: u64) -> Option<Op> {
        let store = match open(self.mode, drives) {
            Ok(s) => s,
            Err(e) if power.is_cut() => {
                let _ = e;
                self.tally.cut_while_opening += 1;
                return None;
            }
            Err(e) => panic!("{}: open failed with the power on: {e}", self.context()),
        };
        let mut done = 0;
        while done < ops {
            done += 1;
            let key = self.rng.below(KEYS);
            let op = match self.rng.below(10) {
                0..=6 => {
                    self.next_version += 1;
                    let len = match self.rng.below(20) {
                        0..=13 => self.rng.below(8 << 10) as usize,
                        14..=18 => self.rng.below(BLOCK) as usize,
                        _ => self.rng.below(3 * BLOCK) as usize,
                    };
                    Op::Put {
                        key,
                        version: self.next_version,
                        len,
                    }
                }
                7 | 8 => Op::Delete { key },
                _ => {
                    self.check_read(&store, key, power);
                    continue;
                }
            };
            match self.perform(&store, op) {
                Ok(()) => {
                    self.model.apply(op);
                    self.tally.acknowledged_ops += 1;
                }
                Err(StoreError::Full(_)) if !power.is_cut() => {}
                Err(_) if power.is_cut() => return Some(op),
                Err(e) => panic!("{}: {op:?} failed with the power on: {e}", self.context()),
            }
            if power.is_cut() {
                return None;
            }
        }
        store
            .close()
            .unwrap_or_else(|e| panic!("{}: close: {e}", self.context()));
        None
    }

    fn perform(&mut self, store: &Store, op: Op) -> memkv_store::Result<()> {
        match op {
            Op::Put { key, version, len } => {
                let value = content(key, version, len);
                if self.rng.below(2) == 0 {
                    store.put(&key_bytes(key), &value)
                } else {
                    // Two-phase, in pieces, as a TCP put lands.
                    let mut r = store.allocate(&key_bytes(key), len as u64)?;
                    for (i, piece) in value.chunks(40_000).enumerate() {
                        r.write_at((i * 40_000) as u64, piece)?;
                    }
                    store.commit(r, memkv_store::checksum(&value))
                }
            }
            Op::Delete { key } => store.delete(&key_bytes(key)).map(|_| ()),
        }
    }

    fn check_read(&self, store: &Store, key: u64, power: &Power) {
        let mut buf = Vec::new();
        let got = store.read_into(&key_bytes(key), &mut buf);
        if power.is_cut() {
            return;
        }
        let want = self.model.acked(key);
        let ok = match (&got, want) {
            (Ok(None), None) => true,
            (Ok(Some(_)), Some((v, len))) => buf == content(key, v, len),
            _ => false,
        };
        assert!(
            ok,
            "{}: key {key} read {got:?} while running, acknowledged {want:?}",
            self.context()
        );
    }

    /// Reopens the drives with the power on and checks every key.
    fn verify(&mut self, in_flight: Option<Op>) {
        let power = Power::cut_at(u64::MAX);
        let drives = drives_on(std::mem::take(&mut self.images), self.mode.sector(), &power);
        let store = match open(self.mode, &drives) {
            Ok(s) => s,
            Err(e) => {
                let strict = self.fault == Fault::PowerLoss;
                assert!(
                    !strict,
                    "{}: reopen after a power loss refused: {e}",
                    self.context()
                );
                self.refused(e, &drives);
                return;
            }
        };
        let mut alternative = Model {
            current: self.model.current.clone(),
            history: HashMap::new(),
        };
        if let Some(op) = in_flight {
            alternative.apply(op);
        }
        let mut landed = false;
        let mut buf = Vec::new();
        for key in 0..KEYS {
            let got = store
                .read_into(&key_bytes(key), &mut buf)
                .unwrap_or_else(|e| panic!("{}: read key {key}: {e}", self.context()));
            let holds = |state: Option<(u64, usize)>| match (state, got) {
                (None, None) => true,
                (Some((v, len)), Some(_)) => buf == content(key, v, len),
                _ => false,
            };
            if holds(self.model.acked(key)) {
                continue;
            }
            if holds(alternative.acked(key)) {
                landed = true;
                continue;
            }
            let older = got.is_some()
                && self
                    .model
                    .history
                    .get(&key)
                    .is_some_and(|h| h.iter().any(|&(v, len)| buf == content(key, v, len)));
            let what = if got.is_none() {
                self.tally.lost_acknowledged += 1;
                "lost an acknowledged value"
            } else if older {
                self.tally.rolled_back += 1;
                "rolled back to an older value"
            } else {
                self.tally.corrupt_served += 1;
                "served bytes never written to it"
            };
            assert!(
                self.fault != Fault::PowerLoss,
                "{}: key {key} {what}: acknowledged {:?}, in flight {in_flight:?}",
                self.context(),
                self.model.acked(key)
            );
            // Damage may take a value or roll it back; the model follows what survived.
            let survived = if got.is_none() {
                None
            } else {
                self.model.history[&key]
                    .iter()
                    .copied()
                    .find(|&(v, len)| buf == content(key, v, len))
            };
            self.model.current.insert(key, survived);
        }
        match (in_flight, landed) {
            (Some(op), true) => {
                self.model.apply(op);
                self.tally.in_flight_landed += 1;
            }
            (Some(_), false) => self.tally.in_flight_lost += 1,
            (None, _) => {}
        }
        let stats = store.stats();
        self.tally.corrupt_detected += stats.checksum_failures;
        if self.fault == Fault::PowerLoss {
            assert_eq!(
                stats.checksum_failures,
                0,
                "{}: a corrupt value reached a read",
                self.context()
            );
            let live = self.model.current.values().filter(|s| s.is_some()).count() as u64;
            assert_eq!(
                stats.blocks,
                live,
                "{}: values nobody wrote are visible",
                self.context()
            );
        }
        store
            .close()
            .unwrap_or_else(|e| panic!("{}: close: {e}", self.context()));
        drop(store);
        self.images = drives.iter().map(|d| d.current_image()).collect();
        self.corrupt_served_is_zero();
    }

    fn corrupt_served_is_zero(&self) {
        assert_eq!(
            self.tally.corrupt_served,
            0,
            "{}: a key served bytes never written to it",
            self.context()
        );
    }

    /// A refused reopen must say what it refused; the drives are then wiped, as an operator
    /// would (`memkv setup --force`), and the run goes on from an empty store.
    fn refused(&mut self, e: StoreError, drives: &[Arc<FaultDrive>]) {
        let msg = e.to_string();
        assert!(
            msg.contains("journal") || msg.contains("superblock") || msg.contains("drive"),
            "{}: a refusal must name what it refused: {msg}",
            self.context()
        );
        self.tally.refused += 1;
        if self.tally.refusals.len() < 4 {
            self.tally.refusals.push(msg);
        }
        let lost = self.model.current.values().filter(|s| s.is_some()).count() as u64;
        self.tally.lost_acknowledged += lost;
        self.model.current.clear();
        self.images = vec![vec![0; DRIVE_BYTES]; drives.len()];
    }
}
