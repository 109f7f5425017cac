//! Every refusal path of docs/protocol.md ("Refusals") against a real server on loopback, with
//! raw frames: a fatal refusal is one frame (sealed after the handshake, plain during it) that
//! echoes the refused frame's opcode byte and request id, and then the connection closes; a
//! refused operation is an error response and the connection stays open.

use std::time::Duration;

mod support;

use memkv_proto::frame::encode_plain;
use memkv_proto::{
    AuthKey, Flags, HEADER_LEN, Header, Limits, MAGIC, OPTION_PAYLOAD_MAC, Opcode,
    PROTOCOL_VERSION, Status, batch, checksum,
};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::{Raw, connect, connect_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

async fn server(extra: &str) -> Server {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 128 MiB\n{extra}"
    );
    Server::start(ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config"))
        .await
        .unwrap()
}

/// Reads one frame without decoding its header: the raw header and the body its lengths name.
async fn read_raw(stream: &mut TcpStream) -> std::io::Result<([u8; HEADER_LEN], Vec<u8>)> {
    let mut raw = [0u8; HEADER_LEN];
    stream.read_exact(&mut raw).await?;
    let key_len = u16::from_le_bytes([raw[18], raw[19]]) as usize;
    let payload_len = u32::from_le_bytes(raw[20..24].try_into().unwrap()) as usize;
    assert!(payload_len <= 64 << 20, "implausible frame");
    let mut body = vec![0u8; key_len + payload_len];
    stream.read_exact(&mut body).await?;
    Ok((raw, body))
}

/// The peer closes: EOF (or a reset) within a few seconds, with nothing more sent.
async fn assert_closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection");
    if read.is_ok() {
        assert!(rest.is_empty(), "{} bytes after the refusal", rest.len());
    }
}

/// Checks the fields every refusal shares: magic, the echoed opcode byte and request id,
/// `RESPONSE`, the status, no key, and a payload that is the UTF-8 message with its checksum.
fn check_refusal_fields(raw: &[u8; HEADER_LEN], body: &[u8], sent: &[u8], status: Status) {
    assert_eq!(raw[..4], MAGIC);
    assert_eq!(raw[4], PROTOCOL_VERSION);
    assert_eq!(raw[5], sent[5], "the refusal echoes the opcode byte");
    assert_eq!(raw[8..16], sent[8..16], "the refusal echoes the request id");
    let flags = u16::from_le_bytes([raw[6], raw[7]]);
    assert!(Flags(flags).contains(Flags::RESPONSE));
    let code = u16::from_le_bytes([raw[16], raw[17]]);
    assert_eq!(code, status.code(), "{}", String::from_utf8_lossy(body));
    assert_eq!(raw[18..20], [0, 0], "no key");
    assert_eq!(
        u64::from_le_bytes(raw[24..32].try_into().unwrap()),
        checksum::of(body)
    );
    assert!(body.len() <= memkv_proto::frame::MAX_ERROR_MESSAGE);
    assert!(std::str::from_utf8(body).is_ok());
}

/// Sends `bytes` on an established connection and expects a fatal refusal: one sealed frame
/// (the server's next seq, its key) echoing `bytes`' opcode byte and request id, with `status`
/// and a message containing `needle`; then the connection closes. Returns the message.
async fn expect_fatal(c: &mut Raw, bytes: &[u8], status: Status, needle: &str) -> String {
    c.send(bytes).await;
    let (raw, body) = read_raw(&mut c.stream).await.expect("a refusal frame");
    check_refusal_fields(&raw, &body, bytes, status);
    if Header::decode(&raw, &Limits::DEFAULT).is_ok() {
        // Sealed: the client's opener checks the server's key, the next seq and the MAC.
        c.session
            .opener
            .verify(&raw, &[], &body, true)
            .expect("the refusal is sealed like any frame");
    }
    let message = String::from_utf8(body).unwrap();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    assert_closed(&mut c.stream).await;
    message
}

/// A sealed frame with a valid MAC, then `patch` applied to its bytes.
fn patched(c: &mut Raw, op: Opcode, key: &[u8], payload: &[u8], patch: fn(&mut [u8])) -> Vec<u8> {
    let mut f = c.frame(op, key, payload);
    patch(&mut f);
    f
}

