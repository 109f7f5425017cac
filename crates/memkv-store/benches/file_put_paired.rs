//! File-mode put against `pwrite` + `fdatasync` of the same bytes, measured in alternating
//! pairs. Both sides are dominated by `fdatasync`, whose cost drifts by tens of percent from one
//! second to the next on a shared or virtual disk, so criterion's back-to-back windows
//! (benches/store.rs) can disagree by 2x between runs; pairing each store put with a plain write
//! made right before it cancels that drift. Prints the median of each side and their ratio.
//!
//! Run: `cargo bench -p memkv-store --bench file_put_paired [-- PAIRS]` (default 200 pairs per
//! size; `MEMKV_BENCH_DIR` picks the directory, default the system temp dir).

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

mod common;

use common::{bench_dir, file_store_and_plain, payload};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this as a quick smoke test.
    let benching = std::env::args().any(|a| a == "--bench");
    let pairs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if benching { 200 } else { 3 });
    let dir = bench_dir("paired");
    let (store, plain) = file_store_and_plain(&dir);
    println!("| size | pairs | pwrite + fdatasync (median) | store put (median) | plain / store |");
    println!("|---|---|---|---|---|");
    for (len, label) in [
        (256usize << 10, "256KiB"),
        (1 << 20, "1MiB"),
        (4 << 20, "4MiB"),
    ] {
        let data = payload(len);
        let key = format!("k{label}");
        // Warm both: allocate the plain file's blocks and every extent the store cycles through.
        for _ in 0..8 {
            plain.write_all_at(&data, 0).unwrap();
            plain.sync_data().unwrap();
            store.put(key.as_bytes(), &data).unwrap();
        }
        let (mut plain_times, mut store_times) = (Vec::new(), Vec::new());
        for _ in 0..pairs {
            let t = Instant::now();
            plain.write_all_at(&data, 0).unwrap();
            plain.sync_data().unwrap();
            plain_times.push(t.elapsed());
            let t = Instant::now();
            store.put(key.as_bytes(), &data).unwrap();
            store_times.push(t.elapsed());
        }
        let (p, s) = (median(plain_times), median(store_times));
        println!(
            "| {label} | {pairs} | {:.0} us | {:.0} us | {:.2} |",
            p.as_secs_f64() * 1e6,
            s.as_secs_f64() * 1e6,
            p.as_secs_f64() / s.as_secs_f64()
        );
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
