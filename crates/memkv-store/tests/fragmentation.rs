//! Measures arena fragmentation under a random mix of value sizes and prints it
//! (`cargo test -p memkv-store --test fragmentation -- --nocapture`). Deterministic seed, so
//! the numbers (and the floors asserted here) are reproducible.

use memkv_store::{EvictionPolicy, Store, StoreConfig, StoreError, StoreStats};

const ARENA: u64 = 128 << 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Log-uniform sizes from 64 B to 8 MiB, with extra weight on whole KV-cache block sizes.
fn size(rng: &mut Rng) -> usize {
    match rng.next() % 4 {
        0 => [256 << 10, 1 << 20, 2 << 20, 4 << 20][(rng.next() % 4) as usize],
        _ => {
            let bits = 6 + rng.next() % 17; // 2^6 .. 2^22
            let lo = 1u64 << bits;
            (lo + rng.next() % lo) as usize
        }
    }
}

fn report(phase: &str, s: &StoreStats) -> (f64, f64) {
    // utilisation: value bytes / usable arena; internal waste: rounding inside reservations.
    let util = s.value_bytes as f64 / s.usable_bytes as f64;
    let internal = 1.0 - s.value_bytes as f64 / s.used_bytes.max(1) as f64;
    println!(
        "{phase}: {} values, {:.1} MiB stored in {:.1} MiB reserved of {:.1} MiB usable: \
         utilisation {:.1}%, internal waste {:.1}%, evictions {}",
        s.blocks,
        s.value_bytes as f64 / 1048576.0,
        s.used_bytes as f64 / 1048576.0,
        s.usable_bytes as f64 / 1048576.0,
        util * 100.0,
        internal * 100.0,
        s.evictions
    );
    (util, internal)
}

#[test]
fn fragmentation_under_random_sizes() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let buf = vec![0xa5u8; 8 << 20];

    // Fill with random sizes; note the first put that does not fit, then keep going (smaller
    // values still fit in the holes) until 200 puts in a row fail.
    let mut cfg = StoreConfig::memory(ARENA);
    cfg.eviction = EvictionPolicy::None;
    let store = Store::open(cfg.clone()).unwrap();
    let (mut n, mut misses, mut first_full) = (0u64, 0, None);
    while misses < 200 {
        let len = size(&mut rng);
        match store.put(&n.to_le_bytes(), &buf[..len]) {
            Ok(()) => misses = 0,
            Err(StoreError::Full(_)) => {
                misses += 1;
                first_full.get_or_insert_with(|| store.stats());
            }
            Err(e) => panic!("{e}"),
        }
        n += 1;
    }
    report("random sizes, at the first Full", &first_full.unwrap());
    let (fill_util, fill_internal) = report("random sizes, saturated", &store.stats());

    // KV-cache blocks: a few fixed sizes, as inference engines send them.
    let store = Store::open(cfg).unwrap();
    let mut n = 0u64;
    let kv = [256 << 10, 1 << 20, 2 << 20, 4 << 20];
    while store
        .put(&n.to_le_bytes(), &buf[..kv[(rng.next() % 4) as usize]])
        .is_ok()
    {
        n += 1;
    }
    let (kv_util, _) = report("KV block sizes, at the first Full", &store.stats());

    // Churn: random overwrites and deletes over a key space larger than fits, with LRU eviction.
    let store = Store::open(StoreConfig::memory(ARENA)).unwrap();
    for _ in 0..10_000 {
        let key = (rng.next() % 2000).to_le_bytes();
        if rng.next() % 8 == 0 {
            store.delete(&key).unwrap();
        } else {
            store.put(&key, &buf[..size(&mut rng)]).unwrap();
        }
    }
    let (churn_util, churn_internal) =
        report("steady state after 10000 random ops", &store.stats());

    // Floors well under the measured values (see the printed numbers): a regression in the
    // allocator (e.g. small values taking whole granules) falls far below them.
    assert!(fill_util > 0.80, "fill utilisation {fill_util}");
    assert!(kv_util > 0.90, "KV block utilisation {kv_util}");
    assert!(fill_internal < 0.20, "fill internal waste {fill_internal}");
    assert!(churn_util > 0.45, "steady-state utilisation {churn_util}");
    assert!(
        churn_internal < 0.25,
        "steady-state internal waste {churn_internal}"
    );
}
