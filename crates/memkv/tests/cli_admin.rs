//! The `memkv` binary: admin status, start, keygen, version, net, and where settings come from.

mod common;

use std::process::{Command, Stdio};

use common::*;

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

    // The deadline follows MEMKV_TIMEOUT_MS like every client command; bad values are named.
    let status_with_env_deadline = |value: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkv"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("MEMKV_TIMEOUT_MS", value)
            .args(["--servers", &addr, "admin", "status"]);
        cmd
    };
    // Exit 1, bad configuration, as for every client command (not 2, a usage error).
    let o = run(status_with_env_deadline("soon"), None).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("MEMKV_TIMEOUT_MS"), "{}", stderr(&o));
    let o = run(status_with_env_deadline("2000"), None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    server.shutdown().await.unwrap();
}

/// A reader that has gone (`memkv ... | head -1`) ends the output quietly: no panic, success.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("keygen")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {stderr}", o.status);
    assert!(stderr.is_empty(), "{stderr}");
}

/// Standard output that cannot be written (a full disk) is an error with its reason, exit 1,
/// not a panic.
#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = bare("keygen-full")
        .arg("keygen")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("writing standard output"), "{err}");
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_proves_the_path_or_names_the_failure() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let run = move |key: &str| {
        let mut cmd = memkv(&addr, key);
        cmd.args([
            "net",
            "verify",
            "--server",
            &addr,
            "--auth-key",
            key,
            "--size",
            "65536",
        ]);
        cmd
    };
    let o = tokio::task::spawn_blocking(move || run(KEY_HEX).output().unwrap())
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stderr(&o);
    assert!(out.contains("authenticated     : yes"), "{out}");
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        // No RDMA on this host: the block makes its round trip over TCP, and that is
        // reported, not VERIFIED (a VERIFIED line is about the RDMA path). The server is on
        // this host and offers shared memory: verify keeps off it, so the bytes cross TCP.
        assert_eq!(o.status.code(), Some(8), "{out}{err}");
        assert!(out.contains("TCP (RDMA not used: no RDMA devices"), "{out}");
        assert!(
            out.contains("write             : not RDMA (")
                && out.contains("read              : not RDMA ("),
            "{out}"
        );
        assert!(!out.contains("VERIFIED"), "{out}");
        assert!(
            err.contains(
                "net verify: NOT VERIFIED: neither the write nor the read moved over RDMA: \
                 both went over TCP: the client has no RDMA path (no RDMA devices"
            ),
            "{err}"
        );
        assert!(!err.contains("shared memory"), "{err}");
    } else {
        assert!(o.status.success(), "{out}{err}");
        assert!(out.contains("VERIFIED 65536 bytes over"), "{out}");
    }
    let addr2 = server.data_addr().to_string();
    let o = tokio::task::spawn_blocking(move || {
        let mut cmd = memkv(&addr2, WRONG_KEY_HEX);
        cmd.args([
            "net",
            "verify",
            "--server",
            &addr2,
            "--auth-key",
            WRONG_KEY_HEX,
        ]);
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("net verify FAILED"), "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("VERIFIED"));
    server.shutdown().await.unwrap();
}

/// InfiniBand runbook, "Prove the data plane": `memkv net verify --server ... --device mlx5_0
/// --auth-key ...`; VERIFIED means the addressing, partition and MTU agree end to end, which
/// are RDMA facts. A block that moved over TCP is NOT VERIFIED (exit 8), naming why RDMA was
/// not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_verify_with_a_named_device_fails_instead_of_verifying_over_tcp() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let a = addr.clone();
    let o = tokio::task::spawn_blocking(move || {
        let mut cmd = memkv(&a, KEY_HEX);
        cmd.args([
            "net",
            "verify",
            "--server",
            &a,
            "--device",
            "mlx5_0",
            "--auth-key",
            KEY_HEX,
        ]);
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stderr(&o);
    server.shutdown().await.unwrap();
    if !out.contains("TCP (RDMA not used") {
        // A host where mlx5_0 really works: the block moved over RDMA.
        assert!(o.status.success(), "{out}{err}");
        assert!(out.contains("VERIFIED"), "{out}");
        return;
    }
    assert!(!out.contains("VERIFIED"), "{out}");
    assert_eq!(o.status.code(), Some(8), "{out}{err}");
    assert!(
        err.contains("net verify: NOT VERIFIED: neither the write nor the read moved over RDMA")
            && err.contains("over TCP: the client has no RDMA path"),
        "{err}"
    );
}

/// A zero-byte block moves no bytes over any rail, so it could never show the way they went.
#[test]
fn net_verify_refuses_a_block_of_zero_bytes() {
    let o = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .args(["net", "verify", "--server", "127.0.0.1:1", "--size", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--size 0 moves no bytes"),
        "{}",
        stderr(&o)
    );
}

/// `net show` says which server configuration file and which client settings it read, the
/// server's values marked `rdma.` (JSON output keeps stdout one document: that goes to stderr).
#[test]
fn net_show_names_the_server_and_client_settings_it_read() {
    let dir = scratch("net-show-settings");
    let server = dir.join("server.yaml");
    std::fs::write(&server, "rdma:\n  pkey_index: 1\n  mtu: 2048\n").unwrap();
    let client = dir.join("client.yaml");
    std::fs::write(&client, "pkey_index: 3\n").unwrap();
    let o = bare("net-show-settings-state")
        .env("MEMKV_CONFIG", &client)
        .args(["net", "show", "--config"])
        .arg(&server)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == memkv_fabric::EXIT_NO_RDMA_DEVICES,
        "{out}{}",
        stderr(&o)
    );
    assert!(
        out.contains(&format!(
            "server settings   : {} (rdma.pkey_index 1, rdma.mtu 2048",
            server.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "client settings   : MEMKV_CONFIG {} (pkey_index 3,",
            client.display()
        )),
        "{out}"
    );
    // After the ports, so that the output starts as the InfiniBand runbook's does (`device`,
    // then `link layer`; on a host without RDMA, the line saying so), a blank line between.
    let lines: Vec<&str> = out.lines().collect();
    let n = lines.len();
    assert!(
        n >= 4
            && lines[n - 3].is_empty()
            && lines[n - 2].starts_with("server settings   : ")
            && lines[n - 1].starts_with("client settings   : "),
        "{out}"
    );
    assert!(
        lines[0].starts_with("device            : ") || lines[0].starts_with("no RDMA devices: "),
        "{out}"
    );
    let o = bare("net-show-settings-state")
        .args(["net", "show", "--json", "--config"])
        .arg(dir.join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing.yaml"), "{}", stderr(&o));
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

/// `--timeout-ms` is held to 1..=3600000 by the admin commands as by the client ones: a zero
/// deadline would report every healthy server as down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_status_refuses_a_deadline_out_of_range() {
    let server = start_server_with_admin_at_port_plus_one().await;
    let addr = server.data_addr().to_string();
    let mut cmd = bare("admin-t0");
    cmd.args(["--timeout-ms", "0", "admin", "status", &addr]);
    let o = run(cmd, None).await;
    server.shutdown().await.unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        !out.contains("ERROR"),
        "a healthy server was reported down:\n{out}"
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--timeout-ms"), "{}", stderr(&o));
}

/// One bad setting, one exit code: a bad MEMKV_TIMEOUT_MS is bad configuration (exit 1) for
/// `admin status` as for the client commands.
#[test]
fn a_bad_memkv_timeout_ms_exits_alike_for_admin_status_and_client_commands() {
    let unused = closed_address();
    let o_client = bare("env-t-client")
        .env("MEMKV_TIMEOUT_MS", "soon")
        .args(["--servers", &unused, "--auth-key", KEY_HEX, "exists", "k"])
        .output()
        .unwrap();
    let o_admin = bare("env-t-admin")
        .env("MEMKV_TIMEOUT_MS", "soon")
        .args(["admin", "status", &unused])
        .output()
        .unwrap();
    assert_eq!(o_client.status.code(), Some(1), "{}", stderr(&o_client));
    assert_eq!(o_admin.status.code(), Some(1), "{}", stderr(&o_admin));
}

/// A server argument that is not `host:port` is a usage error that names it and what is
/// expected, found before anything is contacted (exit 2, for `admin status` and `drive
/// --server` alike), not an unreachable server (exit 5): a URL copied from a dashboard, an
/// empty host, a host with a space or a path.
#[test]
fn a_server_that_is_not_host_port_is_a_usage_error() {
    for server in [
        "bogus",
        "http://127.0.0.1:9900",
        ":9900",
        "bad host:9900",
        "127.0.0.1:9900/v1",
    ] {
        for args in [
            &["admin", "status", server][..],
            &["drive", "list", "--server", server],
        ] {
            let o = bare("admin-bogus")
                .env("MEMKV_TIMEOUT_MS", "2000")
                .args(args)
                .output()
                .unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("{server:?}")) && err.contains("HOST:PORT"),
                "{args:?}: {err}"
            );
        }
    }
}

/// `--servers` is global: it goes after `admin status` as well as before it (docs/cli.md),
/// and the positional SERVER list still works.
#[test]
fn admin_status_takes_the_global_servers_flag_after_the_command() {
    let unused = closed_address();
    for args in [
        &["admin", "status", "--servers", unused.as_str()][..],
        &["--servers", unused.as_str(), "admin", "status"],
        &["admin", "status", unused.as_str()],
    ] {
        let o = bare("admin-servers-flag")
            .env("MEMKV_TIMEOUT_MS", "2000")
            .args(args)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        // Nothing listens there: the table with that server in ERROR, and exit 5.
        assert_eq!(o.status.code(), Some(5), "{args:?}: {out}{}", stderr(&o));
        assert!(out.contains(&format!("{unused}  ERROR")), "{args:?}: {out}");
    }
}

/// A bad flag is named as the flag the user typed, not as the environment variable it stands
/// in for (which may not be set at all).
#[test]
fn a_bad_flag_is_named_as_the_flag() {
    let unused = closed_address();
    let good = [("--servers", unused.as_str()), ("--auth-key", KEY_HEX)];
    for (flag, value) in [
        ("--timeout-ms", "0"),
        ("--servers", "no-port"),
        ("--auth-key", "abcd"),
    ] {
        let mut cmd = bare("flag-name");
        for (other, good_value) in good.iter().filter(|(other, _)| *other != flag) {
            cmd.args([other, good_value]);
        }
        cmd.args([flag, value, "exists", "k"]);
        let o = cmd.output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains(flag) && !err.contains("MEMKV_"),
            "{flag}: {err}"
        );
    }
}

