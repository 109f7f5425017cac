//! An in-process Prometheus endpoint: `GET /metrics` in text format on a TCP address.

use std::net::SocketAddr;
use std::sync::Arc;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{Error, Result};

/// The variable naming the address to serve metrics on (`host:port`).
pub const PROMETHEUS_BIND_ENV: &str = "MEMKV_PROMETHEUS_BIND";

/// Largest request head read before answering.
const MAX_REQUEST: usize = 8192;

/// If `MEMKV_PROMETHEUS_BIND` is set: installs a Prometheus recorder and serves `/metrics`
/// there from a task on the current runtime; returns the bound address.
pub async fn serve_from_env() -> Result<Option<SocketAddr>> {
    match std::env::var(PROMETHEUS_BIND_ENV) {
        Ok(address) if !address.trim().is_empty() => serve(address.trim()).await.map(Some),
        _ => Ok(None),
    }
}

/// Called by [`crate::Client::connect`]: the first call in the process serves
/// `MEMKV_PROMETHEUS_BIND` if it is set; a failure is logged, not returned, so metrics never
/// stop a client from working.
pub(crate) async fn serve_from_env_once() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if STARTED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    if let Err(e) = serve_from_env().await {
        tracing::warn!("client metrics not served: {e}");
    }
}

/// Installs a Prometheus recorder (the process must not have another) and serves `/metrics`
/// on `address`; returns the bound address.
pub async fn serve(address: &str) -> Result<SocketAddr> {
    let listener = TcpListener::bind(address).await.map_err(|e| Error::Io {
        context: format!("{PROMETHEUS_BIND_ENV}: cannot listen on {address}"),
        source: Arc::new(e),
    })?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Error::Config(format!("{PROMETHEUS_BIND_ENV}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| Error::Io {
        context: format!("{PROMETHEUS_BIND_ENV}: {address}"),
        source: Arc::new(e),
    })?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(answer(stream, handle));
        }
    });
    tracing::info!(address = %bound, "client metrics at /metrics");
    Ok(bound)
}

async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, body) = if line.starts_with(b"GET /metrics ") {
        ("200 OK", handle.render())
    } else {
        (
            "404 Not Found",
            "only GET /metrics is served here\n".to_owned(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
