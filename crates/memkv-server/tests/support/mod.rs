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
