//! The `memkv` binary against an in-process server on loopback.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use memkv_server::Server;
use memkv_server::config::ServerConfig;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const WRONG_KEY_HEX: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn config(address: &str) -> ServerConfig {
    let yaml = format!(
        "network:\n  address: {address}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 128 MiB\n"
    );
    ServerConfig::from_yaml_str(&yaml, "cli test").unwrap()
}

async fn start_server() -> Server {
    Server::start(config("127.0.0.1:0")).await.unwrap()
}

/// A server whose admin API is at data port + 1, as in production (with port 0 the admin
/// port is ephemeral too). Looks for a free pair of ports, retrying if another process
/// takes one first.
async fn start_server_with_admin_at_port_plus_one() -> Server {
    for _ in 0..50 {
        let data = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = data.local_addr().unwrap().port();
        if port == u16::MAX || std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
            continue;
        }
        drop(data);
        if let Ok(server) = Server::start(config(&format!("127.0.0.1:{port}"))).await {
            return server;
        }
    }
    panic!("no free pair of adjacent loopback ports");
}

/// `memkv` with a clean client environment (no MEMKV_* or key file from the host).
fn memkv(servers: &str, key: &str) -> Command {
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

/// Runs a command off the async runtime's threads, so the in-process server keeps serving.
async fn run(mut cmd: Command, stdin: Option<Vec<u8>>) -> Output {
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memkv-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_exists_delete_with_files_and_pipes() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let dir = scratch("kv");
    let input = dir.join("in.bin");
    let value = pattern(3 << 20);
    std::fs::write(&input, &value).unwrap();

    let mut put = memkv(&addr, KEY_HEX);
    put.args(["put", "from-file"]).arg(&input);
    let o = run(put, None).await;
    assert!(o.status.success(), "{}", stderr(&o));

    let output = dir.join("out.bin");
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "from-file"]).arg(&output);
    let o = run(get, None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(&output).unwrap() == value,
        "file round trip differs"
    );

    let piped = pattern(100_000);
    let mut put = memkv(&addr, KEY_HEX);
    put.args(["put", "from-stdin", "-"]);
    let o = run(put, Some(piped.clone())).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "from-stdin"]);
    let o = run(get, None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == piped, "stdout differs");

    let mut empty = memkv(&addr, KEY_HEX);
    empty.args(["put", "empty"]);
    assert!(run(empty, Some(Vec::new())).await.status.success());
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "empty", "-"]);
    let o = run(get, None).await;
    assert_eq!((o.status.code(), o.stdout.len()), (Some(0), 0));

    for (args, code) in [
        (vec!["exists", "from-file"], 0),
        (vec!["exists", "nope"], 3),
        (vec!["delete", "from-file"], 0),
        (vec!["delete", "from-file"], 3),
        (vec!["exists", "from-file"], 3),
        (vec!["get", "from-file"], 3),
    ] {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args(&args);
        let o = run(cmd, None).await;
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_reachability_failures_have_their_exit_codes() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let mut cmd = memkv(&addr, WRONG_KEY_HEX);
    cmd.args(["get", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(!stderr(&o).contains(WRONG_KEY_HEX));

    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut cmd = memkv(&unused, KEY_HEX);
    cmd.args(["exists", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("unreachable"), "{}", stderr(&o));

    // A listener that accepts but never answers: the deadline ends the command.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let mut cmd = memkv(&silent_addr, KEY_HEX);
    cmd.args(["get", "k", "--timeout-ms", "200"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
    drop(silent);

    let mut cmd = memkv(&addr, "not-a-key");
    cmd.args(["get", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("MEMKV_AUTH_KEY"), "{}", stderr(&o));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_status_json_is_an_array_with_one_object_per_server() {
    let server = start_server_with_admin_at_port_plus_one().await;
    let addr = server.data_addr().to_string();
    assert_eq!(server.admin_addr().port(), server.data_addr().port() + 1);
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut cmd = memkv(&addr, KEY_HEX);
    cmd.args(["admin", "status", "--json"]);
    let o = run(cmd, None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let servers = v.as_array().unwrap();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["server"], addr.as_str());
    assert_eq!(servers[0]["ok"], true);
    assert_eq!(servers[0]["status"]["storage"]["mode"], "memory");

    let mut cmd = memkv(&addr, KEY_HEX);
    cmd.args(["admin", "status", &addr, &unused]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(5));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.starts_with("SERVER"), "{table}");
    assert!(table.contains(&format!("{unused}  ERROR")), "{table}");
    server.shutdown().await.unwrap();
}

#[test]
fn keygen_version_and_usage() {
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("keygen")
        .output()
        .unwrap();
    let key = String::from_utf8(o.stdout).unwrap();
    assert_eq!(key.trim_end().len(), 64, "{key:?}");
    assert!(key.trim_end().bytes().all(|b| b.is_ascii_hexdigit()));
    let again = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("keygen")
        .output()
        .unwrap();
    assert_ne!(again.stdout, key.as_bytes(), "keys are fresh");

    for flag in ["--version", "-V"] {
        let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
            .arg(flag)
            .output()
            .unwrap();
        assert!(o.status.success());
        assert_eq!(
            String::from_utf8(o.stdout).unwrap().trim(),
            format!("memkv {}", env!("CARGO_PKG_VERSION"))
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8(o.stdout).unwrap().contains("Exit codes:"));
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .args(["net", "verify", "--server", "x:1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(8));
    assert!(stderr(&o).contains("not available in this build"));
}

#[test]
fn net_show_reports_no_devices_or_ports() {
    // This machine may or may not have RDMA devices: both outcomes are checked for shape.
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .args(["net", "show", "--json"])
        .output()
        .unwrap();
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == memkv_fabric::EXIT_NO_RDMA_DEVICES,
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.is_object() || v.is_array(), "{v}");
}

#[test]
fn start_serves_until_sigterm_and_exits_cleanly() {
    let dir = scratch("start");
    let port = loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            break p;
        }
    };
    let addr = format!("127.0.0.1:{port}");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "network:\n  address: {addr}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\nlogging:\n  level: warn\n"
        ),
    )
    .unwrap();
    let server = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("start")
        .arg("--config")
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Up once a client gets an answer (exit 3: the key is not there yet).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let o = memkv(&addr, KEY_HEX)
            .args(["exists", "k"])
            .output()
            .unwrap();
        if o.status.code() == Some(3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server did not come up: {}",
            stderr(&o)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = memkv(&addr, KEY_HEX)
        .args(["put", "k"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = memkv(&addr, KEY_HEX).args(["get", "k"]).output().unwrap();
    assert_eq!(o.stdout, std::fs::read(&config).unwrap());

    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_come_from_the_config_file_then_env_then_flags() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let dir = scratch("precedence");
    let file = dir.join("client.yaml");
    std::fs::write(
        &file,
        format!("servers: [\"{addr}\"]\nauth_key: {KEY_HEX}\ntimeout_ms: 3000\n"),
    )
    .unwrap();
    let bare = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
        for (name, _) in std::env::vars() {
            if name.starts_with("MEMKV_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("XDG_STATE_HOME", scratch("no-state"))
            .env("MEMKV_CONFIG", &file);
        cmd
    };
    // The file alone: reaches the server (exit 3: no such key).
    let mut cmd = bare();
    cmd.args(["exists", "k"]);
    assert_eq!(run(cmd, None).await.status.code(), Some(3));
    // The environment beats the file.
    let mut cmd = bare();
    cmd.env("MEMKV_SERVERS", &unused).args(["exists", "k"]);
    assert_eq!(run(cmd, None).await.status.code(), Some(5));
    // A flag beats the environment.
    let mut cmd = bare();
    cmd.env("MEMKV_SERVERS", &unused)
        .args(["exists", "k", "--servers", &addr]);
    assert_eq!(run(cmd, None).await.status.code(), Some(3));
    // Strict RDMA is refused by this build.
    let mut cmd = bare();
    cmd.env("MEMKV_TRANSPORT", "rdma").args(["exists", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    // A bad file names the key.
    std::fs::write(&file, "servers: [\"a:1\"]\nauth_kee: x\n").unwrap();
    let mut cmd = bare();
    cmd.args(["exists", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("auth_kee"), "{}", stderr(&o));
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