#[tokio::test]
async fn every_header_refusal_is_one_sealed_frame_then_close() {
    let server = server("").await;
    let addr = server.data_addr();
    type Case = (
        &'static str,
        Opcode,
        &'static [u8],
        fn(&mut [u8]),
        Status,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "unknown flag bit",
            Opcode::Ping,
            b"",
            |f| f[6] |= 1 << 2,
            Status::BadRequest,
            "unknown header flags 0x0004",
        ),
        (
            "unknown status",
            Opcode::Ping,
            b"",
            |f| f[16] = 99,
            Status::BadRequest,
            "unknown status code 99",
        ),
        (
            "status on a request",
            Opcode::Ping,
            b"",
            |f| f[16] = Status::NotFound.code() as u8,
            Status::BadRequest,
            "requests carry status 0",
        ),
        (
            "unknown opcode",
            Opcode::Ping,
            b"",
            |f| f[5] = 0x7f,
            Status::BadRequest,
            "unknown opcode 0x7f",
        ),
        (
            "newer version",
            Opcode::Ping,
            b"",
            |f| f[4] = PROTOCOL_VERSION + 1,
            Status::UnsupportedVersion,
            "unsupported protocol version",
        ),
        (
            "older version than the session's",
            Opcode::Ping,
            b"",
            |f| f[4] = PROTOCOL_VERSION - 1,
            Status::BadRequest,
            "frame in a protocol",
        ),
        (
            "version 0",
            Opcode::Ping,
            b"",
            |f| f[4] = 0,
            Status::BadRequest,
            "version 0",
        ),
        (
            "bad magic",
            Opcode::Ping,
            b"",
            |f| f[0] = b'X',
            Status::BadRequest,
            "bad frame magic",
        ),
        (
            "key too long",
            Opcode::TcpGet,
            b"k",
            |f| f[18..20].copy_from_slice(&1025u16.to_le_bytes()),
            Status::TooLarge,
            "key of 1025 bytes exceeds the limit of 1024",
        ),
        (
            "payload too large",
            Opcode::TcpPut,
            b"k",
            |f| f[20..24].copy_from_slice(&u32::MAX.to_le_bytes()),
            Status::TooLarge,
            "exceeds the limit",
        ),
        (
            "value too large",
            Opcode::TcpPut,
            b"k",
            |f| f[20..24].copy_from_slice(&((64u32 << 20) + 1).to_le_bytes()),
            Status::TooLarge,
            "value of 67108865 bytes",
        ),
        (
            "replayed seq",
            Opcode::Ping,
            b"",
            |f| f[32] = 9,
            Status::Unauthorized,
            "frame sequence 9 where 0 was expected",
        ),
        (
            "bad MAC",
            Opcode::Ping,
            b"",
            |f| f[HEADER_LEN - 1] ^= 1,
            Status::Unauthorized,
            "MAC mismatch",
        ),
        (
            "body differs from its MAC",
            Opcode::TcpGet,
            b"k",
            |f| f[HEADER_LEN] ^= 1,
            Status::Unauthorized,
            "MAC mismatch",
        ),
    ];
    for (what, op, key_bytes, patch, status, needle) in cases {
        let mut c = connect(addr, key()).await.unwrap();
        let f = patched(&mut c, op, key_bytes, b"", patch);
        let message = expect_fatal(&mut c, &f, status, needle).await;
        eprintln!("{what}: {message}");
    }

    // Frames that decode but break a rule of the session, sealed with a valid MAC.
    let mut c = connect(addr, key()).await.unwrap();
    let f = c
        .session
        .sealer
        .frame(Header::request(Opcode::Ping, 5), b"key", b"");
    expect_fatal(
        &mut c,
        &f,
        Status::BadRequest,
        "Ping request carries no key",
    )
    .await;

    let mut c = connect(addr, key()).await.unwrap();
    let mut h = Header::request(Opcode::Ping, 6);
    h.flags = Flags::RESPONSE;
    let f = c.session.sealer.frame(h, &[], b"");
    expect_fatal(
        &mut c,
        &f,
        Status::BadRequest,
        "a client sent a response frame",
    )
    .await;

    let mut c = connect(addr, key()).await.unwrap();
    let mut h = Header::request(Opcode::Ping, 7);
    h.flags = Flags::PAYLOAD_MAC;
    let f = c.session.sealer.frame(h, &[], b"x");
    expect_fatal(
        &mut c,
        &f,
        Status::BadRequest,
        "session without payload MACs",
    )
    .await;

    for op in [
        Opcode::Hello,
        Opcode::Challenge,
        Opcode::Proof,
        Opcode::Ready,
    ] {
        let mut c = connect(addr, key()).await.unwrap();
        let f = c
            .session
            .sealer
            .frame(Header::request(op, 8), &[], &[0u8; 36]);
        expect_fatal(&mut c, &f, Status::BadRequest, "after the handshake").await;
    }

    // The server still serves everyone else.
    let mut c = connect(addr, key()).await.unwrap();
    assert_eq!(
        c.call(Opcode::Ping, &[], b"alive").await,
        (Status::Ok, b"alive".to_vec())
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_frame_without_payload_mac_in_a_payload_mac_session_is_refused() {
    let server = server("").await;
    let mut c = connect_with(server.data_addr(), key(), true).await.unwrap();
    assert!(c.session.payload_mac());
    assert_eq!(c.call(Opcode::Ping, &[], b"ok").await.0, Status::Ok);
    // Clearing the flag also breaks the MAC, but header checks come first: the refusal
    // names the missing flag.
    let f = patched(&mut c, Opcode::Ping, &[], b"x", |f| f[6] &= !2);
    expect_fatal(&mut c, &f, Status::BadRequest, "requires payload MACs").await;
    server.shutdown().await.unwrap();
}

/// The refusal takes the server's next sequence number, after the responses before it.
#[tokio::test]
async fn a_refusal_follows_earlier_responses_in_sequence() {
    let server = server("").await;
    let mut c = connect_with(server.data_addr(), key(), true).await.unwrap();
    for i in 0..3u8 {
        assert_eq!(c.call(Opcode::Ping, &[], &[i]).await, (Status::Ok, vec![i]));
    }
    let f = patched(&mut c, Opcode::TcpGet, b"k", b"", |f| f[6] |= 1 << 7);
    c.send(&f).await;
    let (raw, body) = read_raw(&mut c.stream).await.unwrap();
    check_refusal_fields(&raw, &body, &f, Status::BadRequest);
    let h = c.session.opener.verify(&raw, &[], &body, true).unwrap();
    // Ready was the server's frame 0, then three Pings.
    assert_eq!(h.seq, 4);
    assert!(
        h.flags.contains(Flags::PAYLOAD_MAC),
        "sealed as the session seals"
    );
    assert_eq!(h.opcode, Opcode::TcpGet);
    assert_closed(&mut c.stream).await;
    server.shutdown().await.unwrap();
}

/// A request whose id is still outstanding is refused. The first Ping's 32 MiB echo fills the
/// socket while the test does not read, so the second Ping's answer waits unsealed behind it
/// and its id is still outstanding when the duplicate arrives.
#[tokio::test]
async fn a_duplicate_outstanding_request_id_is_refused() {
    let server = server("").await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let big = vec![7u8; 32 << 20];
    let mut h = Header::request(Opcode::Ping, 1);
    let first = c.session.sealer.frame(h, &[], &big);
    h = Header::request(Opcode::Ping, 2);
    let second = c.session.sealer.frame(h, &[], b"two");
    let dup = c.session.sealer.frame(h, &[], b"again");
    let (mut rd, mut wr) = c.stream.into_split();
    let sender = tokio::spawn(async move {
        wr.write_all(&first).await.unwrap();
        wr.write_all(&second).await.unwrap();
        wr.write_all(&dup).await.unwrap();
        (wr, dup)
    });
    // Give the server time to read all three before anything is read back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut opener = c.session.opener;
    let mut frames = Vec::new();
    for _ in 0..3 {
        let mut raw = [0u8; HEADER_LEN];
        rd.read_exact(&mut raw).await.unwrap();
        let hd = Header::decode(&raw, &Limits::DEFAULT).unwrap();
        let mut body = vec![0u8; hd.payload_len as usize];
        rd.read_exact(&mut body).await.unwrap();
        let hd = opener.verify(&raw, &[], &body, true).unwrap();
        frames.push((hd, body));
    }
    let (_wr, dup) = sender.await.unwrap();
    assert_eq!(
        (frames[0].0.request_id, frames[0].0.status),
        (1, Status::Ok)
    );
    assert!(frames[0].1 == big);
    assert_eq!(
        (frames[1].0.request_id, frames[1].0.status, &frames[1].1[..]),
        (2, Status::Ok, &b"two"[..])
    );
    assert_eq!(frames[2].0.status, Status::BadRequest);
    assert_eq!(frames[2].0.request_id, 2);
    assert_eq!(frames[2].0.opcode.code(), dup[5]);
    let message = String::from_utf8_lossy(&frames[2].1);
    assert!(
        message.contains("request id 2 is already outstanding"),
        "{message}"
    );
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut rest))
        .await
        .expect("closed");
    assert!(rest.is_empty());
    server.shutdown().await.unwrap();
}

