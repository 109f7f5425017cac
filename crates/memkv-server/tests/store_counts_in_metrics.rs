//! The store's own counts, as the metrics show them under load.
//!
//! The metrics recorder is process-wide: this binary holds one test, so the counters it reads
//! are its server's alone.

mod support;

/// The value of the unlabelled series `name` in a Prometheus scrape.
fn scraped(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from:\n{scrape}"))
}

/// `memkv_evictions_total` and `/v1/status` `storage.evictions` agree once nothing is in
/// flight. The server turns the store's cumulative count into counter increments after every
/// file-mode operation, on each scrape and every second, from several threads at once, each
/// with its own snapshot of the store: a late, older snapshot must not make the next caller
/// count the same evictions again (the counter can only grow, so an overcount never comes
/// back, and eviction-rate alerts overstate).
#[test]
fn evictions_total_matches_the_stores_count_under_concurrent_puts() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(puts_that_evict_from_16_connections());
}

async fn puts_that_evict_from_16_connections() {
    use memkv_proto::{AuthKey, Opcode, Status};
    const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let dir = std::env::temp_dir().join(format!("memkv-store-counts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Two small drives of 64 KiB extents: about 200 values fit, every later put evicts.
    let mut yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nrdma:\n  enabled: false\nstorage:\n  mode: file\n  file_reads: pread\n  block_size: 64 KiB\n  drives:\n"
    );
    for i in 0..2 {
        yaml.push_str(&format!(
            "    - media: {}\n      size: 8 MiB\n",
            dir.join(format!("d{i}")).display()
        ));
    }
    let config = memkv_server::config::ServerConfig::from_yaml_str(&yaml, "test").unwrap();
    let server = memkv_server::Server::start(config).await.unwrap();
    let data = server.data_addr();
    let admin = server.admin_addr();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();

    let mut last = (0.0, 0.0);
    for round in 0..10 {
        let mut tasks = Vec::new();
        for c in 0..16u32 {
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let mut raw = support::raw::connect(data, key).await.unwrap();
                let value = vec![c as u8; 16 << 10];
                for i in 0..150u32 {
                    let k = format!("r{round}/c{c}/{i}");
                    let (status, _) = raw.call(Opcode::TcpPut, k.as_bytes(), &value).await;
                    assert_eq!(status, Status::Ok);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Nothing in flight now: a scrape syncs the counter with the store.
        let (_, scrape) = support::http_get(admin, "/v1/metrics").await;
        let (_, body) = support::http_get(admin, "/v1/status").await;
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        let store = status["storage"]["evictions"].as_f64().unwrap();
        let metric = scraped(&scrape, "memkv_evictions_total");
        assert!(store > 0.0, "no evictions: {body}");
        assert_eq!(
            metric, store,
            "after round {round}: memkv_evictions_total {metric}, /v1/status storage.evictions {store}"
        );
        last = (metric, store);
    }
    eprintln!("evictions: metric {} store {}", last.0, last.1);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
