//! Property tests: every message round-trips, and no input makes a decoder panic.
mod common;

use memkv_proto::batch::{self, GetItem, PutItem};
use memkv_proto::messages::*;
use memkv_proto::{Flags, Frame, Header, Limits, Opcode, Status, checksum};
use proptest::prelude::*;

fn opcode() -> impl Strategy<Value = Opcode> {
    proptest::sample::select(Opcode::ALL.to_vec())
}

fn status() -> impl Strategy<Value = Status> {
    proptest::sample::select(Status::ALL.to_vec())
}

fn header() -> impl Strategy<Value = Header> {
    (
        opcode(),
        any::<bool>(),
        any::<u64>(),
        status(),
        0u16..=1024,
        0u32..(1 << 20),
        any::<u64>(),
        any::<u64>(),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(opcode, resp, request_id, status, key_len, payload_len, checksum, seq, mac)| {
                let response = resp || !opcode.takes_key();
                Header {
                    version: 1,
                    opcode,
                    flags: if response {
                        Flags::RESPONSE
                    } else {
                        Flags::default()
                    },
                    request_id,
                    // Requests carry status 0.
                    status: if response { status } else { Status::Ok },
                    key_len: if response { 0 } else { key_len },
                    payload_len,
                    checksum,
                    seq,
                    mac,
                }
            },
        )
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #[test]
    fn headers_round_trip(h in header()) {
        prop_assert_eq!(Header::decode(&h.to_bytes(), &Limits::DEFAULT), Ok(h));
    }

    #[test]
    fn fixed_messages_round_trip(a in any::<u64>(), b in any::<u64>(), c in any::<u32>(), d in any::<u32>(), e in any::<u64>(), f in any::<u64>()) {
        let m = AllocateRequest { len: a, lease_ms: c };
        prop_assert_eq!(AllocateRequest::decode(&m.encode()), Ok(m));
        let m = AllocateResponse { reservation: a, addr: b, rkey: c, lease_ms: d };
        prop_assert_eq!(AllocateResponse::decode(&m.encode()), Ok(m));
        let m = CommitRequest { reservation: a, checksum: b };
        prop_assert_eq!(CommitRequest::decode(&m.encode()), Ok(m));
        let m = AbortRequest { reservation: a };
        prop_assert_eq!(AbortRequest::decode(&m.encode()), Ok(m));
        let m = LookupRequest { lease_ms: c };
        prop_assert_eq!(LookupRequest::decode(&m.encode()), Ok(m));
        let m = LookupResponse { pin: a, addr: b, rkey: c, lease_ms: d, len: e, checksum: f };
        prop_assert_eq!(LookupResponse::decode(&m.encode()), Ok(m));
        let m = ReleaseRequest { pin: a };
        prop_assert_eq!(ReleaseRequest::decode(&m.encode()), Ok(m));
        let m = StatsResponse { raw_bytes: a, usable_bytes: b, used_bytes: e, blocks: f, evictions: a ^ b, checksum_failures: e ^ f };
        prop_assert_eq!(StatsResponse::decode(&m.encode()), Ok(m));
    }

    #[test]
    fn batch_put_round_trips(items in proptest::collection::vec((bytes(64), bytes(512)), 0..20)) {
        let put: Vec<PutItem<'_>> = items.iter().map(|(k, v)| PutItem { key: k, value: v, checksum: checksum::of(v) }).collect();
        let encoded = batch::encode_put_request(&put);
        prop_assert_eq!(batch::decode_put_request(&encoded, &Limits::DEFAULT).unwrap(), put);
    }

    #[test]
    fn batch_keys_and_statuses_round_trip(keys in proptest::collection::vec(bytes(64), 0..50), st in proptest::collection::vec(status(), 0..50)) {
        let encoded = batch::encode_keys(&keys);
        let decoded = batch::decode_keys(&encoded, &Limits::DEFAULT).unwrap();
        prop_assert_eq!(decoded, keys.iter().map(|k| k.as_slice()).collect::<Vec<_>>());
        prop_assert_eq!(batch::decode_statuses(&batch::encode_statuses(&st), &Limits::DEFAULT).unwrap(), st);
    }

    #[test]
    fn batch_get_round_trips(items in proptest::collection::vec((status(), bytes(256)), 0..20)) {
        let get: Vec<GetItem<'_>> = items.iter().map(|(s, v)| GetItem { status: *s, value: v, checksum: checksum::of(v) }).collect();
        let encoded = batch::encode_get_response(&get);
        prop_assert_eq!(batch::decode_get_response(&encoded, &Limits::DEFAULT).unwrap(), get);
    }

    #[test]
    fn sealed_frames_open(op in opcode(), id in any::<u64>(), key in bytes(64), payload in bytes(4096), payload_mac in any::<bool>()) {
        let (mut client, mut server) = common::established(payload_mac, false);
        let key = if op.takes_key() { key } else { Vec::new() };
        let frame = client.sealer.frame(Header::request(op, id), &key, &payload);
        let (decoded, used) = Frame::decode(&frame, &Limits::DEFAULT).unwrap();
        prop_assert_eq!(used, frame.len());
        let h = server.opener.verify(&decoded.raw_header, &decoded.key, &decoded.payload, true).unwrap();
        prop_assert_eq!((h.opcode, h.request_id), (op, id));
        prop_assert_eq!(decoded.payload, payload);
    }

    /// The fuzz target's body as a property: arbitrary and mutated input never panics.
    #[test]
    fn decoders_never_panic(data in bytes(2048), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        memkv_proto::fuzzing::decode_everything(&data);
        let (mut client, _) = common::established(false, false);
        let mut frame = client.sealer.frame(Header::request(Opcode::BatchPut, 1), &[], &batch::encode_put_request(&[PutItem { key: b"k", value: &data, checksum: 1 }]));
        for (at, x) in flips {
            let n = frame.len();
            frame[at % n] ^= x;
        }
        memkv_proto::fuzzing::decode_everything(&frame);
    }

    /// The handshake target's body: arbitrary bytes, and whole valid exchanges with bytes
    /// flipped, never panic.
    #[test]
    fn handshake_target_never_panics(data in bytes(600), options in 0u8..4, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6)) {
        memkv_proto::fuzzing::handshake(&data);
        let (server_side, client_side) = memkv_proto::fuzzing::handshake_exchanges(options);
        for mut input in [server_side, client_side] {
            for &(at, x) in &flips {
                let n = input.len();
                input[at % n] ^= x;
            }
            memkv_proto::fuzzing::handshake(&input);
        }
    }

    /// The batch-payload target's body (decoded items re-encode to themselves) on arbitrary
    /// and on mutated valid payloads.
    #[test]
    fn batch_payloads_target_holds(data in bytes(600), pick in any::<u8>(), keys in proptest::collection::vec(bytes(12), 0..6), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        memkv_proto::fuzzing::batch_payloads(&data);
        let mut payload = vec![pick];
        payload.extend_from_slice(&batch::encode_keys(&keys));
        for (at, x) in flips {
            let n = payload.len();
            payload[at % n] ^= x;
        }
        memkv_proto::fuzzing::batch_payloads(&payload);
    }

    /// The Connect target's body (a decoded endpoint re-encodes to itself) on arbitrary bytes
    /// and on endpoints with bytes flipped.
    #[test]
    fn connect_payload_target_holds(data in bytes(80), flips in proptest::collection::vec((0usize..64, any::<u8>()), 0..4)) {
        memkv_proto::fuzzing::connect_payload(&data);
        let mut encoded = memkv_proto::connect::RdmaEndpoint { mtu: 4096, rc_capable: true, ..Default::default() }.encode();
        for (at, x) in flips {
            let n = encoded.len();
            encoded[at % n] ^= x;
        }
        memkv_proto::fuzzing::connect_payload(&encoded);
    }
}

#[test]
fn hostile_batch_counts_are_refused_before_allocating() {
    let mut payload = u32::MAX.to_le_bytes().to_vec();
    payload.extend_from_slice(&[0; 16]);
    assert!(batch::decode_keys(&payload, &Limits::DEFAULT).is_err());
    let mut payload = 10_000u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&[0; 16]);
    let err = batch::decode_keys(&payload, &Limits::DEFAULT).unwrap_err();
    assert!(err.to_string().contains("10000 items"), "{err}");
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&0u16.to_le_bytes());
    payload.extend_from_slice(&u32::MAX.to_le_bytes());
    payload.extend_from_slice(&[0; 8]);
    let err = batch::decode_put_request(&payload, &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, memkv_proto::ProtoError::TooLarge { what: "value", .. }),
        "{err}"
    );
}