/// An id may be reused once its answer arrived.
#[tokio::test]
async fn a_request_id_may_be_reused_once_answered() {
    let server = server("").await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    for i in 0..50u8 {
        let f = c
            .session
            .sealer
            .frame(Header::request(Opcode::Ping, 42), &[], &[i]);
        c.send(&f).await;
        let (h, body) = c.recv().await.unwrap();
        assert_eq!((h.request_id, h.status, body), (42, Status::Ok, vec![i]));
    }
    server.shutdown().await.unwrap();
}

/// A payload that does not match its checksum fails its request, for every operation alike,
/// and the connection stays open.
#[tokio::test]
async fn a_checksum_mismatch_fails_the_request_and_keeps_the_connection() {
    let server = server("").await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let cases: [(Opcode, &[u8], Vec<u8>); 4] = [
        (Opcode::Ping, b"", b"ping bytes".to_vec()),
        (Opcode::TcpPut, b"k", vec![5u8; 10_000]),
        (Opcode::TcpPut, b"big", vec![6u8; 1 << 20]),
        (Opcode::BatchGet, b"", batch::encode_keys(&[b"k"])),
    ];
    for (op, key_bytes, payload) in cases {
        c.next_id += 1;
        let mut h = Header::request(op, c.next_id);
        let head = c
            .session
            .sealer
            .seal_with_checksum(&mut h, key_bytes, &[&payload], 12345);
        let mut wire = head.to_vec();
        wire.extend_from_slice(key_bytes);
        wire.extend_from_slice(&payload);
        c.send(&wire).await;
        let (h, body) = c.recv().await.unwrap();
        assert_eq!(h.request_id, c.next_id);
        assert_eq!(
            h.status,
            Status::ChecksumMismatch,
            "{op:?}: {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(c.call(Opcode::Ping, &[], b"still here").await.0, Status::Ok);
    }
    assert_eq!(c.call(Opcode::Exists, b"k", &[]).await.0, Status::NotFound);
    assert_eq!(
        c.call(Opcode::Exists, b"big", &[]).await.0,
        Status::NotFound
    );
    server.shutdown().await.unwrap();
}

/// Refused operations (well-formed frames asking for something the server will not do) are
/// error responses, and the connection stays open.
#[tokio::test]
async fn refused_operations_keep_the_connection() {
    let server = server("").await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    for op in [
        Opcode::TcpPut,
        Opcode::TcpGet,
        Opcode::Exists,
        Opcode::TcpDelete,
    ] {
        let (status, body) = c.call(op, b"", b"").await;
        assert_eq!(status, Status::BadRequest, "{op:?}");
        assert!(String::from_utf8_lossy(&body).contains("key must not be empty"));
    }
    // A key of exactly 1024 bytes is accepted.
    let long = vec![b'k'; 1024];
    assert_eq!(c.call(Opcode::TcpPut, &long, b"v").await.0, Status::Ok);
    // Batches: an empty key fails its item; too many items fail the batch.
    let (status, body) = c
        .call(
            Opcode::BatchExists,
            &[],
            &batch::encode_keys(&[&b""[..], &long[..]]),
        )
        .await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        batch::decode_statuses(&body, &Limits::DEFAULT).unwrap(),
        vec![Status::BadRequest, Status::Ok]
    );
    let many: Vec<&[u8]> = vec![&b"k"[..]; 16_385];
    let (status, body) = c
        .call(Opcode::BatchGet, &[], &batch::encode_keys(&many))
        .await;
    assert_eq!(status, Status::TooLarge);
    let message = String::from_utf8_lossy(&body);
    assert!(
        message.contains("batch of 16385 items exceeds the limit of 16384 items"),
        "{message}"
    );
    // A malformed payload for its operation.
    let (status, _) = c.call(Opcode::Commit, &[], b"short").await;
    assert_eq!(status, Status::BadRequest);
    assert_eq!(
        c.call(Opcode::Ping, &[], b"ok").await,
        (Status::Ok, b"ok".to_vec())
    );
    server.shutdown().await.unwrap();
}

