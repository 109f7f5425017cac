//! Checks the hex test vectors in docs/protocol.md against the code. Run with
//! `MEMKV_PRINT_VECTORS=1 cargo test -p memkv-proto --test vectors -- --nocapture` to print them.

use memkv_proto::connect::RdmaEndpoint;
use memkv_proto::{
    AuthKey, ClientHandshake, Frame, HEADER_LEN, Header, Limits, Opcode, ProtoError,
    ServerHandshake, Step, batch, checksum, placement,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn frame(bytes: &[u8]) -> Frame {
    Frame::decode(bytes, &Limits::HANDSHAKE).unwrap().0
}

/// The vectors' auth key: bytes 00 01 02 … 1f.
fn key_bytes() -> [u8; 32] {
    core::array::from_fn(|i| i as u8)
}

/// Every vector as (name, lowercase hex or text).
fn vectors() -> Vec<(&'static str, String)> {
    let key = AuthKey::from_bytes(key_bytes());
    let (mut client, hello) =
        ClientHandshake::start(key.clone(), [0x11; 32], false, Limits::DEFAULT);
    let mut server = ServerHandshake::new(key.clone(), [0x22; 32], false, Limits::DEFAULT);
    let Step::Send(challenge) = server.on_frame(&frame(&hello)).unwrap() else {
        panic!()
    };
    let Step::Send(proof) = client.on_frame(&frame(&challenge)).unwrap() else {
        panic!()
    };
    let Step::Established {
        reply: Some(ready),
        session: mut server_session,
    } = server.on_frame(&frame(&proof)).unwrap()
    else {
        panic!()
    };
    let Step::Established {
        session: mut client_session,
        ..
    } = client.on_frame(&frame(&ready)).unwrap()
    else {
        panic!()
    };
    let put = client_session.sealer.frame(
        Header::request(Opcode::TcpPut, 1),
        b"block-0001",
        b"hello, memkv",
    );
    let batch_items = [(b"a", b"one"), (b"b", b"two")].map(|(key, value)| batch::PutItem {
        key,
        value,
        checksum: checksum::of(value),
    });
    let batch_put = client_session.sealer.frame(
        Header::request(Opcode::BatchPut, 2),
        b"",
        &batch::encode_put_request(&batch_items),
    );

    // The transcript carries the negotiated options: a client that asks for none, a server
    // that requires payload MACs. Challenge says options 1, and Proof is computed with 1.
    let (mut mac_client, mac_hello) =
        ClientHandshake::start(key.clone(), [0x11; 32], false, Limits::DEFAULT);
    let mut mac_server = ServerHandshake::new(key.clone(), [0x22; 32], true, Limits::DEFAULT);
    let Step::Send(mac_challenge) = mac_server.on_frame(&frame(&mac_hello)).unwrap() else {
        panic!()
    };
    let Step::Send(mac_proof) = mac_client.on_frame(&frame(&mac_challenge)).unwrap() else {
        panic!()
    };
    assert!(matches!(
        mac_server.on_frame(&frame(&mac_proof)).unwrap(),
        Step::Established { session, .. } if session.payload_mac()
    ));

    // The server's fatal refusal of a client frame (a Ping, request id 2) whose seq was 5 where
    // 0 was expected: the server's frame 1, after Ready.
    let mut ping = Header::request(Opcode::Ping, 2);
    ping.seq = 5;
    let refusal = server_session.sealer.refusal(
        &ping.to_bytes(),
        &ProtoError::BadSequence {
            expected: 0,
            got: 5,
        },
    );
    // It opens on the client as the server's frame 1: a response to Ping 2, Unauthorized.
    let opened = client_session
        .opener
        .verify(
            refusal[..HEADER_LEN].try_into().unwrap(),
            &[],
            &refusal[HEADER_LEN..],
            true,
        )
        .expect("the refusal vector is a sealed frame");
    assert_eq!(
        (opened.seq, opened.opcode, opened.request_id, opened.status),
        (1, Opcode::Ping, 2, memkv_proto::Status::Unauthorized)
    );
    assert!(opened.is_response());

    // Connect: a client on InfiniBand (LID 0x0012) that can do RC and DC, and a server's
    // answer on RoCE (no LID) that chose DC: its DC target number in the queue pair field.
    let connect_request = RdmaEndpoint {
        lid: Some(0x0012),
        rc_capable: true,
        dc_capable: true,
        full_member: true,
        dc_target: false,
        qp_num: 0x0001_0203,
        psn: 0x00ab_cdef,
        gid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ],
        gid_index: 1,
        subnet_prefix: 0xfe80_0000_0000_0000,
        mtu: 4096,
        pkey_index: 0,
        arena_addr: 0,
        arena_rkey: 0,
    };
    let connect_response = RdmaEndpoint {
        lid: None,
        rc_capable: true,
        dc_capable: true,
        full_member: true,
        dc_target: true,
        qp_num: 0x0000_4567,
        psn: 0x0012_3456,
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7],
        gid_index: 3,
        subnet_prefix: 0,
        mtu: 1024,
        pkey_index: 0,
        arena_addr: 0x7f00_1234_5000,
        arena_rkey: 0x0000_1a2b,
    };
    let dc_tag: [u8; 32] = {
        use hmac::Mac;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key_bytes().as_slice()).unwrap();
        m.update(b"memkv dc access key v1");
        m.finalize().into_bytes().into()
    };

    let mut get = Header::request(Opcode::TcpGet, 0x0102_0304_0506_0708);
    get.key_len = 5;
    get.checksum = checksum::of(b"");

    let servers = ["10.0.0.1:9900", "10.0.0.2:9900", "10.0.0.3:9900"];
    let owners: Vec<String> = ["a", "b", "block-0001", "layer7/seq42/block3"]
        .iter()
        .map(|k| {
            format!(
                "{k} -> {}",
                servers[placement::owner(k.as_bytes(), &servers).unwrap()]
            )
        })
        .collect();

    vec![
        ("checksum-memkv", format!("{:016x}", checksum::of(b"memkv"))),
        ("header-tcpget", hex(&get.to_bytes())),
        ("handshake-hello", hex(&hello)),
        ("handshake-challenge", hex(&challenge)),
        ("handshake-proof", hex(&proof)),
        ("handshake-ready", hex(&ready)),
        ("sealed-tcpput", hex(&put)),
        ("sealed-batchput", hex(&batch_put)),
        (
            "placement-seed",
            format!("{:016x}", placement::server_seed(servers[0])),
        ),
        (
            "placement-weight",
            format!(
                "{:016x}",
                placement::weight(b"a", placement::server_seed(servers[0]))
            ),
        ),
        ("placement-owners", owners.join("\n")),
        ("handshake-challenge-required-mac", hex(&mac_challenge)),
        ("handshake-proof-required-mac", hex(&mac_proof)),
        ("sealed-refusal", hex(&refusal)),
        ("connect-request", hex(&connect_request.encode())),
        ("connect-response-dc", hex(&connect_response.encode())),
        ("dc-access-key-hmac", hex(&dc_tag)),
        (
            "dc-access-key",
            format!("{:016x}", AuthKey::from_bytes(key_bytes()).dc_access_key()),
        ),
    ]
}

