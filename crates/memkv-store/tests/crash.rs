//! Crash safety in file and direct mode: a child process (this test binary re-run with an env var) writes
//! and deletes continuously and reports each acknowledged operation over a pipe; the parent
//! SIGKILLs it at a random moment, reopens the store and checks that every acknowledged value
//! reads back bit-exact, deleted keys stay deleted, and nothing else (apart from the one
//! operation in flight at the kill) is visible. Set MEMKV_CRASH_SEED to replay a run.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rng::{Rng, seed_from_env};
use common::{TempDir, direct_config, file_config};
use memkv_store::{EvictionPolicy, Store, StoreConfig, checksum};

const CHILD_ENV: &str = "MEMKV_CRASH_CHILD";
const KEYS: u64 = 24;
const TIME_BUDGET: Duration = Duration::from_secs(12);
const MIN_ITERATIONS: u64 = 8;

/// Deterministic, self-describing content for (key, version, len).
fn content(key: u64, version: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(key.wrapping_mul(1_000_003) ^ version);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn config(dir: &std::path::Path, direct: bool) -> StoreConfig {
    let dir = TempDir(dir.to_owned());
    let mut cfg = if direct {
        direct_config(&dir, 2, 24 << 20, 256 << 10)
    } else {
        file_config(&dir, 2, 24 << 20, 256 << 10)
    };
    std::mem::forget(dir);
    // Acknowledged values must never disappear, so nothing may be evicted.
    cfg.eviction = EvictionPolicy::None;
    cfg
}

fn key_bytes(k: u64) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

#[test]
#[ignore = "helper process for crash_recovery; runs until killed"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let dir = std::path::PathBuf::from(parts.next().unwrap());
    let seed: u64 = parts.next().unwrap().parse().unwrap();
    let mut version: u64 = parts.next().unwrap().parse().unwrap();
    let direct = parts.next() == Some("direct");
    let store = Store::open(config(&dir, direct)).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    let mut rng = Rng(seed);
    loop {
        let key = rng.next() % KEYS;
        let kb = key_bytes(key);
        if rng.next() % 10 < 7 {
            version += 1;
            let len = match rng.next() % 4 {
                0 => (rng.next() % 4096) as usize,
                1 => (rng.next() % (300 << 10)) as usize,
                _ => (rng.next() % (700 << 10)) as usize,
            };
            let v = content(key, version, len);
            writeln!(out, "B P {key} {version} {len}").unwrap();
            match rng.next() % 3 {
                0 => store.put(&kb, &v).unwrap(),
                // Direct mode: read straight into the drive's buffers, as a TCP put is.
                1 if direct => match store.put_in_place(&kb, len as u64).unwrap() {
                    Some(mut put) => {
                        let mut at = 0;
                        while let Some(piece) = put.next_piece() {
                            piece.copy_from_slice(&v[at..at + piece.len()]);
                            at += piece.len();
                            put.piece_filled();
                        }
                        put.commit(checksum(&v)).unwrap();
                    }
                    None => store.put(&kb, &v).unwrap(),
                },
                _ => {
                    let mut r = store.allocate(&kb, len as u64).unwrap();
                    for (i, chunk) in v.chunks(100_000).enumerate() {
                        r.write_at((i * 100_000) as u64, chunk).unwrap();
                    }
                    store.commit(r, checksum(&v)).unwrap();
                }
            }
            writeln!(out, "A P {key} {version} {len}").unwrap();
        } else {
            writeln!(out, "B D {key}").unwrap();
            store.delete(&kb).unwrap();
            writeln!(out, "A D {key}").unwrap();
        }
    }
}

/// What a key holds: `Some((version, len))` or deleted/never written.
type State = Option<(u64, usize)>;

#[derive(Debug, Clone, Copy)]
enum Logged {
    Put(u64, u64, usize),
    Delete(u64),
}

fn parse(line: &str) -> Option<(bool, Logged)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let acked = match *f.first()? {
        "A" => true,
        "B" => false,
        _ => return None,
    };
    let op = match *f.get(1)? {
        "P" => Logged::Put(f[2].parse().ok()?, f[3].parse().ok()?, f[4].parse().ok()?),
        "D" => Logged::Delete(f[2].parse().ok()?),
        _ => return None,
    };
    Some((acked, op))
}

fn apply(model: &mut HashMap<u64, State>, op: Logged) {
    match op {
        Logged::Put(k, v, len) => model.insert(k, Some((v, len))),
        Logged::Delete(k) => model.insert(k, None),
    };
}

#[test]
fn crash_recovery() {
    crash_recovery_in(false);
}

#[test]
fn crash_recovery_direct() {
    crash_recovery_in(true);
}

fn crash_recovery_in(direct: bool) {
    let seed = seed_from_env("MEMKV_CRASH_SEED");
    eprintln!("crash_recovery: MEMKV_CRASH_SEED={seed}");
    let dir = if direct {
        TempDir::on_disk("crash-direct")
    } else {
        TempDir::new("crash")
    };
    let mode = if direct { "direct" } else { "file" };
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(seed);
    let mut model: HashMap<u64, State> = HashMap::new();
    let started = Instant::now();
    let mut total_acked = 0;
    let mut iteration = 0u64;
    while iteration < MIN_ITERATIONS || started.elapsed() < TIME_BUDGET {
        let ctx = format!("seed={seed} iteration={iteration}");
        let child_seed = rng.next();
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!(
                    "{}|{child_seed}|{}|{mode}",
                    dir.path().display(),
                    (iteration + 1) << 32
                ),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest may print "test crash_child ... " on the same line.
                if line.ends_with("READY") {
                    let _ = ready_tx.send(());
                }
                lines.push(line);
            }
            lines
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{ctx}: child never became ready"));
        std::thread::sleep(Duration::from_millis(5 + rng.next() % 120));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();

        let mut in_flight = None;
        for (acked, op) in lines.iter().filter_map(|l| parse(l)) {
            if acked {
                apply(&mut model, op);
                total_acked += 1;
                in_flight = None;
            } else {
                in_flight = Some(op);
            }
        }

        let store = Store::open(config(dir.path(), direct))
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let mut alternative = model.clone();
        if let Some(op) = in_flight {
            apply(&mut alternative, op);
        }
        let mut buf = Vec::new();
        for k in 0..KEYS {
            let got = store
                .read_into(&key_bytes(k), &mut buf)
                .unwrap_or_else(|e| panic!("{ctx}: read key {k}: {e}"));
            let matches = |state: &State| match (state, got) {
                (None, None) => true,
                (Some((v, len)), Some(_)) => buf == content(k, *v, *len),
                _ => false,
            };
            let want = model.get(&k).copied().flatten();
            let alt = alternative.get(&k).copied().flatten();
            if matches(&want) {
                continue;
            }
            assert!(
                matches(&alt),
                "{ctx}: key {k}: store has {:?} ({} bytes), acknowledged state {want:?}, in flight {in_flight:?}",
                got,
                buf.len()
            );
            model = alternative.clone();
        }
        let stats = store.stats();
        assert_eq!(
            stats.checksum_failures, 0,
            "{ctx}: corrupt data reached a read"
        );
        let live = model.values().filter(|s| s.is_some()).count() as u64;
        assert_eq!(stats.blocks, live, "{ctx}: unexpected extra values");
        drop(store);
        iteration += 1;
    }
    eprintln!(
        "crash_recovery: {iteration} crashes, {total_acked} acknowledged ops verified in {:?}",
        started.elapsed()
    );
    assert!(
        total_acked > 0,
        "seed={seed}: the child never acknowledged anything"
    );
}
