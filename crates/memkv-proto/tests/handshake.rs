mod common;

use common::{established, key, run};
use memkv_proto::{
    Flags, Frame, HEADER_LEN, Header, Limits, Opcode, PROTOCOL_VERSION, ProtoError, Status,
    checksum,
};

#[test]
fn same_key_establishes_and_frames_flow_both_ways() {
    let (mut client, mut server) = established(false, false);
    assert_eq!(client.version(), PROTOCOL_VERSION);
    for i in 0..5u64 {
        let bytes = client
            .sealer
            .frame(Header::request(Opcode::TcpPut, i), b"key", b"value");
        let raw: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let h = server
            .opener
            .verify(
                &raw,
                &bytes[HEADER_LEN..HEADER_LEN + 3],
                &bytes[HEADER_LEN + 3..],
                true,
            )
            .unwrap();
        assert_eq!(h.request_id, i);
        let reply = server
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], b"");
        let raw: [u8; HEADER_LEN] = reply[..HEADER_LEN].try_into().unwrap();
        assert!(
            client
                .opener
                .verify(&raw, &[], &[], true)
                .unwrap()
                .is_response()
        );
    }
}

#[test]
fn wrong_key_fails_on_both_sides_without_revealing_the_key() {
    let o = run(key(1), key(2), false, false, |_, _| {});
    let server_err = o.server.unwrap_err();
    assert!(
        matches!(server_err, ProtoError::Unauthorized(_)),
        "{server_err}"
    );
    let client_err = o.client.unwrap_err();
    match &client_err {
        ProtoError::Refused { status, message } => {
            assert_eq!(*status, Status::Unauthorized);
            assert!(message.contains("wrong auth key"), "{message}");
            assert!(!message.contains(&key(1).to_hex()) && !message.contains(&key(2).to_hex()));
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn a_server_with_another_key_is_detected_by_the_client() {
    // An impostor that accepts any proof: rewrite Ready's proof so only the MAC is wrong.
    let o = run(key(1), key(1), false, false, |i, bytes| {
        if i == 3 {
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            let payload_start = HEADER_LEN;
            let sum = checksum::of(&bytes[payload_start..]);
            bytes[24..32].copy_from_slice(&sum.to_le_bytes());
        }
    });
    assert!(o.server.is_ok());
    assert_eq!(o.client.unwrap_err(), ProtoError::BadMac);
}

#[test]
fn newer_client_version_is_refused_naming_both_versions() {
    let o = run(key(1), key(1), false, false, |i, bytes| {
        if i == 0 {
            bytes[4] = PROTOCOL_VERSION + 1;
        }
    });
    let err = o.server.unwrap_err();
    assert_eq!(
        err,
        ProtoError::UnsupportedVersion {
            peer: PROTOCOL_VERSION + 1,
            ours: PROTOCOL_VERSION
        }
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("version {}", PROTOCOL_VERSION + 1)),
        "{text}"
    );
    assert!(
        text.contains(&format!("up to {PROTOCOL_VERSION}")),
        "{text}"
    );
    assert_eq!(err.status(), Status::UnsupportedVersion);
}

#[test]
fn newer_version_inside_hello_is_refused_too() {
    let o = run(key(1), key(1), false, false, |i, bytes| {
        if i == 0 {
            bytes[HEADER_LEN] = PROTOCOL_VERSION + 3;
            let sum = checksum::of(&bytes[HEADER_LEN..]);
            bytes[24..32].copy_from_slice(&sum.to_le_bytes());
        }
    });
    assert!(matches!(
        o.server.unwrap_err(),
        ProtoError::UnsupportedVersion { .. }
    ));
    match o.client.unwrap_err() {
        ProtoError::Refused { status, message } => {
            assert_eq!(status, Status::UnsupportedVersion);
            let refused = format!("version {}", PROTOCOL_VERSION + 3);
            assert!(message.contains(&refused), "{message}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn replayed_and_reordered_frames_are_rejected() {
    let (mut client, mut server) = established(false, false);
    let a = client
        .sealer
        .frame(Header::request(Opcode::Ping, 1), &[], b"a");
    let b = client
        .sealer
        .frame(Header::request(Opcode::Ping, 2), &[], b"b");
    let split = |f: &Vec<u8>| -> ([u8; HEADER_LEN], Vec<u8>) {
        (
            f[..HEADER_LEN].try_into().unwrap(),
            f[HEADER_LEN..].to_vec(),
        )
    };
    let (ha, pa) = split(&a);
    let (hb, pb) = split(&b);
    // Reordered: b before a.
    let mut opener = server.opener.clone();
    assert_eq!(
        opener.verify(&hb, &[], &pb, true),
        Err(ProtoError::BadSequence {
            expected: 0,
            got: 1
        })
    );
    // In order, then a replay of a.
    server.opener.verify(&ha, &[], &pa, true).unwrap();
    assert_eq!(
        server.opener.verify(&ha, &[], &pa, true),
        Err(ProtoError::BadSequence {
            expected: 1,
            got: 0
        })
    );
    // A replay with its sequence number rewritten no longer authenticates.
    let mut forged = ha;
    forged[32..40].copy_from_slice(&1u64.to_le_bytes());
    assert_eq!(
        server.opener.verify(&forged, &[], &pa, true),
        Err(ProtoError::BadMac)
    );
    server.opener.verify(&hb, &[], &pb, true).unwrap();
}

#[test]
fn frames_of_one_direction_do_not_verify_in_the_other() {
    let (mut client, mut server) = established(false, false);
    // Bring the server's receive sequence to 1, level with its send sequence (Ready was 0).
    let c = client
        .sealer
        .frame(Header::request(Opcode::Ping, 0), &[], b"");
    let raw: [u8; HEADER_LEN] = c[..HEADER_LEN].try_into().unwrap();
    server.opener.verify(&raw, &[], &[], true).unwrap();
    let f = server
        .sealer
        .frame(Header::request(Opcode::Ping, 1), &[], b"x");
    let raw: [u8; HEADER_LEN] = f[..HEADER_LEN].try_into().unwrap();
    assert_eq!(
        server.opener.verify(&raw, &[], &f[HEADER_LEN..], true),
        Err(ProtoError::BadMac)
    );
    assert!(
        client
            .opener
            .verify(&raw, &[], &f[HEADER_LEN..], true)
            .is_ok()
    );
}

/// Every single-bit flip anywhere in a sealed frame is rejected.
#[test]
fn every_bit_flip_is_rejected() {
    for payload_mac in [false, true] {
        let (mut client, server) = established(payload_mac, false);
        let frame = client.sealer.frame(
            Header::request(Opcode::TcpPut, 9),
            b"some-key",
            b"payload bytes",
        );
        for bit in 0..frame.len() * 8 {
            let mut bytes = frame.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            let mut opener = server.opener.clone();
            let raw: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
            let result = Header::decode(&raw, &Limits::DEFAULT).and_then(|h| {
                let key_end = HEADER_LEN + usize::from(h.key_len);
                let end = key_end + h.payload_len as usize;
                if end != bytes.len() {
                    return Err(ProtoError::BadRequest("length changed".into()));
                }
                opener.verify(&raw, &bytes[HEADER_LEN..key_end], &bytes[key_end..], true)
            });
            assert!(
                result.is_err(),
                "flip of bit {bit} accepted (payload_mac {payload_mac})"
            );
        }
    }
}

#[test]
fn payload_mac_catches_payload_tampering_even_without_checksum_check() {
    let (mut client, mut server) = established(false, true);
    assert!(client.payload_mac() && server.payload_mac());
    let mut frame = client
        .sealer
        .frame(Header::request(Opcode::TcpPut, 1), b"k", b"value");
    assert!(Flags(u16::from_le_bytes([frame[6], frame[7]])).contains(Flags::PAYLOAD_MAC));
    let last = frame.len() - 1;
    frame[last] ^= 0x80;
    let raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    assert_eq!(
        server
            .opener
            .verify(&raw, b"k", &frame[HEADER_LEN + 1..], false),
        Err(ProtoError::BadMac)
    );
}

#[test]
fn without_payload_mac_the_checksum_catches_payload_corruption() {
    let (mut client, mut server) = established(false, false);
    let mut frame = client
        .sealer
        .frame(Header::request(Opcode::TcpPut, 1), b"k", b"value");
    let last = frame.len() - 1;
    frame[last] ^= 0x80;
    let raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    assert!(matches!(
        server
            .opener
            .verify(&raw, b"k", &frame[HEADER_LEN + 1..], true),
        Err(ProtoError::ChecksumMismatch { .. })
    ));
}

#[test]
fn truncated_and_garbage_frames_are_refused() {
    let (mut client, _) = established(false, false);
    let frame = client
        .sealer
        .frame(Header::request(Opcode::TcpPut, 1), b"k", b"value");
    for cut in 0..frame.len() {
        assert!(matches!(
            Frame::decode(&frame[..cut], &Limits::DEFAULT),
            Err(ProtoError::Truncated { .. })
        ));
    }
    assert!(matches!(
        Frame::decode(&[0u8; 100], &Limits::DEFAULT),
        Err(ProtoError::BadMagic { .. })
    ));
}

#[test]
fn handshake_frames_out_of_order_are_refused() {
    let (_, mut server_hs) = (
        (),
        memkv_proto::ServerHandshake::new(key(1), [0; 32], false, Limits::DEFAULT),
    );
    let proof = memkv_proto::frame::encode_plain(Header::request(Opcode::Proof, 0), &[0; 32]);
    let (frame, _) = Frame::decode(&proof, &Limits::HANDSHAKE).unwrap();
    assert!(matches!(
        server_hs.on_frame(&frame),
        Err(ProtoError::UnexpectedFrame { .. })
    ));
}

/// Handshake frames carry request id 0, seq 0, a zero MAC and exactly the flags of their
/// direction; anything else is refused with `BadRequest` naming what is wrong.
#[test]
fn handshake_frames_with_a_request_id_or_stray_fields_are_refused() {
    type Tamper = fn(&mut Vec<u8>);
    let fields: [(&str, Tamper); 4] = [
        ("request id", |f| f[8] = 1),
        ("flags", |f| f[6] ^= 2),
        ("seq or MAC", |f| f[32] = 1),
        ("seq or MAC", |f| f[71] = 1),
    ];
    for (what, tamper) in fields {
        for index in [0, 1, 2] {
            let o = run(key(1), key(1), false, false, |i, bytes| {
                if i == index {
                    tamper(bytes)
                }
            });
            let err = if index == 1 { o.client } else { o.server }.unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(
                    &err,
                    ProtoError::BadRequest(_)
                        | ProtoError::Refused {
                            status: Status::BadRequest,
                            ..
                        }
                ),
                "frame {index}, {what}: {text}"
            );
            let named = if what == "flags" {
                "flags"
            } else {
                what.split(' ').next().unwrap()
            };
            assert!(text.contains(named), "frame {index}, {what}: {text}");
        }
    }
    // Ready is sealed: a request id there is refused too (its MAC covers the id, so the
    // tampered frame would fail its MAC first; check the rule on an honest server's frame).
    let o = run(key(1), key(1), false, false, |i, bytes| {
        if i == 3 {
            bytes[8] = 1
        }
    });
    assert!(o.client.is_err());
}

/// The server answers unknown option bits with `BadRequest` naming them.
#[test]
fn unknown_option_bits_are_refused() {
    let o = run(key(1), key(1), false, false, |i, bytes| {
        if i == 0 {
            bytes[HEADER_LEN + 1] |= 0x80;
            let sum = memkv_proto::checksum::of(&bytes[HEADER_LEN..]);
            bytes[24..32].copy_from_slice(&sum.to_le_bytes());
        }
    });
    let err = o.server.unwrap_err();
    assert_eq!(err.status(), Status::BadRequest);
    assert!(
        err.to_string().contains("unknown handshake options 0x80"),
        "{err}"
    );
}

/// After the handshake, a frame with PAYLOAD_MAC in a session without payload MACs is refused,
/// as is one without it in a session with them.
#[test]
fn the_payload_mac_flag_must_match_the_session() {
    let (mut client, server) = established(false, false);
    let mut h = Header::request(Opcode::Ping, 1);
    h.flags = Flags::PAYLOAD_MAC;
    let frame = client.sealer.frame(h, &[], b"x");
    let raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    let err = server.opener.header(&raw).unwrap_err();
    assert!(err.to_string().contains("without payload MACs"), "{err}");

    let (mut client, server) = established(true, false);
    let frame = client
        .sealer
        .frame(Header::request(Opcode::Ping, 1), &[], b"x");
    let mut raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    raw[6] &= !(Flags::PAYLOAD_MAC.0 as u8);
    let err = server.opener.header(&raw).unwrap_err();
    assert!(err.to_string().contains("requires payload MACs"), "{err}");
}

/// A refusal after the handshake is sealed with the sender's key and next seq, echoes the
/// refused frame's opcode byte (even an unknown one) and request id, and sets RESPONSE.
#[test]
fn a_sealed_refusal_echoes_the_refused_frame() {
    for payload_mac in [false, true] {
        let (mut client, mut server) = established(payload_mac, false);
        let mut request = client
            .sealer
            .frame(Header::request(Opcode::Ping, 0xAB_CDEF), &[], b"x");
        request[5] = 0x7F;
        let raw: [u8; HEADER_LEN] = request[..HEADER_LEN].try_into().unwrap();
        let err = server.opener.header(&raw).unwrap_err();
        assert_eq!(err, ProtoError::UnknownOpcode(0x7F));
        let refusal = server.sealer.refusal(&raw, &err);
        assert_eq!(refusal[5], 0x7F);
        assert_eq!(&refusal[8..16], &0xAB_CDEFu64.to_le_bytes());
        // The peer's opener checks seq and MAC; only the unknown opcode stops its decoder,
        // so check the rest on a copy with a known opcode and a MAC made over that copy.
        let (mut c2, mut s2) = established(payload_mac, false);
        let mut known = raw;
        known[5] = Opcode::Ping.code();
        let refusal = s2.sealer.refusal(&known, &err);
        let head: [u8; HEADER_LEN] = refusal[..HEADER_LEN].try_into().unwrap();
        // s2's Ready was frame 0, so the refusal is frame 1; c2 opened Ready already.
        let h = c2
            .opener
            .verify(&head, &[], &refusal[HEADER_LEN..], true)
            .unwrap();
        assert_eq!(h.seq, 1);
        assert!(h.is_response());
        assert_eq!(h.status, Status::BadRequest);
        assert_eq!(h.request_id, 0xAB_CDEF);
        assert_eq!(h.flags.contains(Flags::PAYLOAD_MAC), payload_mac);
        assert_eq!(&refusal[HEADER_LEN..], b"unknown opcode 0x7f");
    }
}

/// A frame verified from its header and key before its payload is read: accepted in order,
/// a flipped header or key bit refused, and a payload-MAC frame never verified this way.
#[test]
fn frames_verify_before_their_payload_without_payload_macs_only() {
    let (mut client, mut server) = established(false, false);
    let frame = client.sealer.frame(
        Header::request(Opcode::TcpPut, 4),
        b"the-key",
        b"value bytes",
    );
    let raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    let key = &frame[HEADER_LEN..HEADER_LEN + 7];
    for bit in 0..(HEADER_LEN + key.len()) * 8 {
        let mut bytes = frame[..HEADER_LEN + key.len()].to_vec();
        bytes[bit / 8] ^= 1 << (bit % 8);
        let flipped: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let mut opener = server.opener.clone();
        assert!(
            opener
                .verify_before_payload(&flipped, &bytes[HEADER_LEN..])
                .is_err(),
            "flip of bit {bit} accepted"
        );
    }
    let header = server.opener.verify_before_payload(&raw, key).unwrap();
    assert_eq!((header.opcode, header.request_id), (Opcode::TcpPut, 4));
    assert_eq!(
        server.opener.verify_before_payload(&raw, key),
        Err(ProtoError::BadSequence {
            expected: 1,
            got: 0
        })
    );

    let (mut client, mut server) = established(false, true);
    let frame = client
        .sealer
        .frame(Header::request(Opcode::TcpPut, 1), b"k", b"value");
    let raw: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    let refused = server.opener.verify_before_payload(&raw, b"k").unwrap_err();
    assert!(
        refused.to_string().contains("covers its payload"),
        "{refused}"
    );
}
