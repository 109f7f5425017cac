//! The index's cost per key where it matters: lookups spread over an index far larger than the
//! CPU caches, so each key's loads go to memory. One million 64-byte values in memory mode under
//! `bench/64/N` keys; a batch Exists of 1,000 keys and 1,000 single gets, the keys picked at
//! random (the same fixed sequence every run), and a batch Exists of 1,000 absent keys.
//!
//! Run: `cargo bench -p memkv-store --bench index -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memkv_store::{Store, StoreConfig};

const STORED: u64 = 1_000_000;
const BATCH: usize = 1_000;
const BATCHES: usize = 64;

fn key(i: u64) -> Vec<u8> {
    format!("bench/64/{i}").into_bytes()
}

/// `BATCHES` batches of `BATCH` keys drawn from `0..STORED` (plus `offset`) by a fixed LCG.
fn batches(offset: u64) -> Vec<Vec<Vec<u8>>> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..BATCHES)
        .map(|_| {
            (0..BATCH)
                .map(|_| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    key(offset + (x >> 33) % STORED)
                })
                .collect()
        })
        .collect()
}

fn as_refs(batches: &[Vec<Vec<u8>>]) -> Vec<Vec<&[u8]>> {
    batches
        .iter()
        .map(|batch| batch.iter().map(|k| &k[..]).collect())
        .collect()
}

fn index(c: &mut Criterion) {
    let store = Store::open(StoreConfig::memory(1 << 30)).expect("memory store");
    let value = [7u8; 64];
    for i in 0..STORED {
        store.put(&key(i), &value).expect("put");
    }
    let present = batches(0);
    let absent = batches(STORED);
    let (present_refs, absent_refs) = (as_refs(&present), as_refs(&absent));

    let mut g = c.benchmark_group("index_1M");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut n = 0;
    g.bench_function("exists_batch_1000_present", |b| {
        b.iter(|| {
            n = (n + 1) % BATCHES;
            black_box(store.exists_batch(&present_refs[n]))
        })
    });
    g.bench_function("exists_batch_1000_absent", |b| {
        b.iter(|| {
            n = (n + 1) % BATCHES;
            black_box(store.exists_batch(&absent_refs[n]))
        })
    });
    g.bench_function("get_1000", |b| {
        b.iter(|| {
            n = (n + 1) % BATCHES;
            for k in &present_refs[n] {
                black_box(store.get(k).expect("get").expect("present").checksum());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, index);
criterion_main!(benches);
