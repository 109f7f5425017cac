//! Memory the store keeps per value beyond the value bytes and the key bytes: stores N small
//! values in memory mode (keys like `bench/64/N`, as `memkv bench` writes them) and prints the
//! growth of the process's resident memory, less the arena bytes the values occupy and the key
//! bytes, per value.
//!
//!     cargo run --release -p memkv-store --example index_memory -- [N] [VALUE_BYTES]

use memkv_store::{Store, StoreConfig, checksum};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("N"));
    let value_len: usize = args.next().map_or(64, |a| a.parse().expect("VALUE_BYTES"));
    let arena = (n * (value_len as u64).next_power_of_two().max(64) * 2).max(64 << 20);
    let store = Store::open(StoreConfig::memory(arena)).expect("open");
    let value = vec![0x5au8; value_len];
    let sum = checksum(&value);
    let before = resident_bytes();
    let mut key_bytes = 0u64;
    for i in 0..n {
        let key = format!("bench/{value_len}/{i}");
        key_bytes += key.len() as u64;
        let mut r = store
            .allocate(key.as_bytes(), value_len as u64)
            .expect("allocate");
        r.as_mut_slice()
            .expect("memory mode")
            .copy_from_slice(&value);
        store.commit(r, sum).expect("commit");
    }
    let grown = resident_bytes().saturating_sub(before);
    let used = store.stats().used_bytes;
    let per_value = grown.saturating_sub(used + key_bytes) as f64 / n as f64;
    println!(
        "{n} values of {value_len} B: resident +{:.1} MiB, arena used {:.1} MiB, keys {:.1} MiB; \
         {per_value:.1} bytes per value beyond value and key bytes",
        grown as f64 / 1048576.0,
        used as f64 / 1048576.0,
        key_bytes as f64 / 1048576.0
    );
}