/// A MEMKV_* variable that is not UTF-8 is refused by name (exit 1), not taken as unset: here
/// that would have sent the command to MEMKV_CONFIG's servers instead.
#[test]
fn a_non_utf8_setting_is_refused_not_ignored() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch("non-utf8-env");
    let config = dir.join("client.yaml");
    std::fs::write(
        &config,
        format!(
            "servers: [\"{}\"]\nauth_key: {KEY_HEX}\ntimeout_ms: 2000\n",
            closed_address()
        ),
    )
    .unwrap();
    let o = bare("non-utf8-env-state")
        .env("MEMKV_CONFIG", &config)
        .env(
            "MEMKV_SERVERS",
            std::ffi::OsStr::from_bytes(b"10.0.0.1:9900\xff"),
        )
        .args(["exists", "k"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("MEMKV_SERVERS"), "{err}");
}

/// A server whose admin API serves HTTPS with a self-signed certificate for 127.0.0.1 and
/// localhost; returns it and the certificate's PEM file.
async fn start_https_server(dir: &std::path::Path) -> (memkv_server::Server, std::path::PathBuf) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert_path, key_path) = (dir.join("admin-cert.pem"), dir.join("admin-key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    for _ in 0..50 {
        let data = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = data.local_addr().unwrap().port();
        if port == u16::MAX || std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
            continue;
        }
        drop(data);
        let yaml = format!(
            "network:\n  address: 127.0.0.1:{port}\n  auth_key: {KEY_HEX}\n  tls_cert: {}\n  tls_key: {}\nmemory:\n  max_size: 64 MiB\n",
            cert_path.display(),
            key_path.display()
        );
        let config =
            memkv_server::config::ServerConfig::from_yaml_str(&yaml, "https test").unwrap();
        if let Ok(server) = memkv_server::Server::start(config).await {
            return (server, cert_path);
        }
    }
    panic!("no free pair of adjacent loopback ports");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_status_speaks_https_trusting_a_ca_file_or_nothing() {
    let dir = scratch("https-admin");
    let (server, cert) = start_https_server(&dir).await;
    let addr = server.data_addr().to_string();
    let status = |extra: &[&str]| {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args(["admin", "status", "--json"]).args(extra);
        cmd
    };

    let cert_arg = cert.display().to_string();
    for trust in [vec!["--tls-ca", cert_arg.as_str()], vec!["--insecure"]] {
        let o = run(status(&trust), None).await;
        assert!(o.status.success(), "{trust:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v[0]["ok"], true, "{v}");
        assert_eq!(v[0]["status"]["storage"]["mode"], "memory");
    }

    // The system's trust store does not know a self-signed certificate: refused, and said why.
    let o = run(status(&["--https"]), None).await;
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let error = v[0]["error"].as_str().unwrap().to_lowercase();
    assert!(
        error.contains("https://") && error.contains("certificate"),
        "{error}"
    );

    // Plain HTTP to an HTTPS listener fails too, naming the URL.
    let o = run(status(&[]), None).await;
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v[0]["error"].as_str().unwrap().contains("http://"), "{v}");

    // --tls-ca and --insecure do not go together.
    let o = run(status(&["--tls-ca", &cert_arg, "--insecure"]), None).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
