//! Power loss for file and direct mode, simulated thousands of times: the store runs on
//! simulated drives (tests/common/fault_drive.rs, a test double behind `Store::open_on_drives`)
//! whose power is cut at a seeded write or sync; what survives is the synced sectors plus any
//! subset of the unsynced ones (lost, kept, reordered or torn at 512 B or 4 KiB); the store is
//! reopened and every key checked against what was acknowledged (power_loss/sim.rs; with four
//! writers committing at once, power_loss/concurrent.rs).
//!
//! Invariants, on every crash: nothing acknowledged is lost, no value nobody wrote appears,
//! nothing corrupt is served, and the reopen succeeds. With sectors torn into garbage, nothing
//! acknowledged is lost either (the journal never rewrites a page holding synced records), and
//! a reopen either succeeds or refuses naming what it refused. With bits flipped in synced
//! sectors, nothing corrupt is served (the tally counts what was lost).
//!
//! Each test prints its seed; `MEMKV_POWER_LOSS_SEED=<seed>` replays it exactly, and
//! `MEMKV_POWER_LOSS_CRASHES=<n>` sets the crashes of the long run
//! (`cargo test -p memkv-store --release --test power_loss -- --ignored --nocapture`).

#[path = "../common/mod.rs"]
mod common;
mod concurrent;
mod sim;

use common::rng::seed_from_env;
use sim::{CRASHES_ENV, Fault, Mode, SEED_ENV, Simulation, Tally};

/// Crashes per bounded test, sized to stay well inside `cargo test` on a 2-core debug build.
const BOUNDED_CRASHES: u64 = 600;

fn simulate(mode: Mode, fault: Fault, crashes: u64) -> Tally {
    let seed = seed_from_env(SEED_ENV);
    eprintln!("power_loss: {SEED_ENV}={seed} ({mode:?} mode, {fault:?}, {crashes} crashes)");
    let mut sim = Simulation::new(seed, mode, fault);
    sim.run(crashes);
    eprintln!("{}", sim.tally);
    sim.tally
}

fn strict(mode: Mode) {
    let t = simulate(mode, Fault::PowerLoss, BOUNDED_CRASHES);
    assert_eq!(t.lost_acknowledged + t.corrupt_served + t.refused, 0, "{t}");
    assert!(
        t.acknowledged_ops > BOUNDED_CRASHES,
        "the workload hardly ran: {t}"
    );
}

#[test]
fn power_loss_in_file_mode_loses_nothing_acknowledged() {
    strict(Mode::File);
}

#[test]
fn power_loss_in_direct_mode_loses_nothing_acknowledged() {
    strict(Mode::Direct);
}

/// Crashes of the concurrent run: fewer, since each life runs four writers.
const CONCURRENT_CRASHES: u64 = 200;

fn concurrent(mode: Mode) {
    let seed = seed_from_env(SEED_ENV);
    eprintln!(
        "power_loss: {SEED_ENV}={seed} ({mode:?} mode, 4 writers, {CONCURRENT_CRASHES} crashes)"
    );
    let acknowledged = concurrent::run(seed, mode, CONCURRENT_CRASHES);
    assert!(
        acknowledged > CONCURRENT_CRASHES,
        "the writers hardly ran: {acknowledged} acknowledged"
    );
}

#[test]
fn power_loss_with_concurrent_writers_in_file_mode_loses_nothing_acknowledged() {
    concurrent(Mode::File);
}

#[test]
fn power_loss_with_concurrent_writers_in_direct_mode_loses_nothing_acknowledged() {
    concurrent(Mode::Direct);
}

#[test]
fn torn_sectors_never_serve_corrupt_values_nor_lose_acknowledged_ones() {
    let t = simulate(Mode::File, Fault::TornGarbage, BOUNDED_CRASHES / 2);
    assert_eq!(t.corrupt_served + t.lost_acknowledged, 0, "{t}");
}

#[test]
fn media_damage_is_detected_never_served() {
    let t = simulate(Mode::Direct, Fault::MediaDamage, BOUNDED_CRASHES / 4);
    assert_eq!(t.corrupt_served, 0, "{t}");
}

/// The long run: every mode and fault, `MEMKV_POWER_LOSS_CRASHES` crashes each (default
/// 20 000), with the outcome tables printed.
#[test]
#[ignore = "long run (minutes); run with --ignored --nocapture, in release"]
fn power_loss_long_run() {
    let crashes = std::env::var(CRASHES_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    for mode in [Mode::File, Mode::Direct] {
        for fault in [Fault::PowerLoss, Fault::TornGarbage, Fault::MediaDamage] {
            let t = simulate(mode, fault, crashes);
            assert_eq!(t.corrupt_served, 0, "{t}");
            match fault {
                Fault::PowerLoss => assert_eq!(t.lost_acknowledged + t.refused, 0, "{t}"),
                Fault::TornGarbage => assert_eq!(t.lost_acknowledged, 0, "{t}"),
                Fault::MediaDamage => {}
            }
        }
    }
}
