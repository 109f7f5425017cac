//! Shared by the integration tests.
#![allow(dead_code)]

pub mod raw;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 GET to the admin API: the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: memkv\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// Inside the Soft-RoCE VM (testing/rxe-vm), its device names; outside, a visible skip notice.
pub fn rxe_devices_or_skip(test: &str) -> Option<Vec<String>> {
    use std::io::Write;
    match std::env::var("MEMKV_RXE_DEVICES") {
        Ok(list) if std::env::var_os("MEMKV_IN_RXE_VM").is_some() => {
            Some(list.split(',').map(str::to_owned).collect())
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs this test in the Soft-RoCE VM)"
            );
            None
        }
    }
}

/// A test fixture under `tests/fixtures` (the test-only TLS certificate and key).
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A blocking HTTP/1.1 TLS connection to `address` that trusts only the test-only certificate
/// (`tests/fixtures/test-only-cert.pem`, issued for `localhost`).
pub fn tls_stream(
    address: std::net::SocketAddr,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(fixture("test-only-cert.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = std::net::TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    rustls::StreamOwned::new(connection, socket)
}

/// A loopback address whose port and port + 1 (the admin API) are free and lie below the
/// kernel's ephemeral range: an ephemeral data port leaves port + 1 to be lent to any outgoing
/// connection, and the server's start then fails on the admin port.
pub fn fixed_loopback_address() -> std::net::SocketAddr {
    use std::hash::{BuildHasher, RandomState};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.saturating_sub(2).max(10_100));
    let random = RandomState::new();
    for attempt in 0u32..200 {
        let port = low + (random.hash_one(attempt) % u64::from(high - low)) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 1) {
            return std::net::SocketAddr::from(([127, 0, 0, 1], port));
        }
    }
    panic!("no free pair of adjacent loopback ports in {low}..{high}");
}
