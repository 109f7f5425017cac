//! The bodies of the fuzz targets over this crate's decoders (fuzz/fuzz_targets), shared with
//! the property tests that run them on every `cargo test` (tests/roundtrip.rs). Each must never
//! panic, whatever the bytes.

use crate::batch;
use crate::coverage::{self, Coverage};
use crate::messages::{
    AllocateResponse, CommitRequest, LookupResponse, SharedCommitRequest, StatsResponse,
};
use crate::{
    AuthKey, ClientHandshake, Frame, HEADER_LEN, Header, Limits, ProtoError, ServerHandshake,
    Session, Step,
};

/// The shared key, and each side's nonce, of the handshake target: fixed, so a seed holding a
/// valid Hello and Proof (or Challenge and Ready) gets a session established and the frames after
/// it reach a session's opener.
pub const HANDSHAKE_KEY: [u8; 32] = [7; 32];
/// The client nonce of the handshake target.
pub const HANDSHAKE_CLIENT_NONCE: [u8; 32] = [3; 32];
/// The server nonce of the handshake target.
pub const HANDSHAKE_SERVER_NONCE: [u8; 32] = [9; 32];

/// Feeds `data` to every decoder that reads bytes from a peer. Must never panic.
pub fn decode_everything(data: &[u8]) {
    let limits = Limits::DEFAULT;
    if let Ok((frame, _)) = Frame::decode(data, &limits) {
        decode_payloads(&frame.payload, &limits);
    }
    if let Ok((frame, _)) = Frame::decode(data, &Limits::HANDSHAKE) {
        let _ = frame.refusal();
        // What a server does with a handshake frame it has read.
        let mut server = ServerHandshake::new(AuthKey::from_bytes([7; 32]), [9; 32], false, limits);
        let _ = server.on_frame(&frame);
    }
    decode_payloads(data, &limits);
    if let Some(raw) = data.get(..HEADER_LEN) {
        let raw: &[u8; HEADER_LEN] = raw.try_into().expect("HEADER_LEN bytes");
        let _ = Header::decode(raw, &limits);
        // A refusal answers any header, decodable or not.
        let _ = crate::frame::encode_refusal_of(raw, &ProtoError::BadMac);
    }
}

/// The frame-checksum walker ([`Coverage`]) agrees with the decoders: where a batch decodes,
/// the bytes its checksum covers are exactly the decoded items less their values.
fn check_coverage(payload: &[u8], limits: &Limits) {
    let put_sum = Coverage::PutRequestItems.checksum(payload);
    if let Ok(items) = batch::decode_put_request(payload, limits) {
        let mut covered = (items.len() as u32).to_le_bytes().to_vec();
        for item in &items {
            covered.extend_from_slice(&(item.key.len() as u16).to_le_bytes());
            covered.extend_from_slice(&(item.value.len() as u32).to_le_bytes());
            covered.extend_from_slice(&item.checksum.to_le_bytes());
            covered.extend_from_slice(item.key);
        }
        assert_eq!(put_sum, coverage::items_checksum(&covered));
    }
    let get_sum = Coverage::GetResponseItems.checksum(payload);
    if let Ok(items) = batch::decode_get_response(payload, limits) {
        let heads: Vec<_> = items
            .iter()
            .map(|i| batch::get_item_header(i.status, i.value.len() as u32, i.checksum))
            .collect();
        let count = (items.len() as u32).to_le_bytes();
        assert_eq!(
            get_sum,
            coverage::get_response_checksum(&count, heads.iter())
        );
    }
}

fn decode_payloads(payload: &[u8], limits: &Limits) {
    check_coverage(payload, limits);
    let _ = batch::decode_keys(payload, limits);
    let _ = batch::decode_statuses(payload, limits);
    let _ = LookupResponse::decode(payload);
    let _ = AllocateResponse::decode(payload);
    let _ = CommitRequest::decode(payload);
    let _ = SharedCommitRequest::decode(payload);
    let _ = StatsResponse::decode(payload);
    let _ = crate::connect::RdmaEndpoint::decode(payload);
    let _ = crate::local::LocalAttachResponse::decode(payload);
    let _ = crate::local::AttachAnswer::decode(payload);
}

/// Handshake target: `data` is one option byte (bit 0: payload MACs on the client's side, bit
/// 1: required by the server) and then frames, fed in order to a server and a client
/// handshake. Each side stops at its first error; a side that establishes a session opens the
/// frames after that with it, as the runtime's reader would.
pub fn handshake(data: &[u8]) {
    let Some((&options, mut rest)) = data.split_first() else {
        return;
    };
    let limits = Limits::DEFAULT;
    let key = || AuthKey::from_bytes(HANDSHAKE_KEY);
    let mut server = Side::Handshaking(Machine::Server(ServerHandshake::new(
        key(),
        HANDSHAKE_SERVER_NONCE,
        options & 2 != 0,
        limits,
    )));
    let (client, _hello) =
        ClientHandshake::start(key(), HANDSHAKE_CLIENT_NONCE, options & 1 != 0, limits);
    let mut client = Side::Handshaking(Machine::Client(client));
    let both_ended = |s: &Side, c: &Side| s.ended() && c.ended();
    while !rest.is_empty() && !both_ended(&server, &client) {
        // Handshake frames are read under the handshake limits, session frames under the
        // session's: decode under the larger and let each side refuse what it must.
        let Ok((frame, used)) = Frame::decode(rest, &limits) else {
            return;
        };
        rest = &rest[used..];
        server.feed(&frame);
        client.feed(&frame);
    }
}

enum Machine {
    Server(ServerHandshake),
    Client(ClientHandshake),
}

