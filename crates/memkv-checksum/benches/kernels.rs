//! The checksum kernels against plain memcpy, at a put's sizes: a value hot in cache, and
//! values cycling through a working set far larger than the caches (what a put stream does).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 2] = [64 << 10, 1 << 20];
/// The cold working set: many values, so each is read from memory, not cache.
const COLD_SET: usize = 1 << 30;

fn kernels(c: &mut Criterion) {
    for &size in &SIZES {
        for (label, set) in [("hot", size), ("cold", COLD_SET)] {
            let count = set / size;
            let src: Vec<Vec<u8>> = (0..count)
                .map(|n| (0..size).map(|i| (i * 31 + n) as u8).collect())
                .collect();
            let mut dst: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; size]).collect();
            let mut g = c.benchmark_group(format!("{label}/{}KiB", size >> 10));
            g.throughput(Throughput::Bytes(size as u64));
            let mut n = 0;
            g.bench_function(BenchmarkId::from_parameter("memcpy"), |b| {
                b.iter(|| {
                    n = (n + 1) % count;
                    dst[n].copy_from_slice(&src[n]);
                    black_box(&dst[n]);
                })
            });
            g.bench_function(BenchmarkId::from_parameter("xxh3"), |b| {
                b.iter(|| {
                    n = (n + 1) % count;
                    black_box(memkv_checksum::xxh3(&src[n]))
                })
            });
            g.bench_function(BenchmarkId::from_parameter("copy_and_xxh3"), |b| {
                b.iter(|| {
                    n = (n + 1) % count;
                    black_box(memkv_checksum::copy_and_xxh3(&mut dst[n], &src[n]))
                })
            });
            g.bench_function(BenchmarkId::from_parameter("xxhash-rust"), |b| {
                b.iter(|| {
                    n = (n + 1) % count;
                    black_box(xxhash_rust::xxh3::xxh3_64(&src[n]))
                })
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = kernels
}
criterion_main!(benches);
