//! `memkv drive list | status | remove | add` against a running file-mode server, and the
//! admin API's refusals of unsigned, wrongly signed and replayed drive changes. Reads use
//! `pread` (`storage.file_reads`): the test truncates a drive under the server, which a
//! mapping of the file would turn into SIGBUS.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use common::*;
use memkv_proto::AuthKey;
use memkv_proto::admin_auth::sign_admin_request;
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use serde_json::Value;

const EXTENT: u64 = 64 << 10;

fn drive_config(address: &str, drives: &[PathBuf]) -> ServerConfig {
    let mut yaml = format!(
        "network:\n  address: {address}\n  auth_key: {KEY_HEX}\nstorage:\n  mode: file\n  file_reads: pread\n  block_size: 64 KiB\n  drives:\n"
    );
    for d in drives {
        yaml.push_str(&format!(
            "    - media: {}\n      size: 8 MiB\n",
            d.display()
        ));
    }
    ServerConfig::from_yaml_str(&yaml, "drive test").unwrap()
}

/// A file-mode server whose admin API is at data port + 1, where `memkv drive` looks for it.
async fn start(drives: &[PathBuf]) -> Server {
    start_with_admin_at_port_plus_one(|address| drive_config(address, drives)).await
}

async fn drive(addr: &str, key: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = memkv(addr, key);
    cmd.arg("drive").args(args);
    run(cmd, None).await
}