enum Side {
    Handshaking(Machine),
    Established(Box<Session>),
    Ended,
}

impl Side {
    fn ended(&self) -> bool {
        matches!(self, Side::Ended)
    }

    fn feed(&mut self, frame: &Frame) {
        let next = match self {
            Side::Handshaking(m) => {
                let step = match m {
                    Machine::Server(s) => s.on_frame(frame),
                    Machine::Client(c) => c.on_frame(frame),
                };
                match step {
                    Ok(Step::Send(_)) => return,
                    Ok(Step::Established { session, .. }) => Side::Established(Box::new(session)),
                    Err(_) => Side::Ended,
                }
            }
            Side::Established(session) => {
                let opened =
                    session
                        .opener
                        .verify(&frame.raw_header, &frame.key, &frame.payload, true);
                match opened {
                    Ok(_) => {
                        decode_payloads(&frame.payload, &Limits::DEFAULT);
                        return;
                    }
                    Err(e) => {
                        // What the runtime does with a refused frame: seal the refusal.
                        let _ = session.sealer.refusal(&frame.raw_header, &e);
                        Side::Ended
                    }
                }
            }
            Side::Ended => return,
        };
        *self = next;
    }
}

/// Valid inputs of the handshake target for option byte `options`: what the server reads
/// (Hello, Proof, a sealed BatchGet) and what the client reads (Challenge, Ready, a sealed
/// response), each after the option byte. Seeds for the fuzzer and the property test.
pub fn handshake_exchanges(options: u8) -> (Vec<u8>, Vec<u8>) {
    use crate::{Opcode, Status};
    let key = || AuthKey::from_bytes(HANDSHAKE_KEY);
    let limits = Limits::DEFAULT;
    let (mut client, hello) =
        ClientHandshake::start(key(), HANDSHAKE_CLIENT_NONCE, options & 1 != 0, limits);
    let mut server = ServerHandshake::new(key(), HANDSHAKE_SERVER_NONCE, options & 2 != 0, limits);
    let frame = |b: &[u8]| {
        Frame::decode(b, &Limits::HANDSHAKE)
            .expect("the machines' own frames decode")
            .0
    };
    let Ok(Step::Send(challenge)) = server.on_frame(&frame(&hello)) else {
        unreachable!("a server answers its client's Hello")
    };
    let Ok(Step::Send(proof)) = client.on_frame(&frame(&challenge)) else {
        unreachable!("a client answers its server's Challenge")
    };
    let Ok(Step::Established {
        reply: Some(ready),
        session: mut server_session,
    }) = server.on_frame(&frame(&proof))
    else {
        unreachable!("the server accepts a proof under the same key")
    };
    let Ok(Step::Established {
        session: mut client_session,
        ..
    }) = client.on_frame(&frame(&ready))
    else {
        unreachable!("the client accepts Ready under the same key")
    };
    let request = client_session.sealer.frame(
        Header::request(Opcode::BatchGet, 1),
        b"",
        &batch::encode_keys(&[b"a", b"b"]),
    );
    let response = server_session.sealer.frame(
        Header::response(&Header::request(Opcode::TcpGet, 1), Status::Ok),
        b"",
        b"value",
    );
    (
        [&[options][..], &hello, &proof, &request].concat(),
        [&[options][..], &challenge, &ready, &response].concat(),
    )
}

/// Batch-payload target: the first byte picks the limits (default or tight), the rest is a
/// payload handed to every batch decoder.
pub fn batch_payloads(data: &[u8]) {
    let Some((&pick, payload)) = data.split_first() else {
        return;
    };
    let limits = if pick & 1 == 0 {
        Limits::DEFAULT
    } else {
        Limits {
            max_batch_items: 4,
            max_key_len: 8,
            ..Limits::DEFAULT
        }
    };
    if let Ok(items) = batch::decode_put_request(payload, &limits) {
        let again = batch::encode_put_request(&items);
        assert_eq!(batch::decode_put_request(&again, &limits).ok(), Some(items));
    }
    if let Ok(keys) = batch::decode_keys(payload, &limits) {
        assert_eq!(
            batch::decode_keys(&batch::encode_keys(&keys), &limits).ok(),
            Some(keys)
        );
    }
    if let Ok(items) = batch::decode_get_response(payload, &limits) {
        let again = batch::encode_get_response(&items);
        assert_eq!(
            batch::decode_get_response(&again, &limits).ok(),
            Some(items)
        );
    }
    let _ = batch::decode_statuses(payload, &limits);
    check_coverage(payload, &limits);
}

/// Connect-payload target: an RDMA endpoint (a client's, or a server's answer with its arena)
/// that decodes must encode back to the bytes it came from, but for the flag bits this build
/// does not know.
pub fn connect_payload(data: &[u8]) {
    if let Ok(endpoint) = crate::connect::RdmaEndpoint::decode(data) {
        let again = endpoint.encode();
        assert_eq!(
            crate::connect::RdmaEndpoint::decode(&again).ok(),
            Some(endpoint),
            "a decoded endpoint re-encodes to the same endpoint"
        );
    }
}

/// LocalAttach target: a LocalAttach answer that decodes must encode back to the same bytes
/// (its layout has no slack), and the Unix socket's answer byte decodes without panicking.
pub fn local_attach(data: &[u8]) {
    if let Ok(answer) = crate::local::LocalAttachResponse::decode(data) {
        assert_eq!(
            answer.encode(),
            data,
            "a decoded LocalAttach answer re-encodes exactly"
        );
    }
    if let Ok(answer) = crate::local::AttachAnswer::decode(data)
        && matches!(answer, crate::local::AttachAnswer::Granted)
    {
        assert_eq!(data, [0]);
    }
}
