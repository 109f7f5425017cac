//! `memkv start` under a Type=notify service manager: READY=1 once it serves, STOPPING=1 when
//! SIGTERM starts the drain. The test plays systemd's part with a datagram socket.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// The next notification, or a failure that shows what the server said.
fn next_message(socket: &UnixDatagram, server: &mut Child, log: &Path) -> String {
    let mut buf = [0u8; 512];
    match socket.recv(&mut buf) {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Err(e) => {
            let status = server.try_wait().unwrap();
            let _ = server.kill();
            panic!(
                "no notification within the deadline ({e}); server exit status {status:?}; \
                 its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
}

#[test]
fn start_tells_the_service_manager_when_it_serves_and_when_it_stops() {
    let dir = scratch("notify");
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let config = dir.join("config.yaml");
    let log = dir.join("server.log");
    std::fs::write(
        &config,
        format!(
            "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\n  prefault: false\n"
        ),
    )
    .unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_memkv"))
        .arg("start")
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let ready = next_message(&socket, &mut server, &log);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let stopping = next_message(&socket, &mut server, &log);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(server.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(dir);
}
