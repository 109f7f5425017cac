//! Client throughput over loopback TCP against an in-process memory-mode server: single puts
//! and gets from 4 KiB to 16 MiB, and a batched get of 64 x 64 KiB.
//!
//! `cargo bench -p memkv-client --bench tcp`. Loopback numbers measure the client and server
//! CPU paths (framing, MAC, checksum, copies), not a network.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use memkv_client::{AuthKey, Client, ClientConfig};
use memkv_server::Server;
use memkv_server::config::ServerConfig;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20];

fn setup(rt: &tokio::runtime::Runtime) -> (Server, Client) {
    rt.block_on(async {
        let yaml = format!(
            "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 512 MiB\n"
        );
        let server = Server::start(ServerConfig::from_yaml_str(&yaml, "bench").unwrap())
            .await
            .unwrap();
        let config = ClientConfig::new(
            [server.data_addr().to_string()],
            AuthKey::from_hex(KEY_HEX).unwrap(),
        );
        let client = Client::connect(config).await.unwrap();
        (server, client)
    })
}

fn single(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (server, client) = setup(&rt);
    let mut g = c.benchmark_group("tcp");
    for size in SIZES {
        let value = vec![0xA5u8; size];
        let key = format!("bench/{size}");
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("put", size), &value, |b, v| {
            b.iter(|| rt.block_on(client.put(key.as_bytes(), v)).unwrap())
        });
        let mut buf = Vec::with_capacity(size);
        g.bench_with_input(BenchmarkId::new("get_into", size), &size, |b, _| {
            b.iter(|| {
                assert!(
                    rt.block_on(client.get_into(key.as_bytes(), &mut buf))
                        .unwrap()
                );
                black_box(buf.len())
            })
        });
    }
    g.finish();
    rt.block_on(server.shutdown()).unwrap();
}

fn batched(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (server, client) = setup(&rt);
    let items: Vec<(String, Vec<u8>)> = (0..64)
        .map(|i| (format!("batch/{i}"), vec![i as u8; 64 << 10]))
        .collect();
    let keys: Vec<&str> = items.iter().map(|(k, _)| k.as_str()).collect();
    let mut g = c.benchmark_group("tcp_batch");
    g.throughput(Throughput::Bytes(64 * (64 << 10)));
    g.bench_function("put_batch 64 x 64 KiB", |b| {
        b.iter(|| rt.block_on(client.put_batch(&items)))
    });
    g.bench_function("get_batch 64 x 64 KiB", |b| {
        b.iter(|| rt.block_on(client.get_batch(&keys)))
    });
    g.finish();
    rt.block_on(server.shutdown()).unwrap();
}

criterion_group!(benches, single, batched);
criterion_main!(benches);
