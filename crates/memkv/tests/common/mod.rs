//! Shared helpers of the CLI tests: an in-process server and the built binary.
#![allow(dead_code)] // Each test binary uses a different part.

pub mod drive_files;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use memkv_server::Server;
use memkv_server::config::ServerConfig;

pub const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const WRONG_KEY_HEX: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

pub fn config(address: &str) -> ServerConfig {
    let yaml = format!(
        "network:\n  address: {address}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 128 MiB\n"
    );
    ServerConfig::from_yaml_str(&yaml, "cli test").unwrap()
}

pub async fn start_server() -> Server {
    Server::start(config("127.0.0.1:0")).await.unwrap()
}

/// A server whose admin API is at data port + 1, as in production (with port 0 the admin
/// port is ephemeral too). Looks for a free pair of ports, retrying if another process
/// takes one first.
pub async fn start_server_with_admin_at_port_plus_one() -> Server {
    start_with_admin_at_port_plus_one(config).await
}

/// Like [`start_server_with_admin_at_port_plus_one`], with the configuration `config_for`
/// builds for a data address.
pub async fn start_with_admin_at_port_plus_one(
    config_for: impl Fn(&str) -> ServerConfig,
) -> Server {
    for _ in 0..50 {
        let data = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = data.local_addr().unwrap().port();
        if port == u16::MAX || std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
            continue;
        }
        drop(data);
        if let Ok(server) = Server::start(config_for(&format!("127.0.0.1:{port}"))).await {
            return server;
        }
    }
    panic!("no free pair of adjacent loopback ports");
}

/// `memkv` with a clean client environment (no MEMKV_* or key file from the host).
pub fn memkv(servers: &str, key: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
    for (name, _) in std::env::vars() {
        if name.starts_with("MEMKV_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("XDG_STATE_HOME", scratch("no-state")).args([
        "--servers",
        servers,
        "--auth-key",
        key,
        "--timeout-ms",
        "3000",
    ]);
    cmd
}

/// `memkv` with no client settings at all: no MEMKV_*, and a key file directory (under
/// `state`) that holds none.
pub fn bare(state: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"MEMKV_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUST_LOG")
        .env("XDG_STATE_HOME", scratch(state))
        .stdin(Stdio::null());
    cmd
}

/// A loopback data address nobody listens on, nor on its admin port (port + 1).
pub fn closed_address() -> String {
    for _ in 0..50 {
        let data = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = data.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free pair of adjacent loopback ports");
}

/// Runs a command off the async runtime's threads, so the in-process server keeps serving.
pub async fn run(mut cmd: Command, stdin: Option<Vec<u8>>) -> Output {
    tokio::task::spawn_blocking(move || {
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(&bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-{name}", env!("CARGO_CRATE_NAME")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Inside the Soft-RoCE VM (testing/rxe-vm), its RDMA device names; outside, a skip notice on
/// stderr (past the test harness's capture) and `None`.
pub fn rxe_devices_or_skip(test: &str) -> Option<Vec<String>> {
    use std::io::Write;
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
        );
        return None;
    }
    Some(
        std::env::var("MEMKV_RXE_DEVICES")
            .expect("MEMKV_RXE_DEVICES in the VM")
            .split(',')
            .map(str::to_owned)
            .collect(),
    )
}
