//! The TCP data plane against a raw protocol driver: round trips, pipelining, and hostile
//! input that must be refused without harming the server or other clients.

use std::time::Duration;

mod support;

use memkv_proto::coverage::Coverage;
use memkv_proto::{AuthKey, Header, Limits, Opcode, ProtoError, Status, batch, checksum};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::http_get;
use support::raw::{connect, connect_at, read_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn config(extra: &str) -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 64 MiB\n{extra}"
    );
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

/// `network.tcp_congestion`: a connection to a server on Reno round-trips a 17-segment value
/// (the size BBR stalls on loopback); a name the kernel lacks stops the start, by key.
#[tokio::test]
async fn tcp_congestion_is_set_on_data_connections_or_refused_at_start() {
    let on = |algorithm: &str| {
        let yaml = format!(
            "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n  tcp_congestion: {algorithm}\nmemory:\n  max_size: 64 MiB\n"
        );
        ServerConfig::from_yaml_str(&yaml, "test").unwrap()
    };
    let server = Server::start(on("reno")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let value = vec![7u8; 1040 << 10];
    assert_eq!(c.call(Opcode::TcpPut, b"k", &value).await.0, Status::Ok);
    let (status, got) = c.call(Opcode::TcpGet, b"k", &[]).await;
    assert_eq!(status, Status::Ok);
    assert!(got == value);
    server.shutdown().await.unwrap();

    let err = Server::start(on("nosuchalgo"))
        .await
        .err()
        .expect("an unknown algorithm stops the start")
        .to_string();
    assert!(
        err.contains("network.tcp_congestion") && err.contains("nosuchalgo"),
        "{err}"
    );
}

#[tokio::test]
async fn put_get_delete_exists_round_trip_bit_exact() {
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    for size in [0usize, 1, 4096, 1 << 20, 5 << 20] {
        let value: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let key = format!("k{size}");
        assert_eq!(
            c.call(Opcode::TcpPut, key.as_bytes(), &value).await.0,
            Status::Ok
        );
        let (status, got) = c.call(Opcode::TcpGet, key.as_bytes(), &[]).await;
        assert_eq!(status, Status::Ok);
        assert!(got == value, "size {size} differs");
        assert_eq!(
            c.call(Opcode::Exists, key.as_bytes(), &[]).await.0,
            Status::Ok
        );
        assert_eq!(
            c.call(Opcode::TcpDelete, key.as_bytes(), &[]).await.0,
            Status::Ok
        );
        assert_eq!(
            c.call(Opcode::TcpGet, key.as_bytes(), &[]).await.0,
            Status::NotFound
        );
        assert_eq!(
            c.call(Opcode::Exists, key.as_bytes(), &[]).await.0,
            Status::NotFound
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn pipelined_requests_complete_and_batches_work() {
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let mut wire = Vec::new();
    for i in 0..100u32 {
        wire.extend(c.frame(Opcode::TcpPut, format!("p{i}").as_bytes(), &i.to_le_bytes()));
    }
    c.send(&wire).await;
    let mut ids = Vec::new();
    for _ in 0..100 {
        let (h, _) = c.recv().await.unwrap();
        assert_eq!(h.status, Status::Ok);
        ids.push(h.request_id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 100);
    let keys: Vec<String> = (0..100u32)
        .map(|i| format!("p{i}"))
        .chain(["missing".into()])
        .collect();
    let (status, body) = c
        .call(Opcode::BatchGet, &[], &batch::encode_keys(&keys))
        .await;
    assert_eq!(status, Status::Ok);
    let items = batch::decode_get_response(&body, &Limits::DEFAULT).unwrap();
    for (i, item) in items.iter().take(100).enumerate() {
        assert_eq!(item.status, Status::Ok);
        assert_eq!(item.value, (i as u32).to_le_bytes());
        assert_eq!(item.checksum, checksum::of(item.value));
    }
    assert_eq!(items[100].status, Status::NotFound);
    let (_, body) = c
        .call(Opcode::BatchExists, &[], &batch::encode_keys(&keys))
        .await;
    let st = batch::decode_statuses(&body, &Limits::DEFAULT).unwrap();
    assert_eq!(st.iter().filter(|s| **s == Status::Ok).count(), 100);
    let put = [
        batch::PutItem {
            key: b"bad",
            value: b"x",
            checksum: 7,
        },
        batch::PutItem {
            key: b"good",
            value: b"y",
            checksum: checksum::of(b"y"),
        },
    ];
    let (_, body) = c
        .call(Opcode::BatchPut, &[], &batch::encode_put_request(&put))
        .await;
    assert_eq!(
        batch::decode_statuses(&body, &Limits::DEFAULT).unwrap(),
        vec![Status::ChecksumMismatch, Status::Ok]
    );
    server.shutdown().await.unwrap();
}

fn two_items() -> Vec<u8> {
    let values: [&[u8]; 2] = [&[1u8; 4096], &[2u8; 100]];
    let items: Vec<batch::PutItem<'_>> = ["b0", "b1"]
        .iter()
        .zip(values)
        .map(|(key, value)| batch::PutItem {
            key: key.as_bytes(),
            value,
            checksum: checksum::of(value),
        })
        .collect();
    batch::encode_put_request(&items)
}

/// Protocol 2 leaves a batch's values out of its frame checksum; a version 1 client, whose
/// batches are checksummed whole, is still served (and answered in kind).
#[tokio::test]
async fn batch_checksums_follow_the_sessions_protocol_version() {
    let server = Server::start(config("")).await.unwrap();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();
    let payload = two_items();
    for version in [1, 2] {
        let mut c = connect_at(version, server.data_addr(), key.clone(), false)
            .await
            .unwrap();
        assert_eq!(c.session.version(), version);
        // `call` seals and verifies by the session's coverage.
        let (status, body) = c.call(Opcode::BatchPut, &[], &payload).await;
        assert_eq!(status, Status::Ok, "version {version}");
        assert_eq!(
            batch::decode_statuses(&body, &Limits::DEFAULT).unwrap(),
            vec![Status::Ok, Status::Ok]
        );
        let (status, body) = c
            .call(Opcode::BatchGet, &[], &batch::encode_keys(&["b0", "b1"]))
            .await;
        assert_eq!(status, Status::Ok);
        let items = batch::decode_get_response(&body, &Limits::DEFAULT).unwrap();
        assert_eq!(items[0].value, &[1u8; 4096][..]);
        assert_eq!(items[1].value, &[2u8; 100][..]);

        // The other version's checksum of the same request is a mismatch.
        let other = if version == 1 {
            Coverage::PutRequestItems.checksum(&payload)
        } else {
            checksum::of(&payload)
        };
        let (h, _) = c
            .call_with_checksum(Opcode::BatchPut, &[], &payload, other)
            .await;
        assert_eq!(h.status, Status::ChecksumMismatch, "version {version}");
    }
    server.shutdown().await.unwrap();
}

/// In protocol 2 a damaged value passes the frame checksum and fails its own item only.
#[tokio::test]
async fn a_damaged_value_in_a_batch_fails_its_item_only() {
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let payload = two_items();
    let sum = Coverage::PutRequestItems.checksum(&payload);
    let mut damaged = payload.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    let (h, body) = c
        .call_with_checksum(Opcode::BatchPut, &[], &damaged, sum)
        .await;
    assert_eq!(h.status, Status::Ok);
    assert_eq!(
        batch::decode_statuses(&body, &Limits::DEFAULT).unwrap(),
        vec![Status::Ok, Status::ChecksumMismatch]
    );
    let (status, _) = c.call(Opcode::TcpGet, b"b1", &[]).await;
    assert_eq!(status, Status::NotFound);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_put_with_a_wrong_checksum_is_refused_and_not_stored() {
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    c.next_id += 1;
    let mut h = Header::request(Opcode::TcpPut, c.next_id);
    let value = vec![5u8; 10_000];
    let head = c
        .session
        .sealer
        .seal_with_checksum(&mut h, b"k", &[&value], 12345);
    let mut wire = head.to_vec();
    wire.extend_from_slice(b"k");
    wire.extend_from_slice(&value);
    c.send(&wire).await;
    let (h, body) = c.recv().await.unwrap();
    assert_eq!(
        h.status,
        Status::ChecksumMismatch,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(c.call(Opcode::Exists, b"k", &[]).await.0, Status::NotFound);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn hostile_clients_are_refused_and_others_keep_working() {
    let server = Server::start(config("")).await.unwrap();
    let addr = server.data_addr();
    let mut good = connect(addr, AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    assert_eq!(
        good.call(Opcode::TcpPut, b"stay", b"here").await.0,
        Status::Ok
    );

    // Wrong key: the handshake is refused with a named error.
    match connect(addr, AuthKey::from_bytes([9; 32])).await {
        Err(ProtoError::Refused { status, message }) => {
            assert_eq!(status, Status::Unauthorized);
            assert!(message.contains("wrong auth key"), "{message}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("wrong key accepted"),
    }

    // A replayed frame closes that connection with Unauthorized.
    let mut c = connect(addr, AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let f = c.frame(Opcode::Ping, &[], b"x");
    c.send(&f).await;
    c.recv().await.unwrap();
    c.send(&f).await;
    let (h, body) = c.recv().await.unwrap();
    assert_eq!(h.status, Status::Unauthorized);
    assert!(String::from_utf8_lossy(&body).contains("sequence"));
    assert!(c.recv().await.is_err(), "connection should be closed");

    // An oversized length is refused before anything is allocated.
    let mut c = connect(addr, AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let mut f = c.frame(Opcode::TcpPut, b"k", b"v");
    f[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    c.send(&f).await;
    let (_, raw, body) = read_frame(&mut c.stream, &Limits::DEFAULT).await.unwrap();
    let h = Header::decode(&raw, &Limits::DEFAULT).unwrap();
    assert_eq!(h.status, Status::TooLarge);
    assert!(
        String::from_utf8_lossy(&body).contains("exceeds the limit"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    // Garbage instead of a handshake.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xAB; 200]).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("server closes");

    // A truncated handshake that then goes silent does not block anyone else.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&memkv_proto::MAGIC).await.unwrap();

    assert_eq!(
        good.call(Opcode::TcpGet, b"stay", &[]).await,
        (Status::Ok, b"here".to_vec())
    );
    drop(s);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn file_mode_keeps_acknowledged_blocks_across_restart() {
    let dir = std::env::temp_dir().join(format!("memkv-server-file-{}", std::process::id()));
    drive_mode_keeps_acknowledged_blocks_across_restart(dir, "file").await;
}

#[tokio::test]
async fn direct_mode_keeps_acknowledged_blocks_across_restart() {
    // O_DIRECT needs a disk filesystem: the target directory is one even where /tmp is tmpfs.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memkv-server-direct-{}", std::process::id()));
    drive_mode_keeps_acknowledged_blocks_across_restart(dir, "direct").await;
}

async fn drive_mode_keeps_acknowledged_blocks_across_restart(dir: std::path::PathBuf, mode: &str) {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let extra = format!(
        "storage:\n  mode: {mode}\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 64 MiB\n    - media: {}\n      size: 64 MiB\n",
        dir.join("d0").display(),
        dir.join("d1").display()
    );
    let values: Vec<Vec<u8>> = (0..20usize)
        .map(|i| (0..i * 50_000 + 1).map(|j| (j ^ i) as u8).collect())
        .collect();
    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            c.call(Opcode::TcpPut, format!("f{i}").as_bytes(), v)
                .await
                .0,
            Status::Ok
        );
    }
    assert_eq!(c.call(Opcode::TcpDelete, b"f3", &[]).await.0, Status::Ok);
    drop(c);
    server.shutdown().await.unwrap();

    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    for (i, v) in values.iter().enumerate() {
        let (status, got) = c
            .call(Opcode::TcpGet, format!("f{i}").as_bytes(), &[])
            .await;
        if i == 3 {
            assert_eq!(status, Status::NotFound);
        } else {
            assert_eq!(status, Status::Ok, "f{i}");
            assert!(&got == v, "f{i} differs");
        }
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

async fn allocate_three_bytes(
    c: &mut support::raw::Raw,
) -> memkv_proto::messages::AllocateResponse {
    use memkv_proto::messages::*;
    let request = AllocateRequest {
        len: 3,
        lease_ms: 0,
    }
    .encode();
    let (status, body) = c.call(Opcode::Allocate, b"two", &request).await;
    assert_eq!(status, Status::Ok, "{}", String::from_utf8_lossy(&body));
    AllocateResponse::decode(&body).unwrap()
}

#[tokio::test]
async fn two_phase_put_and_pinned_lookup_over_tcp_control() {
    use memkv_proto::messages::*;
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let alloc = allocate_three_bytes(&mut c).await;
    // Nothing was written into the reservation (no RDMA here): zeros commit with their checksum.
    let wrong = CommitRequest {
        reservation: alloc.reservation,
        checksum: 1,
    };
    assert_eq!(
        c.call(Opcode::Commit, &[], &wrong.encode()).await.0,
        Status::ChecksumMismatch
    );
    let alloc = allocate_three_bytes(&mut c).await;
    assert_eq!(
        c.call(Opcode::Exists, b"two", &[]).await.0,
        Status::NotFound,
        "reservations are invisible"
    );
    let commit = CommitRequest {
        reservation: alloc.reservation,
        checksum: checksum::of(&[0, 0, 0]),
    };
    assert_eq!(
        c.call(Opcode::Commit, &[], &commit.encode()).await.0,
        Status::Ok
    );
    let (status, body) = c
        .call(
            Opcode::Lookup,
            b"two",
            &LookupRequest { lease_ms: 100 }.encode(),
        )
        .await;
    assert_eq!(status, Status::Ok);
    let pin = LookupResponse::decode(&body).unwrap();
    assert_eq!((pin.len, pin.checksum), (3, checksum::of(&[0, 0, 0])));
    assert_eq!(
        c.call(
            Opcode::Release,
            &[],
            &ReleaseRequest { pin: pin.pin }.encode()
        )
        .await
        .0,
        Status::Ok
    );
    assert_eq!(
        c.call(
            Opcode::Release,
            &[],
            &ReleaseRequest { pin: pin.pin }.encode()
        )
        .await
        .0,
        Status::NotFound
    );
    let (status, msg) = c.call(Opcode::Connect, &[], &[]).await;
    assert_eq!(status, Status::Unsupported);
    assert!(String::from_utf8_lossy(&msg).contains("RDMA"));
    server.shutdown().await.unwrap();
}

/// Allocate hands out space as it is, and Commit publishes the bytes there once they hash to
/// the checksum given, so a client that never wrote them can publish them only by knowing their
/// hash. A fresh reservation may hold a deleted value's bytes: a refused Commit names no hash
/// but the one the client sent, or a client could Allocate, learn the hash, Allocate again and
/// publish, under its own key, a value another client deleted.
#[tokio::test]
async fn a_refused_commit_names_no_hash_of_bytes_the_client_never_wrote() {
    use memkv_proto::messages::{AllocateRequest, AllocateResponse, CommitRequest};
    let server = Server::start(config("")).await.unwrap();
    let key = AuthKey::from_hex(KEY_HEX).unwrap();
    let mut owner = connect(server.data_addr(), key.clone()).await.unwrap();
    let secret: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 13) as u8).collect();
    let put = owner.call(Opcode::TcpPut, b"secret", &secret).await;
    assert_eq!(put.0, Status::Ok);
    let deleted = owner.call(Opcode::TcpDelete, b"secret", &[]).await;
    assert_eq!(deleted.0, Status::Ok);

    let mut other = connect(server.data_addr(), key).await.unwrap();
    let alloc = AllocateRequest {
        len: 4096,
        lease_ms: 0,
    }
    .encode();
    for guess in [0, 1, u64::MAX] {
        let (status, body) = other.call(Opcode::Allocate, b"stolen", &alloc).await;
        assert_eq!(status, Status::Ok);
        let reservation = AllocateResponse::decode(&body).unwrap().reservation;
        let commit = CommitRequest {
            reservation,
            checksum: guess,
        };
        let (status, message) = other.call(Opcode::Commit, &[], &commit.encode()).await;
        let message = String::from_utf8_lossy(&message).into_owned();
        assert_eq!(status, Status::ChecksumMismatch, "{message}");
        let named: Vec<u64> = message
            .split("0x")
            .skip(1)
            .map(|hex| {
                let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
                u64::from_str_radix(&digits, 16).unwrap()
            })
            .collect();
        assert_eq!(named, [guess], "the refusal names another hash: {message}");
    }
    let (status, _) = other.call(Opcode::TcpGet, b"stolen", &[]).await;
    assert_eq!(
        status,
        Status::NotFound,
        "bytes nobody wrote were published"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_shared_memory_commit_is_refused_for_another_arena_and_trusted_for_this_one() {
    use memkv_proto::local::LocalAttachResponse;
    use memkv_proto::messages::*;
    let server = Server::start(config("")).await.unwrap();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let (status, body) = c.call(Opcode::LocalAttach, &[], &[]).await;
    assert_eq!(status, Status::Ok, "{}", String::from_utf8_lossy(&body));
    let arena_id = LocalAttachResponse::decode(&body).unwrap().arena_id;

    // A mapping of another arena (a restarted server's): refused by name, nothing published,
    // the reservation given back.
    let alloc = allocate_three_bytes(&mut c).await;
    let stale = SharedCommitRequest {
        reservation: alloc.reservation,
        checksum: checksum::of(&[0, 0, 0]),
        arena_id: arena_id ^ 1,
    };
    let (status, msg) = c.call(Opcode::Commit, &[], &stale.encode()).await;
    let msg = String::from_utf8_lossy(&msg);
    assert_eq!(status, Status::BadRequest, "{msg}");
    assert!(
        msg.contains(&format!("{:#018x}", arena_id ^ 1))
            && msg.contains(&format!("{arena_id:#018x}"))
            && msg.contains("stale mapping"),
        "{msg}"
    );
    assert_eq!(
        c.call(Opcode::Exists, b"two", &[]).await.0,
        Status::NotFound
    );
    let retry = SharedCommitRequest { arena_id, ..stale };
    assert_ne!(
        c.call(Opcode::Commit, &[], &retry.encode()).await.0,
        Status::Ok,
        "a refused reservation is gone"
    );

    // This arena: the writer's checksum is the value's (it hashed the bytes as it copied them).
    let alloc = allocate_three_bytes(&mut c).await;
    let commit = SharedCommitRequest {
        reservation: alloc.reservation,
        checksum: checksum::of(&[0, 0, 0]),
        arena_id,
    };
    assert_eq!(
        c.call(Opcode::Commit, &[], &commit.encode()).await.0,
        Status::Ok
    );
    let (status, body) = c
        .call(
            Opcode::Lookup,
            b"two",
            &LookupRequest { lease_ms: 100 }.encode(),
        )
        .await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        LookupResponse::decode(&body).unwrap().checksum,
        checksum::of(&[0, 0, 0])
    );
    // Neither form's length: refused, naming the message.
    let (status, msg) = c.call(Opcode::Commit, &[], &[0u8; 20]).await;
    assert_eq!(status, Status::BadRequest);
    assert!(String::from_utf8_lossy(&msg).contains("Commit request"));
    server.shutdown().await.unwrap();
}

fn counter(metrics: &str, op: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("memkv_ops_total{")
                && l.contains(&format!("op=\"{op}\""))
                && l.contains("status=\"Ok\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn admin_endpoints_describe_the_real_server_and_metrics_move_with_work() {
    let server = Server::start(config("")).await.unwrap();
    let admin = server.admin_addr();
    let (code, body) = http_get(admin, "/v1/health").await;
    assert_eq!(code, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "healthy");
    assert_eq!(health["rdma_active"], false);
    assert_eq!(http_get(admin, "/v1/ready").await, (200, "ok".to_owned()));
    let before = counter(&http_get(admin, "/v1/metrics").await.1, "TcpPut");
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    for i in 0..5u8 {
        assert_eq!(
            c.call(Opcode::TcpPut, &[b'm', i], &[i; 1000]).await.0,
            Status::Ok
        );
    }
    let after = counter(&http_get(admin, "/v1/metrics").await.1, "TcpPut");
    // Other tests in this process may add more; ours add at least five.
    assert!(
        after >= before + 5.0,
        "TcpPut ok count went from {before} to {after}"
    );
    let (code, body) = http_get(admin, "/v1/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["storage"]["mode"], "memory");
    assert_eq!(status["storage"]["blocks"], 5);
    assert!(status["storage"]["used_bytes_total"].as_u64().unwrap() >= 5000);
    assert_eq!(status["connections"]["current"], 1);
    assert_eq!(status["transports"]["tcp"], true);
    assert!(status["rdma"]["reason"].as_str().unwrap().len() > 5);
    drop(c);
    server.shutdown().await.unwrap();
}

/// Through a drain the admin API still answers: `/v1/ready` says 503 `draining` (and metrics
/// can be scraped) until the data plane has finished. It used to close at the signal, with the
/// data plane still draining.
#[tokio::test]
async fn the_admin_api_answers_draining_until_the_data_plane_has_drained() {
    let server = Server::start(config("")).await.unwrap();
    let admin = server.admin_addr();
    let mut c = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    // Half a put: the drain waits for the rest of it.
    let value = vec![7u8; 1 << 20];
    let frame = c.frame(Opcode::TcpPut, b"half", &value);
    c.send(&frame[..frame.len() / 2]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = tokio::spawn(server.shutdown());
    let mut seen = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (code, body) = http_get(admin, "/v1/ready").await;
        if code == 503 {
            seen = Some(body);
            break;
        }
    }
    assert_eq!(seen.as_deref(), Some("draining"));
    assert!(
        !stopping.is_finished(),
        "the drain waits for the half-sent put"
    );
    c.send(&frame[frame.len() / 2..]).await;
    let (status, _) = c.recv().await.map(|(h, b)| (h.status, b)).unwrap();
    assert_eq!(status, Status::Ok);
    drop(c);
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the server stops once drained")
        .unwrap()
        .unwrap();
}
