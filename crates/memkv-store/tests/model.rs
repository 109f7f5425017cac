//! Model-based property tests: random operation sequences run against the store and against a
//! plain `HashMap`, in both modes; every observation must agree.

mod common;

use std::collections::HashMap;

use common::{TempDir, file_config};
use memkv_store::{Reservation, Store, StoreConfig, StoreError, checksum};
use proptest::prelude::*;

const KEYS: u8 = 6;
const LENS: [usize; 7] = [0, 1, 100, 4096, 70_000, 300_000, 1_200_000];

#[derive(Debug, Clone)]
enum Op {
    Put { key: u8, len: usize, seed: u8 },
    Get { key: u8 },
    Delete { key: u8 },
    Allocate { key: u8, len: usize, seed: u8 },
    Commit { slot: usize, good_checksum: bool },
    CommitById { slot: usize },
    Abort { slot: usize },
    Evict,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS;
    let len = prop::sample::select(LENS.to_vec());
    prop_oneof![
        4 => (key.clone(), len.clone(), any::<u8>()).prop_map(|(key, len, seed)| Op::Put { key, len, seed }),
        3 => key.clone().prop_map(|key| Op::Get { key }),
        2 => key.clone().prop_map(|key| Op::Delete { key }),
        2 => (key, len, any::<u8>()).prop_map(|(key, len, seed)| Op::Allocate { key, len, seed }),
        2 => (0..4usize, prop::bool::weighted(0.8)).prop_map(|(slot, good_checksum)| Op::Commit { slot, good_checksum }),
        1 => (0..4usize).prop_map(|slot| Op::CommitById { slot }),
        1 => (0..4usize).prop_map(|slot| Op::Abort { slot }),
        1 => Just(Op::Evict),
        1 => Just(Op::Reopen),
    ]
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

struct Open {
    key: u8,
    bytes: Vec<u8>,
    handle: Option<Reservation>,
    id: u64,
}

fn check_key(store: &Store, model: &HashMap<u8, Vec<u8>>, key: u8) -> Result<(), TestCaseError> {
    let got = store
        .get(&[b'k', key])
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    match (got, model.get(&key)) {
        (None, None) => {}
        (Some(v), Some(m)) => {
            prop_assert!(
                &*v == m.as_slice(),
                "key {key}: bytes differ (len {} vs {})",
                v.len(),
                m.len()
            );
            prop_assert_eq!(v.checksum(), checksum(m));
        }
        (got, want) => prop_assert!(
            false,
            "key {key}: store has {:?}, model has {:?}",
            got.map(|v| v.len()),
            want.map(Vec::len)
        ),
    }
    prop_assert_eq!(store.exists(&[b'k', key]), model.contains_key(&key));
    Ok(())
}

fn run(
    ops: Vec<Op>,
    open_store: &dyn Fn() -> Store,
    can_reopen: bool,
) -> Result<(), TestCaseError> {
    let mut store = open_store();
    let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
    let mut open: Vec<Open> = Vec::new();
    let mut evictions = 0;
    for op in ops {
        match op {
            Op::Put { key, len, seed } => {
                let v = value(len, seed);
                store.put(&[b'k', key], &v).unwrap();
                model.insert(key, v);
                check_key(&store, &model, key)?;
            }
            Op::Get { key } => check_key(&store, &model, key)?,
            Op::Delete { key } => {
                let existed = store.delete(&[b'k', key]).unwrap();
                prop_assert_eq!(existed, model.remove(&key).is_some());
                check_key(&store, &model, key)?;
            }
            Op::Allocate { key, len, seed } => {
                let bytes = value(len, seed);
                let mut r = store.allocate(&[b'k', key], len as u64).unwrap();
                // Write in two pieces, back half first, to exercise out-of-order fills.
                let mid = len / 2;
                r.write_at(mid as u64, &bytes[mid..]).unwrap();
                r.write_at(0, &bytes[..mid]).unwrap();
                let id = r.id();
                open.push(Open {
                    key,
                    bytes,
                    handle: Some(r),
                    id,
                });
                check_key(&store, &model, key)?;
            }
            Op::Commit {
                slot,
                good_checksum,
            } if slot < open.len() => {
                let o = open.remove(slot);
                let sum = if good_checksum {
                    checksum(&o.bytes)
                } else {
                    checksum(&o.bytes) ^ 1
                };
                let res = match o.handle {
                    Some(h) => store.commit(h, sum),
                    None => store.commit_id(o.id, sum),
                };
                match res {
                    Ok(()) => {
                        prop_assert!(good_checksum);
                        model.insert(o.key, o.bytes);
                    }
                    Err(StoreError::ChecksumMismatch { .. }) => prop_assert!(!good_checksum),
                    Err(e) => prop_assert!(false, "commit failed: {e}"),
                }
                check_key(&store, &model, o.key)?;
            }
            Op::CommitById { slot } if slot < open.len() => {
                // Park the handle, then commit remotely by id.
                open[slot].handle = None;
                let o = open.remove(slot);
                store.commit_id(o.id, checksum(&o.bytes)).unwrap();
                model.insert(o.key, o.bytes);
                check_key(&store, &model, o.key)?;
            }
            Op::Abort { slot } if slot < open.len() => {
                let o = open.remove(slot);
                store.abort(o.id).unwrap();
                prop_assert!(matches!(
                    store.commit_id(o.id, 0),
                    Err(StoreError::UnknownReservation(_))
                ));
                check_key(&store, &model, o.key)?;
            }
            Op::Evict => {
                let before: Vec<u8> = model.keys().copied().collect();
                let evicted = store.evict_one().unwrap();
                prop_assert_eq!(evicted, !before.is_empty());
                if evicted {
                    evictions += 1;
                    let gone: Vec<u8> = before
                        .into_iter()
                        .filter(|k| !store.exists(&[b'k', *k]))
                        .collect();
                    prop_assert_eq!(gone.len(), 1, "one eviction removed {:?}", gone);
                    model.remove(&gone[0]);
                }
            }
            Op::Reopen if can_reopen => {
                // Uncommitted reservations do not survive a restart.
                open.clear();
                evictions = 0;
                drop(store);
                store = open_store();
            }
            _ => {}
        }
        let s = store.stats();
        prop_assert_eq!(s.blocks, model.len() as u64);
        prop_assert_eq!(
            s.value_bytes,
            model.values().map(|v| v.len() as u64).sum::<u64>()
        );
        prop_assert_eq!(s.evictions, evictions);
        prop_assert_eq!(s.checksum_failures, 0);
    }
    for key in 0..KEYS {
        check_key(&store, &model, key)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_mode_matches_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops, &|| Store::open(StoreConfig::memory(64 << 20)).unwrap(), false)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn file_mode_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = TempDir::new("model");
        let cfg = file_config(&dir, 2, 24 << 20, 1 << 20);
        run(ops, &|| Store::open(cfg.clone()).unwrap(), true)?;
    }

    #[test]
    fn direct_mode_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = TempDir::on_disk("model-direct");
        let cfg = common::direct_config(&dir, 2, 24 << 20, 1 << 20);
        run(ops, &|| Store::open(cfg.clone()).unwrap(), true)?;
    }
}