fn documented() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/protocol.md"
    ))
    .expect("docs/protocol.md exists");
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- vector: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().expect("fence after vector marker");
        assert!(
            fence.starts_with("```"),
            "vector {name}: expected a code fence"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        out.push((name.to_owned(), body.join("\n")));
    }
    out
}

fn normalise(name: &str, text: &str) -> String {
    if name == "placement-owners" {
        text.trim().to_owned()
    } else {
        text.split_whitespace().collect()
    }
}

#[test]
fn documented_vectors_match_the_code() {
    let code = vectors();
    if std::env::var_os("MEMKV_PRINT_VECTORS").is_some() {
        for (name, v) in &code {
            println!("<!-- vector: {name} -->\n```\n{}\n```\n", wrap(name, v));
        }
    }
    let doc = documented();
    for (name, value) in &code {
        let found = doc
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("docs/protocol.md lacks vector {name}"));
        assert_eq!(
            normalise(name, &found.1),
            normalise(name, value),
            "vector {name} differs from the code"
        );
    }
    assert_eq!(
        doc.len(),
        code.len(),
        "docs/protocol.md has vectors the test does not check"
    );
    assert_eq!(HEADER_LEN, 72);
}

fn wrap(name: &str, v: &str) -> String {
    if name == "placement-owners" {
        return v.to_owned();
    }
    v.as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}
