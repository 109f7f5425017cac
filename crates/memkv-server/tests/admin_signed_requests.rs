//! The admin API's signed drive changes on a real file-mode server, over HTTP and HTTPS.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod support;

use memkv_proto::AuthKey;
use memkv_proto::admin_auth::sign_admin_request;
use memkv_server::Server;
use memkv_server::config::ServerConfig;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("memkv-admin-signed-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(drives: &[PathBuf]) -> ServerConfig {
    let mut yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nstorage:\n  mode: file\n  file_reads: pread\n  block_size: 64 KiB\n  drives:\n"
    );
    for d in drives {
        yaml.push_str(&format!(
            "    - media: {}\n      size: 8 MiB\n",
            d.display()
        ));
    }
    ServerConfig::from_yaml_str(&yaml, "test").unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

/// One raw HTTP/1.1 POST; `auth` is written as raw header bytes. Returns (code, body).
fn post_raw(admin: SocketAddr, path: &str, auth: Option<&[u8]>, body: &[u8]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    if let Some(a) = auth {
        req.extend_from_slice(b"x-memkv-auth: ");
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body);
    s.write_all(&req).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (code, body)
}

fn signed_post(
    admin: SocketAddr,
    instance: &str,
    path: &str,
    nonce: u8,
    body: &str,
) -> (u16, String) {
    let h = sign_admin_request(
        &key(),
        instance,
        "POST",
        path,
        now(),
        [nonce; 16],
        body.as_bytes(),
    );
    post_raw(admin, path, Some(h.as_bytes()), body.as_bytes())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// A signed remove that names the drive by an equivalent spelling of its configured path
/// (`dir//d1` for `dir/d1`) is carried out, and its answer describes that drive (it used to be
/// looked up by exact string and come back empty, and `memkv drive remove` printed "(state )").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_change_answer_describes_the_drive_it_changed() {
    let dir = scratch("alias");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let server = Server::start(config(&paths)).await.unwrap();
    let admin = server.admin_addr();
    let alias = format!("{}//d1", dir.display());
    let body = serde_json::json!({ "media": alias }).to_string();
    let instance = server.instance().to_owned();
    let (code, answer) =
        blocking(move || signed_post(admin, &instance, "/v1/drives/remove", 1, &body)).await;
    assert_eq!(code, 200, "{answer}");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["changed"], true, "{answer}");
    // The drive was in fact removed.
    let (_, status) = blocking(move || {
        let mut s = std::net::TcpStream::connect(admin).unwrap();
        s.write_all(b"GET /v1/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        (0, raw)
    })
    .await;
    assert!(status.contains("\"state\":\"removed\""), "{status}");
    // ...but the answer does not say which drive, nor its state.
    assert_eq!(
        v["drive"]["state"], "removed",
        "the answer's drive object is empty: {answer}"
    );
    assert_eq!(
        v["drive"]["media"],
        paths[1].display().to_string(),
        "{answer}"
    );
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A signature is bound to its path and body (over HTTP, on a real server); a hostile,
/// unsigned client cannot make the server buffer an unbounded body; malformed headers and
/// bodies are 4xx, never 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_bind_path_and_body_and_hostile_requests_are_4xx() {
    let dir = scratch("bind");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let server = Server::start(config(&paths)).await.unwrap();
    let admin = server.admin_addr();
    let media = paths[1].display().to_string();
    let body = serde_json::json!({ "media": media }).to_string();
    let other = serde_json::json!({ "media": paths[0].display().to_string() }).to_string();
    let instance = server.instance().to_owned();
    blocking(move || {
        let t = now();
        // Signed for remove, sent to add.
        let h = sign_admin_request(&key(), &instance, "POST", "/v1/drives/remove", t, [3; 16], body.as_bytes());
        let (code, a) = post_raw(admin, "/v1/drives/add", Some(h.as_bytes()), body.as_bytes());
        assert_eq!(code, 401, "{a}");
        assert!(a.contains("does not match"), "{a}");
        // Signed for one body, sent with another.
        let h = sign_admin_request(&key(), &instance, "POST", "/v1/drives/remove", t, [4; 16], body.as_bytes());
        let (code, a) = post_raw(admin, "/v1/drives/remove", Some(h.as_bytes()), other.as_bytes());
        assert_eq!(code, 401, "{a}");
        // A signature from the future beyond the window.
        let h = sign_admin_request(&key(), &instance, "POST", "/v1/drives/remove", t + 3600, [5; 16], body.as_bytes());
        let (code, a) = post_raw(admin, "/v1/drives/remove", Some(h.as_bytes()), body.as_bytes());
        assert_eq!(code, 401, "{a}");
        // Malformed headers: garbage, non-UTF-8 bytes, right shape but no hex, huge numbers.
        let huge = format!("v2 {instance} 99999999999999999999999 {} {}", "0".repeat(32), "0".repeat(64));
        let accented = format!("v2 {instance} 1 ééééééééééééééé\u{e9} 00");
        for bad in [
            &b"garbage"[..],
            b"v2 \xff\xfe 00 00",
            huge.as_bytes(),
            accented.as_bytes(),
        ] {
            let (code, a) = post_raw(admin, "/v1/drives/remove", Some(bad), body.as_bytes());
            assert_eq!(code, 401, "{a}");
        }
        // Validly signed, but not the documented body: 400.
        let (code, a) = signed_post(admin, &instance, "/v1/drives/remove", 6, "not json");
        assert_eq!(code, 400, "{a}");
        let (code, a) = signed_post(admin, &instance, "/v1/drives/remove", 7, "{\"media\": 7}");
        assert_eq!(code, 400, "{a}");
        // Nothing changed so far.
        // An unsigned 64 MiB body is cut off at a bound (axum's default 2 MiB): 413, not
        // buffered whole.
        let mut s = std::net::TcpStream::connect(admin).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "POST /v1/drives/remove HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            64u64 << 20
        )
        .unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 64 << 10];
            for _ in 0..1024 {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let _ = s.shutdown(std::net::Shutdown::Both);
        writer.join().unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with("HTTP/1.1 413"), "huge body not refused: {text:?}");
    })
    .await;
    let (code, h) = support_get(admin, "/v1/health").await;
    assert_eq!(code, 200, "{h}");
    assert!(h.contains("\"healthy\""), "no drive changed: {h}");
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

