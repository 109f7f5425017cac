//! A memory-mode server kept full over TCP: values overwritten while pinned, puts refused for
//! their checksum or abandoned mid-value, evictions all along. Once every pin is released and
//! every key deleted, `/v1/status` shows not a byte used: nothing leaked, nothing freed twice.

mod support;

use std::time::{Duration, Instant};

use memkv_proto::messages::{LookupRequest, LookupResponse, ReleaseRequest};
use memkv_proto::{AuthKey, Opcode, Status, checksum};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::connect;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// Eight granules of 2 MiB.
const ARENA: usize = 16 << 20;

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

fn config() -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 16 MiB\n"
    );
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

async fn storage(server: &Server) -> serde_json::Value {
    let (code, body) = support::http_get(server.admin_addr(), "/v1/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["storage"].clone()
}

#[tokio::test]
async fn a_full_arena_under_pins_and_refused_puts_ends_with_nothing_used() {
    let server = Server::start(config()).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    for round in 0..24u8 {
        // 3 MiB values (two granules each) over six keys: the arena holds four.
        let k = [b'k', round % 6];
        let value = vec![round; 3 << 20];
        assert_eq!(c.call(Opcode::TcpPut, &k, &value).await.0, Status::Ok);
        let (status, body) = c
            .call(Opcode::Lookup, &k, &LookupRequest { lease_ms: 0 }.encode())
            .await;
        assert_eq!(status, Status::Ok, "{}", String::from_utf8_lossy(&body));
        let pin = LookupResponse::decode(&body).unwrap();
        assert_eq!(pin.checksum, checksum::of(&value));
        // Overwritten while pinned: the pin keeps the old bytes, the key has the new ones.
        let newer = vec![round.wrapping_add(100); 3 << 20];
        assert_eq!(c.call(Opcode::TcpPut, &k, &newer).await.0, Status::Ok);
        // A put refused for its checksum, in a full arena, stores nothing and keeps no room.
        let (h, _) = c
            .call_with_checksum(Opcode::TcpPut, b"bad", &value, 12345)
            .await;
        assert_eq!(h.status, Status::ChecksumMismatch);
        // A client that leaves half-way through its value.
        let mut quitter = connect(server.data_addr(), key()).await.unwrap();
        let frame = quitter.frame(Opcode::TcpPut, b"quit", &value);
        quitter.send(&frame[..frame.len() / 2]).await;
        drop(quitter);
        let released = ReleaseRequest { pin: pin.pin }.encode();
        assert_eq!(c.call(Opcode::Release, &[], &released).await.0, Status::Ok);
        let (status, got) = c.call(Opcode::TcpGet, &k, &[]).await;
        assert_eq!(status, Status::Ok);
        assert!(got == newer, "round {round}: the key lost its newest value");
    }
    let s = storage(&server).await;
    assert!(s["evictions"].as_u64().unwrap() > 0, "{s}");
    for k in 0..6u8 {
        c.call(Opcode::Delete, &[b'k', k], &[]).await;
    }
    assert_eq!(
        c.call(Opcode::Exists, b"bad", &[]).await.0,
        Status::NotFound
    );
    // The abandoned puts' reservations are given back as their connections close.
    let deadline = Instant::now() + Duration::from_secs(5);
    let s = loop {
        let s = storage(&server).await;
        if s["used_bytes_total"] == 0 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(s["used_bytes_total"], 0, "{s}");
    assert_eq!(s["value_bytes_total"], 0, "{s}");
    assert_eq!(s["blocks"], 0, "{s}");
    assert_eq!(s["free_bytes_total"], s["usable_bytes_total"], "{s}");
    // The whole arena is one value again; a byte more is refused by name, and the connection
    // stays.
    let all = vec![7u8; ARENA];
    assert_eq!(c.call(Opcode::TcpPut, b"all", &all).await.0, Status::Ok);
    let (status, body) = c.call(Opcode::TcpPut, b"more", &vec![7u8; ARENA + 1]).await;
    let msg = String::from_utf8_lossy(&body);
    assert_eq!(status, Status::TooLarge, "{msg}");
    assert!(msg.contains(&ARENA.to_string()), "{msg}");
    assert_eq!(c.call(Opcode::Exists, b"all", &[]).await.0, Status::Ok);
    server.shutdown().await.unwrap();
}
