//! Direct mode reads a TCP put's value straight into the drives' registered buffers: raw
//! frames against a real server on loopback, for what that path must still refuse (a bad MAC
//! before a byte is written, a wrong checksum) and what it must survive (a client gone
//! mid-value, a payload-MAC session, which takes the usual path).

use std::time::Duration;

mod support;

use memkv_proto::{AuthKey, Opcode, Status, checksum};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::{connect, connect_with};
use tokio::io::AsyncWriteExt;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

/// A scratch directory for drive files on a disk filesystem (O_DIRECT is refused by tmpfs; the
/// target directory is a disk filesystem even where /tmp is not).
fn drive_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memkv-server-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A direct-mode server on one 48 MiB drive file in `dir`, 1 MiB extents.
async fn direct_server(dir: &std::path::Path) -> Server {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nstorage:\n  mode: direct\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 48 MiB\n",
        dir.join("d0").display()
    );
    let config = ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config");
    Server::start(config).await.unwrap()
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

async fn used_bytes(server: &Server) -> u64 {
    let (code, body) = support::http_get(server.admin_addr(), "/v1/status").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    status["storage"]["used_bytes_total"]
        .as_u64()
        .unwrap_or_else(|| panic!("no storage.used_bytes_total in {body}"))
}

#[tokio::test]
async fn direct_puts_store_what_was_sent_and_refuse_what_was_not() {
    let dir = drive_dir("direct-puts");
    let server = direct_server(&dir).await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    // Sizes around the 1 MiB buffers and extents, and one ending inside a sector.
    for (n, len) in [1usize, 4095, 1 << 20, (1 << 20) + 4097, 3_000_000]
        .into_iter()
        .enumerate()
    {
        let v = value(len, n as u8);
        let k = format!("k{n}");
        assert_eq!(c.call(Opcode::TcpPut, k.as_bytes(), &v).await.0, Status::Ok);
        let (status, got) = c.call(Opcode::TcpGet, k.as_bytes(), &[]).await;
        assert_eq!(status, Status::Ok);
        assert!(got == v, "{k} came back different");
    }
    let used = used_bytes(&server).await;

    // A checksum that does not match the bytes: refused, nothing stored, the room freed, and
    // the connection stays.
    let v = value(2 << 20, 9);
    let (h, body) = c
        .call_with_checksum(Opcode::TcpPut, b"wrong", &v, checksum::of(&v) ^ 1)
        .await;
    assert_eq!(
        h.status,
        Status::ChecksumMismatch,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(
        c.call(Opcode::TcpGet, b"wrong", &[]).await.0,
        Status::NotFound
    );
    assert_eq!(used_bytes(&server).await, used);

    // A MAC that does not verify: the frame is refused before its value is read, and the
    // connection closes.
    let mut f = c.frame(Opcode::TcpPut, b"forged", &v);
    f[40] ^= 1;
    c.send(&f).await;
    let (h, _) = c.recv().await.expect("a refusal");
    assert_eq!(h.status, Status::Unauthorized);
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    assert_eq!(
        c.call(Opcode::TcpGet, b"forged", &[]).await.0,
        Status::NotFound
    );

    // Clients that leave halfway through their values: their room comes back.
    for i in 0..6u8 {
        let mut gone = connect(server.data_addr(), key()).await.unwrap();
        let v = value(4 << 20, i);
        let f = gone.frame(Opcode::TcpPut, format!("half{i}").as_bytes(), &v);
        gone.stream.write_all(&f[..f.len() / 2]).await.unwrap();
        drop(gone);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while used_bytes(&server).await != used {
        assert!(
            tokio::time::Instant::now() < deadline,
            "abandoned values kept their room"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A payload-MAC session reads its values the usual way; they store the same.
    let mut m = connect_with(server.data_addr(), key(), true).await.unwrap();
    assert!(m.session.payload_mac());
    let v = value(1_500_000, 77);
    assert_eq!(m.call(Opcode::TcpPut, b"maced", &v).await.0, Status::Ok);
    assert!(c.call(Opcode::TcpGet, b"maced", &[]).await.1 == v);
    // Sent from the drive's buffers in two pieces, under a MAC over the whole payload.
    assert!(m.call(Opcode::TcpGet, b"maced", &[]).await.1 == v);
    server.shutdown().await.unwrap();

    // Everything acknowledged is there after a restart.
    let server = direct_server(&dir).await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let (status, got) = c.call(Opcode::TcpGet, b"k4", &[]).await;
    assert_eq!(status, Status::Ok);
    assert!(got == value(3_000_000, 4));
    assert!(c.call(Opcode::TcpGet, b"maced", &[]).await.1 == value(1_500_000, 77));
    for i in 0..6u8 {
        let k = format!("half{i}");
        assert_eq!(
            c.call(Opcode::TcpGet, k.as_bytes(), &[]).await.0,
            Status::NotFound
        );
    }
    drop(c);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