async fn support_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let path = path.to_owned();
    blocking(move || {
        let mut s = std::net::TcpStream::connect(admin).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let code = raw[9..12].parse().unwrap();
        (
            code,
            raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned(),
        )
    })
    .await
}

/// The same contract over HTTPS (network.tls_cert/tls_key): unsigned 401, signed 200, the
/// same signature again 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_drive_changes_over_https_are_checked_like_http() {
    use support::fixture;

    let dir = scratch("https");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let mut yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n  tls_cert: {}\n  tls_key: {}\nstorage:\n  mode: file\n  file_reads: pread\n  block_size: 64 KiB\n  drives:\n",
        fixture("test-only-cert.pem").display(),
        fixture("test-only-key.pem").display()
    );
    for d in &paths {
        yaml.push_str(&format!(
            "    - media: {}\n      size: 8 MiB\n",
            d.display()
        ));
    }
    let server = Server::start(ServerConfig::from_yaml_str(&yaml, "test").unwrap())
        .await
        .unwrap();
    let admin = server.admin_addr();
    let body = serde_json::json!({ "media": paths[1].display().to_string() }).to_string();
    let instance = server.instance().to_owned();
    blocking(move || {
        let https_post = |auth: Option<&str>| -> (u16, String) {
            let mut s = support::tls_stream(admin);
            let auth = auth.map_or(String::new(), |a| format!("x-memkv-auth: {a}\r\n"));
            write!(
                s,
                "POST /v1/drives/remove HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{auth}content-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut raw = Vec::new();
            let _ = s.read_to_end(&mut raw);
            let text = String::from_utf8_lossy(&raw).into_owned();
            let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
            (code, text)
        };
        let (code, a) = https_post(None);
        assert_eq!(code, 401, "{a}");
        let h = sign_admin_request(&key(), &instance, "POST", "/v1/drives/remove", now(), [9; 16], body.as_bytes());
        let (code, a) = https_post(Some(&h));
        assert_eq!(code, 200, "{a}");
        assert!(a.contains("\"changed\":true"), "{a}");
        let (code, a) = https_post(Some(&h));
        assert_eq!(code, 401, "{a}");
        assert!(a.contains("used before"), "{a}");
    })
    .await;
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each start draws a new instance id, shown in `/v1/status`, and a signature names the
/// instance it was made for: a captured drive change is refused by another server sharing the
/// key and by the same server after a restart (whose replay memory starts empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_is_good_on_one_server_until_it_restarts() {
    let dir = scratch("instance");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let first = Server::start(config(&paths)).await.unwrap();
    let (_, status) = support_get(first.admin_addr(), "/v1/status").await;
    let shown: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(shown["instance"], first.instance(), "{status}");
    let signed_for = first.instance().to_owned();
    first.shutdown().await.unwrap();

    let other_dir = scratch("instance-other");
    let other_paths: Vec<PathBuf> = (0..2).map(|i| other_dir.join(format!("d{i}"))).collect();
    let restarted = Server::start(config(&paths)).await.unwrap();
    let other = Server::start(config(&other_paths)).await.unwrap();
    assert_ne!(restarted.instance(), signed_for);
    assert_ne!(other.instance(), signed_for);
    for (server, media) in [(&restarted, &paths[1]), (&other, &other_paths[1])] {
        let admin = server.admin_addr();
        let body = serde_json::json!({ "media": media.display().to_string() }).to_string();
        let signed_for = signed_for.clone();
        let (code, answer) =
            blocking(move || signed_post(admin, &signed_for, "/v1/drives/remove", 1, &body)).await;
        assert_eq!(code, 401, "{answer}");
        assert!(answer.contains("another server"), "{answer}");
        let (_, health) = support_get(admin, "/v1/health").await;
        assert!(health.contains("\"healthy\""), "{health}");
    }
    restarted.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other_dir);
}

/// A client that still signs the old way (v1: no server instance) is told that it is older
/// than the server, not that its signature is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_signature_is_refused_as_a_client_older_than_the_server() {
    let dir = scratch("v1");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("d{i}"))).collect();
    let server = Server::start(config(&paths)).await.unwrap();
    let admin = server.admin_addr();
    let body = serde_json::json!({ "media": paths[1].display().to_string() }).to_string();
    let v1 = format!("v1 {} {} {}", now(), "07".repeat(16), "00".repeat(32));
    let (code, answer) = blocking(move || {
        post_raw(
            admin,
            "/v1/drives/remove",
            Some(v1.as_bytes()),
            body.as_bytes(),
        )
    })
    .await;
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 401, "{answer}");
    assert!(answer.contains("older than the server"), "{answer}");
}
