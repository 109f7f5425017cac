//! Put/get throughput of both modes next to the plain operation they are built on, measured in
//! the same run: memory mode against `memcpy` into a preallocated buffer, file mode against
//! `pwrite` + `fdatasync` / `pread` on a plain file in the same directory. File-mode reads copy
//! and hash out of the mapped drive in one pass, so after the first read of a value (which
//! populates its pages) they can beat `pread`, which copies through a system call.
//!
//! Run: `cargo bench -p memkv-store -- --warm-up-time 1 --measurement-time 3`
//! (`MEMKV_BENCH_DIR` picks the directory for file mode; default: the system temp dir).

use std::hint::black_box;
use std::os::unix::fs::FileExt;

mod common;

use common::{bench_dir, file_store_and_plain, payload};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use memkv_store::{Store, StoreConfig};

const SIZES: [(usize, &str); 4] = [
    (4 << 10, "4KiB"),
    (256 << 10, "256KiB"),
    (1 << 20, "1MiB"),
    (4 << 20, "4MiB"),
];

/// The integrity hash alone, for reading the put/read numbers against.
fn hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("xxh3");
    for (len, label) in SIZES {
        let data = payload(len);
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::new("store_checksum", label), |b| {
            b.iter(|| memkv_store::checksum::xxh3_64(black_box(&data)))
        });
        g.bench_function(BenchmarkId::new("store_stream_64KiB_chunks", label), |b| {
            b.iter(|| {
                let mut h = memkv_store::checksum::Xxh3Stream::new();
                for part in black_box(&data).chunks(64 << 10) {
                    h.update(part);
                }
                h.digest()
            })
        });
        g.bench_function(BenchmarkId::new("xxhash_rust", label), |b| {
            b.iter(|| xxhash_rust::xxh3::xxh3_64(black_box(&data)))
        });
    }
    g.finish();
}

fn memory(c: &mut Criterion) {
    let store = Store::open(StoreConfig::memory(256 << 20)).unwrap();
    eprintln!("arena backing: {:?}", store.arena().unwrap().backing);
    for (group_name, is_put) in [("memory_put", true), ("memory_read", false)] {
        let mut g = c.benchmark_group(group_name);
        for (len, label) in SIZES {
            let data = payload(len);
            g.throughput(Throughput::Bytes(len as u64));
            let mut dst = vec![0u8; len];
            g.bench_function(BenchmarkId::new("memcpy", label), |b| {
                b.iter(|| {
                    dst.copy_from_slice(black_box(&data));
                    black_box(&dst);
                })
            });
            let key = format!("k{label}");
            store.put(key.as_bytes(), &data).unwrap();
            if is_put {
                g.bench_function(BenchmarkId::new("store", label), |b| {
                    b.iter(|| store.put(key.as_bytes(), black_box(&data)).unwrap())
                });
            } else {
                let mut buf = Vec::with_capacity(len);
                g.bench_function(BenchmarkId::new("store_read_into", label), |b| {
                    b.iter(|| black_box(store.read_into(key.as_bytes(), &mut buf).unwrap()))
                });
                g.bench_function(BenchmarkId::new("store_get_zero_copy", label), |b| {
                    b.iter(|| black_box(store.get(key.as_bytes()).unwrap().unwrap().len()))
                });
            }
        }
        g.finish();
    }
}

fn file(c: &mut Criterion) {
    let dir = bench_dir("bench");
    let (store, plain) = file_store_and_plain(&dir);
    for (group_name, is_put) in [("file_put", true), ("file_read", false)] {
        let mut g = c.benchmark_group(group_name);
        for (len, label) in SIZES {
            let data = payload(len);
            g.throughput(Throughput::Bytes(len as u64));
            let key = format!("k{label}");
            store.put(key.as_bytes(), &data).unwrap();
            plain.write_all_at(&data, 0).unwrap();
            if is_put {
                g.bench_function(BenchmarkId::new("plain_write_fdatasync", label), |b| {
                    b.iter(|| {
                        plain.write_all_at(black_box(&data), 0).unwrap();
                        plain.sync_data().unwrap();
                    })
                });
                g.bench_function(BenchmarkId::new("store", label), |b| {
                    b.iter(|| store.put(key.as_bytes(), black_box(&data)).unwrap())
                });
            } else {
                let mut buf = vec![0u8; len];
                g.bench_function(BenchmarkId::new("plain_pread", label), |b| {
                    b.iter(|| {
                        plain.read_exact_at(&mut buf, 0).unwrap();
                        black_box(&buf);
                    })
                });
                let mut out = Vec::with_capacity(len);
                g.bench_function(BenchmarkId::new("store_read_into", label), |b| {
                    b.iter(|| black_box(store.read_into(key.as_bytes(), &mut out).unwrap()))
                });
            }
        }
        g.finish();
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, hash, memory, file);
criterion_main!(benches);
