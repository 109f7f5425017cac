//! Real servers on loopback for the client's integration tests.
#![allow(dead_code)] // Each test binary uses a different part.

pub mod scripted;

use std::path::PathBuf;
use std::time::Duration;

use memkv_client::{AuthKey, Client, ClientConfig};
use memkv_server::Server;
use memkv_server::config::ServerConfig;

pub const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const OTHER_KEY_HEX: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// A memory-mode server config on `address` with extra YAML sections appended.
pub fn server_config(address: &str, extra: &str) -> ServerConfig {
    let yaml = format!(
        "network:\n  address: {address}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 256 MiB\n{extra}"
    );
    ServerConfig::from_yaml_str(&yaml, "client test").expect("valid test config")
}

pub async fn start(extra: &str) -> Server {
    Server::start(server_config("127.0.0.1:0", extra))
        .await
        .expect("server starts")
}

/// A loopback address for a server a test stops and starts again. Its port and port + 1 (the
/// admin API) are free and lie below the kernel's ephemeral range: an ephemeral data port
/// would leave port + 1 to be lent to any outgoing connection (the test client's own, still
/// closing, has held it for the whole restart).
pub fn restartable_address() -> String {
    use std::hash::{BuildHasher, RandomState};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u32, ephemeral_low.saturating_sub(2).max(10_100));
    let random = RandomState::new();
    for attempt in 0u32..200 {
        let port = low + (random.hash_one(attempt) % u64::from(high - low)) as u32;
        let free = |p: u32| std::net::TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
        if free(port) && free(port + 1) {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free pair of adjacent loopback ports in {low}..{high}");
}

/// A memory-mode server (with `extra`) on a [`restartable_address`].
pub async fn start_restartable(extra: &str) -> Server {
    for _ in 0..20 {
        let address = restartable_address();
        if let Ok(server) = Server::start(server_config(&address, extra)).await {
            return server;
        }
    }
    panic!("no server could start on a restartable address");
}

/// Starts a server on a fixed `address` again (a restart), retrying for up to ten seconds
/// while the old sockets linger or another test briefly probes the same ports.
pub async fn start_again(address: &str, extra: &str) -> Server {
    use memkv_server::StartError;
    use memkv_server::admin::AdminError;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Server::start(server_config(address, extra)).await {
            Ok(server) => return server,
            Err(
                StartError::Bind { source, .. }
                | StartError::Admin(AdminError::Bind { source, .. }),
            ) if source.kind() == std::io::ErrorKind::AddrInUse
                && std::time::Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("restart on {address}: {e}"),
        }
    }
}

pub fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

pub fn client_config(servers: &[&Server]) -> ClientConfig {
    let addrs: Vec<String> = servers.iter().map(|s| s.data_addr().to_string()).collect();
    let mut config = ClientConfig::new(addrs, key());
    config.timeout = Duration::from_secs(10);
    config
}

pub async fn client(servers: &[&Server]) -> Client {
    Client::connect(client_config(servers)).await.unwrap()
}

/// Waits (at most 10 s) until `c` has attached `server`'s arena. Under `transport: auto` the
/// first operation worth moving through it starts the attach in the background and goes
/// over TCP itself.
pub async fn until_attached(c: &Client, server: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !c.shared_memory_servers().iter().any(|s| s == server) {
        assert!(
            std::time::Instant::now() < until,
            "{server} was never attached: {:?}",
            c.shared_memory_servers()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deterministic bytes that differ per `seed` and position.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A fresh directory under the system temp dir, removed first if left over.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memkv-client-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `GET path` from the server's admin API; the body (panics on anything but 200).
pub async fn admin_get(server: &Server, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(server.admin_addr())
        .await
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: memkv\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_owned()
}

/// The sum of the series of `name` whose labels include every `name="value"` of `labels`.
pub fn metric_sum(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