// ---- During the handshake: plain refusals, then close ----

/// A Hello frame with `patch` applied; the checksum is recomputed after the patch.
fn hello(patch: impl FnOnce(&mut Header, &mut [u8; 36])) -> Vec<u8> {
    let mut payload = [0u8; 36];
    payload[0] = PROTOCOL_VERSION;
    payload[4..].copy_from_slice(&[3; 32]);
    let mut h = Header::request(Opcode::Hello, 0);
    patch(&mut h, &mut payload);
    encode_plain(h, &payload)
}

/// Sends `bytes` as the first frame and expects a plain refusal echoing its opcode byte and
/// request id, with `status` and a message containing `needle`, then close.
async fn expect_handshake_refusal(
    addr: std::net::SocketAddr,
    bytes: &[u8],
    status: Status,
    needle: &str,
) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let (raw, body) = read_raw(&mut s).await.expect("a refusal frame");
    check_refusal_fields(&raw, &body, bytes, status);
    assert_eq!(raw[32..], [0u8; 40], "plain: seq and MAC are zero");
    let message = String::from_utf8(body).unwrap();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    assert_closed(&mut s).await;
}

#[tokio::test]
async fn handshake_refusals_are_plain_frames_then_close() {
    let server = server("").await;
    let addr = server.data_addr();
    let id = hello(|h, _| h.request_id = 9);
    expect_handshake_refusal(addr, &id, Status::BadRequest, "carries request id 9").await;
    let options = hello(|_, p| p[1] = OPTION_PAYLOAD_MAC | 0x40);
    expect_handshake_refusal(
        addr,
        &options,
        Status::BadRequest,
        "unknown handshake options 0x41",
    )
    .await;
    let newer = hello(|_, p| p[0] = PROTOCOL_VERSION + 1);
    expect_handshake_refusal(
        addr,
        &newer,
        Status::UnsupportedVersion,
        "upgrade servers first",
    )
    .await;
    let mut oversized = hello(|_, _| {});
    oversized[20..24].copy_from_slice(&2000u32.to_le_bytes());
    expect_handshake_refusal(
        addr,
        &oversized,
        Status::TooLarge,
        "frame payload of 2000 bytes exceeds the limit of 1024",
    )
    .await;
    let mut unknown = hello(|_, _| {});
    unknown[5] = 0x7f;
    expect_handshake_refusal(addr, &unknown, Status::BadRequest, "unknown opcode 0x7f").await;
    let mut flags = hello(|_, _| {});
    flags[6] = 1 << 3;
    expect_handshake_refusal(addr, &flags, Status::BadRequest, "unknown header flags").await;
    let mut garbage = hello(|_, _| {});
    garbage[..4].copy_from_slice(b"GET ");
    expect_handshake_refusal(addr, &garbage, Status::BadRequest, "bad frame magic").await;
    let mut sum = hello(|_, _| {});
    sum[24] ^= 1;
    expect_handshake_refusal(addr, &sum, Status::ChecksumMismatch, "checksum").await;
    let ping = encode_plain(Header::request(Opcode::Ping, 0), b"");
    expect_handshake_refusal(addr, &ping, Status::BadRequest, "waiting for Hello").await;
    let short = encode_plain(Header::request(Opcode::Hello, 0), &[1, 0, 0, 0]);
    expect_handshake_refusal(
        addr,
        &short,
        Status::BadRequest,
        "Hello payload is 4 bytes, expected 36",
    )
    .await;
    server.shutdown().await.unwrap();
}

/// A handshake not finished 10 s after accept is closed without a frame.
#[tokio::test]
async fn an_unfinished_handshake_is_closed_after_ten_seconds() {
    let server = server("").await;
    let mut s = TcpStream::connect(server.data_addr()).await.unwrap();
    s.write_all(&MAGIC).await.unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut rest))
        .await
        .expect("closed by the deadline");
    let waited = started.elapsed();
    assert!(rest.is_empty(), "no frame on a deadline close");
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(12)).contains(&waited),
        "{waited:?}"
    );
    server.shutdown().await.unwrap();
}
