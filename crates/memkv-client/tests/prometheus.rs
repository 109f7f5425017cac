//! The in-process `/metrics` endpoint (feature `prometheus`). No server runs in this test
//! binary: a server installs its own recorder, and a process has only one.
#![cfg(feature = "prometheus")]

use std::time::Duration;

use memkv_client::{AuthKey, Client, ClientConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn metrics_are_served_in_prometheus_text() {
    let bound = memkv_client::metrics::serve("127.0.0.1:0").await.unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = ClientConfig::new([format!("127.0.0.1:{port}")], AuthKey::from_bytes([1; 32]));
    config.timeout = Duration::from_millis(500);
    let c = Client::connect(config).await.unwrap();
    assert!(c.get(b"k").await.is_err());

    let mut s = tokio::net::TcpStream::connect(bound).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(
        text.contains(r#"memkv_client_requests_total{op="get",outcome="unreachable"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("memkv_client_request_duration_seconds"),
        "{text}"
    );

    let mut s = tokio::net::TcpStream::connect(bound).await.unwrap();
    s.write_all(b"GET /other HTTP/1.1\r\n\r\n").await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
}
