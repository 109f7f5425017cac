//! Power loss while several writers commit at once, so that group commits hold several puts
//! and deletes of different keys, their bytes written in parallel. Each writer thread owns its
//! own keys (key % WRITERS), so each key's history is one thread's sequence; the power is cut
//! at a seeded step, and the reopened store must hold, for every key, what its writer last had
//! acknowledged or what the writer's one unacknowledged operation made of it. The seed fixes
//! the workload and the cut, not the threads' interleaving, so a failure prints the seed and
//! the states it found rather than promising an exact replay.

use std::collections::HashMap;

use memkv_store::{Store, StoreError};

use crate::common::fault_drive::{Loss, Power};
use crate::common::rng::Rng;
use crate::sim::{
    DRIVE_BYTES, DRIVES, KEYS, MAX_STEPS, Mode, Op, content, drives_on, key_bytes, open,
};

const WRITERS: u64 = 4;

/// One writer's view: what each of its keys holds as acknowledged, and the operation that
/// failed when the power went (it may or may not have landed).
#[derive(Default)]
struct Writer {
    acked: HashMap<u64, Option<(u64, usize)>>,
    in_flight: Option<Op>,
    acknowledged: u64,
}

fn write_until_cut(store: &Store, power: &Power, me: u64, seed: u64, writer: &mut Writer) {
    let mut rng = Rng(seed ^ me.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut version = 0;
    while !power.is_cut() {
        let key = me + WRITERS * rng.below(KEYS / WRITERS);
        let op = if rng.below(5) == 0 {
            Op::Delete { key }
        } else {
            version += 1;
            let len = match rng.below(4) {
                0 => rng.below(200 << 10) as usize,
                _ => rng.below(16 << 10) as usize,
            };
            Op::Put { key, version, len }
        };
        let done = match op {
            Op::Put { key, version, len } => {
                store.put(&key_bytes(key), &content(key, version, len))
            }
            Op::Delete { key } => store.delete(&key_bytes(key)).map(|_| ()),
        };
        match done {
            Ok(()) => {
                writer.acked.insert(key, op.outcome());
                writer.acknowledged += 1;
            }
            Err(StoreError::Full(_)) if !power.is_cut() => {}
            Err(_) if power.is_cut() => {
                writer.in_flight = Some(op);
                return;
            }
            Err(e) => panic!("writer {me}: {op:?} failed with the power on: {e}"),
        }
    }
}

/// Runs `crashes` lives of concurrent writers; returns the acknowledged operations.
pub fn run(seed: u64, mode: Mode, crashes: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut images = vec![vec![0; DRIVE_BYTES]; DRIVES];
    let mut acked: HashMap<u64, Option<(u64, usize)>> = HashMap::new();
    let mut total = 0;
    for crash in 0..crashes {
        let context = format!("MEMKV_POWER_LOSS_SEED={seed} ({mode:?} mode, crash {crash})");
        let power = Power::cut_at(rng.below(3 * MAX_STEPS));
        let drives = drives_on(std::mem::take(&mut images), mode.sector(), &power);
        let life_seed = rng.next();
        let mut writers: Vec<Writer> = (0..WRITERS).map(|_| Writer::default()).collect();
        match open(mode, &drives) {
            Ok(store) => {
                std::thread::scope(|s| {
                    for (me, w) in writers.iter_mut().enumerate() {
                        let (store, power) = (&store, &power);
                        s.spawn(move || write_until_cut(store, power, me as u64, life_seed, w));
                    }
                });
            }
            Err(_) if power.is_cut() => {}
            Err(e) => panic!("{context}: open failed with the power on: {e}"),
        }
        let loss = Loss::ALL[rng.below(Loss::ALL.len() as u64) as usize];
        images = drives
            .iter()
            .map(|d| d.after_power_loss(loss, 0, &mut rng))
            .collect();

        let power = Power::cut_at(u64::MAX);
        let drives = drives_on(std::mem::take(&mut images), mode.sector(), &power);
        let store = open(mode, &drives)
            .unwrap_or_else(|e| panic!("{context}: reopen after a power loss refused: {e}"));
        let mut buf = Vec::new();
        for w in &writers {
            acked.extend(w.acked.iter().map(|(&k, &v)| (k, v)));
            total += w.acknowledged;
        }
        for key in 0..KEYS {
            let got = store
                .read_into(&key_bytes(key), &mut buf)
                .unwrap_or_else(|e| panic!("{context}: read key {key}: {e}"));
            let holds = |state: Option<(u64, usize)>| match (state, got) {
                (None, None) => true,
                (Some((v, len)), Some(_)) => buf == content(key, v, len),
                _ => false,
            };
            let want = acked.get(&key).copied().flatten();
            if holds(want) {
                continue;
            }
            let in_flight = writers[(key % WRITERS) as usize].in_flight;
            let landed = in_flight.filter(|op| op.key() == key).map(Op::outcome);
            match landed {
                Some(state) if holds(state) => {
                    acked.insert(key, state);
                }
                _ => panic!(
                    "{context}: key {key} read {:?} ({} bytes); acknowledged {want:?}, its \
                     writer's operation in flight {in_flight:?}",
                    got,
                    buf.len()
                ),
            }
        }
        let stats = store.stats();
        assert_eq!(
            stats.checksum_failures, 0,
            "{context}: a corrupt value reached a read"
        );
        let live = acked.values().filter(|s| s.is_some()).count() as u64;
        assert_eq!(
            stats.blocks, live,
            "{context}: values nobody wrote are visible"
        );
        store
            .close()
            .unwrap_or_else(|e| panic!("{context}: close: {e}"));
        drop(store);
        images = drives.iter().map(|d| d.current_image()).collect();
    }
    total
}