async fn drives_json(addr: &str) -> Vec<Value> {
    let o = drive(addr, KEY_HEX, &["list", "--json"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice::<Value>(&o.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

async fn one_drive(addr: &str, media: &Path) -> Value {
    let o = drive(
        addr,
        KEY_HEX,
        &["status", media.to_str().unwrap(), "--json"],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// How many of `keys` read back (the rest are misses, exit 3).
async fn readable(addr: &str, keys: &[String]) -> usize {
    let mut found = 0;
    for k in keys {
        let mut cmd = memkv(addr, KEY_HEX);
        cmd.args(["get", k]);
        let o = run(cmd, None).await;
        match o.status.code() {
            Some(0) => {
                assert_eq!(o.stdout, format!("value of {k}").as_bytes());
                found += 1;
            }
            Some(3) => {}
            other => panic!("get {k}: {other:?} {}", stderr(&o)),
        }
    }
    found
}

/// One raw HTTP POST to the admin API; returns the status code and body.
fn post(admin: std::net::SocketAddr, path: &str, auth: Option<&str>, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("x-memkv-auth: {a}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let code = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drives_are_listed_removed_and_added_back_on_a_running_server() {
    let dir = scratch("drives");
    let paths: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("d{i}"))).collect();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let server = start(&paths).await;
    let addr = server.data_addr().to_string();
    let media = |i: usize| paths[i].to_str().unwrap().to_owned();

    let listed = drives_json(&addr).await;
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|d| d["state"] == "online"), "{listed:?}");
    let o = drive(&addr, KEY_HEX, &["list"]).await;
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.starts_with("MEDIA"), "{table}");
    assert!(table.contains("online"), "{table}");

    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    for k in &keys {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args(["put", k, "-"]);
        let o = run(cmd, Some(format!("value of {k}").into_bytes())).await;
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let values_on = |d: &Value| (d["used_bytes"].as_u64().unwrap() / EXTENT) as usize;
    let on_d1 = values_on(&one_drive(&addr, &paths[1]).await);
    let on_d2 = values_on(&one_drive(&addr, &paths[2]).await);
    assert!(
        on_d1 > 0 && on_d2 > 0,
        "values are striped over every drive"
    );

    // Remove: its values are misses, new values go elsewhere, and a second remove is a no-op.
    let o = drive(&addr, KEY_HEX, &["remove", &media(1)]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("removed from service"));
    assert_eq!(one_drive(&addr, &paths[1]).await["state"], "removed");
    assert_eq!(readable(&addr, &keys).await, keys.len() - on_d1);
    let used_before = one_drive(&addr, &paths[1]).await["used_bytes"].clone();
    for i in 0..4 {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args(["put", &format!("new{i}"), "-"]);
        assert!(run(cmd, Some(b"x".to_vec())).await.status.success());
    }
    assert_eq!(one_drive(&addr, &paths[1]).await["used_bytes"], used_before);
    let o = drive(&addr, KEY_HEX, &["remove", &media(1)]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing changed"));

    // Refusals, each named: the journal's drive, an unknown drive, the wrong key.
    let o = drive(&addr, KEY_HEX, &["remove", &media(0)]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds the journal"), "{}", stderr(&o));
    let o = drive(&addr, KEY_HEX, &["remove", "/no/such/drive"]).await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("its drives:"), "{}", stderr(&o));
    let o = drive(&addr, WRONG_KEY_HEX, &["add", &media(1)]).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("another auth key"), "{}", stderr(&o));
    assert_eq!(one_drive(&addr, &paths[1]).await["state"], "removed");

    // Add it back: its values are served again.
    let o = drive(&addr, KEY_HEX, &["add", &media(1)]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("back in service"));
    assert_eq!(readable(&addr, &keys).await, keys.len());

    // A drive that no longer carries this store's superblock is refused.
    let o = drive(&addr, KEY_HEX, &["remove", &media(2)]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let blank = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[2])
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&blank, &[0u8; 4096], 0).unwrap();
    let o = drive(&addr, KEY_HEX, &["add", &media(2)]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is blank"), "{}", stderr(&o));
    assert_eq!(one_drive(&addr, &paths[2]).await["state"], "removed");

    // A drive that fails its reads: each failed read is counted and its value dropped (bad
    // sectors); the drive goes offline on its own at its DRIVE_ERROR_LIMIT-th error.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[1])
        .unwrap()
        .set_len(4096)
        .unwrap();
    assert_eq!(readable(&addr, &keys).await, keys.len() - on_d1 - on_d2);
    let d1 = one_drive(&addr, &paths[1]).await;
    let errors = d1["read_errors"].as_u64().unwrap();
    assert!(errors >= 1, "{d1}");
    let expected = if errors >= memkv_store::DRIVE_ERROR_LIMIT {
        "failed"
    } else {
        "online"
    };
    assert_eq!(d1["state"], expected, "{d1}");
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_changes_must_be_signed_once_with_the_auth_key() {
    let dir = scratch("drive-auth");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let server = start(&paths).await;
    let admin = server.admin_addr();
    let body = format!("{{\"media\":\"{}\"}}", paths[1].display());
    let path = "/v1/drives/remove";
    let (code, answer) = tokio::task::spawn_blocking({
        let body = body.clone();
        move || post(admin, path, None, &body)
    })
    .await
    .unwrap();
    assert_eq!(code, 401, "{answer}");
    assert!(answer.contains("not signed"), "{answer}");

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();
    let instance = server.instance();
    let stale = sign_admin_request(
        &key,
        instance,
        "POST",
        path,
        now - 3600,
        [1; 16],
        body.as_bytes(),
    );
    let signed = sign_admin_request(&key, instance, "POST", path, now, [2; 16], body.as_bytes());
    let (stale_answer, first, replay) = tokio::task::spawn_blocking(move || {
        (
            post(admin, path, Some(&stale), &body),
            post(admin, path, Some(&signed), &body),
            post(admin, path, Some(&signed), &body),
        )
    })
    .await
    .unwrap();
    assert_eq!(stale_answer.0, 401, "{}", stale_answer.1);
    assert!(stale_answer.1.contains("clock"), "{}", stale_answer.1);
    assert_eq!(first.0, 200, "{}", first.1);
    assert!(first.1.contains("\"changed\":true"), "{}", first.1);
    assert_eq!(replay.0, 401, "{}", replay.1);
    assert!(replay.1.contains("used before"), "{}", replay.1);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `drive list` and `drive status` only read the unauthenticated /v1/status: they need no auth
/// key (here the server is down, so exit 5 rather than "no auth key configured").
#[test]
fn drive_list_needs_no_auth_key() {
    let unused = closed_address();
    let o = bare("drive-nokey")
        .args(["--timeout-ms", "2000", "drive", "list", "--server", &unused])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!err.contains("no auth key"), "{err}");
    assert_eq!(o.status.code(), Some(5), "{err}");
}

/// `drive status` names a drive as `drive remove` does, and finds it the way the server does:
/// by path, so `dir/d1/` (or `dir//d1`) is the configured `dir/d1`. A script that removes
/// `/srv/memkv/drive1/` and then checks `drive status /srv/memkv/drive1/` sees it removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_status_finds_a_drive_by_the_path_drive_remove_accepts() {
    let dir = scratch("drive-spelling");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let server = start(&paths).await;
    let addr = server.data_addr().to_string();
    let trailing = format!("{}/", paths[1].display());
    let doubled = format!("{}//d1", dir.display());
    let removed = drive(&addr, KEY_HEX, &["remove", &trailing]).await;
    assert!(removed.status.success(), "{}", stderr(&removed));
    for spelled in [&trailing, &doubled] {
        let o = drive(&addr, KEY_HEX, &["status", spelled.as_str(), "--json"]).await;
        assert_eq!(o.status.code(), Some(0), "status {spelled}: {}", stderr(&o));
        let d: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(d["state"], "removed", "{d}");
        assert_eq!(d["media"], paths[1].display().to_string(), "{d}");
    }
    let o = drive(
        &addr,
        KEY_HEX,
        &["status", &format!("{}/d9", dir.display())],
    )
    .await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads one HTTP/1.1 request or response (head and `content-length` body) from `s`.
fn read_message(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                buf.truncate(end + 4 + len);
                return buf;
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "closed mid-message: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A stand-in for a server's admin API that answers `GET /v1/status` with `status` and takes
/// the first POST (answered as a successful removal) or `QUIT`; returns that request. Its data
/// address (admin port - 1) is returned too, for `--server`.
fn stand_in(status: String) -> (String, SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = listener.local_addr().unwrap();
    let data = format!("127.0.0.1:{}", admin.port() - 1);
    let serving = std::thread::spawn(move || {
        loop {
            let (mut s, _) = listener.accept().unwrap();
            let request = read_message(&mut s);
            let body = if request.starts_with(b"GET /v1/status") {
                status.clone()
            } else if request.starts_with(b"POST") {
                r#"{"action":"remove","changed":true,"drive":{"state":"removed"}}"#.to_owned()
            } else {
                return request;
            };
            write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            if request.starts_with(b"POST") {
                return request;
            }
        }
    });
    (data, admin, serving)
}

/// Servers of a fleet share one auth key and usually the same drive names, and the admin API
/// is plain HTTP by default: a drive change `memkv drive remove` signed for one server must not
/// take that drive out on another when its bytes are captured and sent there. The signature
/// names the instance the first server's `/v1/status` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_change_signed_for_one_server_is_refused_by_another() {
    let dir = scratch("drive-replay");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let other = start(&paths).await;
    let other_admin = other.admin_addr();
    let media = paths[1].display().to_string();

    let status = r#"{"instance":"00112233445566778899aabbccddeeff","storage":{"mode":"file"}}"#;
    let (a_data, _, recorder) = stand_in(status.to_owned());
    let out = drive(&a_data, KEY_HEX, &["remove", &media, "--server", &a_data]).await;
    assert!(
        out.status.success(),
        "drive remove against A: {}",
        stderr(&out)
    );
    let captured = recorder.join().unwrap();
    let header = String::from_utf8_lossy(&captured).to_ascii_lowercase();
    assert!(
        header.contains("x-memkv-auth: v2 00112233445566778899aabbccddeeff "),
        "{header}"
    );

    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(other_admin).unwrap();
        s.write_all(&captured).unwrap();
        String::from_utf8_lossy(&read_message(&mut s)).into_owned()
    })
    .await
    .unwrap();
    let health = drives_json(&other.data_addr().to_string()).await;
    other.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "a removal signed for {a_data} was accepted by another server: {answer}"
    );
    assert!(answer.contains("another server"), "{answer}");
    assert!(health.iter().all(|d| d["state"] == "online"), "{health:?}");
}

/// A server too old to show an instance id cannot verify what this memkv signs: the change is
/// not sent, and the error says which side is older (exit 7, versions do not fit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_change_to_a_server_that_shows_no_instance_is_not_sent() {
    let (data, admin, serving) = stand_in(r#"{"storage":{"mode":"file"}}"#.to_owned());
    let o = drive(
        &data,
        KEY_HEX,
        &["remove", "/dev/nvme1n1", "--server", &data],
    )
    .await;
    // Whatever the CLI did, let the stand-in go: it returns the first POST, or this QUIT.
    let mut quit = std::net::TcpStream::connect(admin).unwrap();
    quit.write_all(b"QUIT / HTTP/1.1\r\n\r\n").unwrap();
    let last = serving.join().unwrap();
    assert!(last.starts_with(b"QUIT"), "the change was sent");
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("older than this memkv"),
        "{}",
        stderr(&o)
    );
}
