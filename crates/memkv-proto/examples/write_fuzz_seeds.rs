//! Writes the seed corpora of the fuzz targets over memkv-proto's decoders (fuzz/corpus/*):
//! one valid input of each shape. `cargo run -p memkv-proto --example write_fuzz_seeds`.

use memkv_proto::batch::{self, GetItem, PutItem};
use memkv_proto::messages::{AllocateRequest, LookupResponse};
use memkv_proto::{
    AuthKey, ClientHandshake, Header, Limits, Opcode, ServerHandshake, Status, Step, checksum,
};

fn corpus_dir(target: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn write_all(target: &str, seeds: Vec<(&str, Vec<u8>)>) -> std::io::Result<()> {
    let dir = corpus_dir(target)?;
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote seeds to {}", dir.display());
    Ok(())
}

fn main() -> std::io::Result<()> {
    frame_decoder_seeds()?;
    handshake_seeds()?;
    batch_payload_seeds()?;
    connect_payload_seeds()
}

/// Whole exchanges under the handshake target's fixed key and nonces, with and without
/// payload MACs (`memkv_proto::fuzzing::handshake_exchanges`).
fn handshake_seeds() -> std::io::Result<()> {
    let (server_plain, client_plain) = memkv_proto::fuzzing::handshake_exchanges(0);
    let (server_mac, client_mac) = memkv_proto::fuzzing::handshake_exchanges(3);
    write_all(
        "handshake",
        vec![
            ("server-plain", server_plain),
            ("client-plain", client_plain),
            ("server-payload-mac", server_mac),
            ("client-payload-mac", client_mac),
        ],
    )
}

/// Batch payloads under the default limits (option byte 0).
fn batch_payload_seeds() -> std::io::Result<()> {
    let value = b"some value bytes".to_vec();
    let put = batch::encode_put_request(&[
        PutItem {
            key: b"a",
            value: &value,
            checksum: checksum::of(&value),
        },
        PutItem {
            key: b"bb",
            value: b"",
            checksum: checksum::of(b""),
        },
    ]);
    let keys = batch::encode_keys(&[b"a", b"b"]);
    let got = batch::encode_get_response(&[
        GetItem {
            status: Status::Ok,
            value: &value,
            checksum: checksum::of(&value),
        },
        GetItem {
            status: Status::NotFound,
            value: b"",
            checksum: 0,
        },
    ]);
    let with_limits = |p: Vec<u8>| [&[0u8][..], &p].concat();
    write_all(
        "batch_payloads",
        vec![
            ("put", with_limits(put)),
            ("keys", with_limits(keys)),
            ("get-resp", with_limits(got)),
        ],
    )
}

/// A client's endpoint (RC, GID-addressed) and a server's answer (LID, arena, DC target).
fn connect_payload_seeds() -> std::io::Result<()> {
    use memkv_proto::connect::RdmaEndpoint;
    let client = RdmaEndpoint {
        rc_capable: true,
        qp_num: 0x1234,
        psn: 77,
        gid: [0xfe; 16],
        gid_index: 3,
        mtu: 4096,
        ..RdmaEndpoint::default()
    };
    let server = RdmaEndpoint {
        lid: Some(12),
        dc_target: true,
        full_member: true,
        mtu: 1024,
        arena_addr: 0x7f00_0000_0000,
        arena_rkey: 0xabcd,
        ..client
    };
    write_all(
        "connect_payload",
        vec![("client", client.encode()), ("server", server.encode())],
    )
}

fn frame_decoder_seeds() -> std::io::Result<()> {
    let key = AuthKey::from_bytes([9; 32]);
    let (_, hello) = ClientHandshake::start(key.clone(), [1; 32], false, Limits::DEFAULT);
    let mut server = ServerHandshake::new(key, [2; 32], false, Limits::DEFAULT);
    let (hello_frame, _) = memkv_proto::Frame::decode(&hello, &Limits::HANDSHAKE).expect("hello");
    let Ok(Step::Send(challenge)) = server.on_frame(&hello_frame) else {
        panic!("challenge")
    };
    let value = b"some value bytes".to_vec();
    let mut seeds: Vec<(&str, Vec<u8>)> = vec![("hello", hello), ("challenge", challenge)];
    let plain = |h: Header, key: &[u8], payload: &[u8]| {
        let mut h = h;
        h.key_len = key.len() as u16;
        h.payload_len = payload.len() as u32;
        h.checksum = checksum::of(payload);
        let mut out = h.to_bytes().to_vec();
        out.extend_from_slice(key);
        out.extend_from_slice(payload);
        out
    };
    seeds.push((
        "tcpput",
        plain(Header::request(Opcode::TcpPut, 1), b"key", &value),
    ));
    seeds.push((
        "tcpget",
        plain(Header::request(Opcode::TcpGet, 2), b"key", b""),
    ));
    seeds.push((
        "allocate",
        plain(
            Header::request(Opcode::Allocate, 3),
            b"key",
            &AllocateRequest {
                len: 4096,
                lease_ms: 0,
            }
            .encode(),
        ),
    ));
    let get = Header::response(&Header::request(Opcode::Lookup, 4), Status::Ok);
    seeds.push((
        "lookup-resp",
        plain(
            get,
            b"",
            &LookupResponse {
                pin: 1,
                addr: 2,
                rkey: 3,
                lease_ms: 4,
                len: 5,
                checksum: 6,
            }
            .encode(),
        ),
    ));
    let items = [PutItem {
        key: b"a",
        value: &value,
        checksum: checksum::of(&value),
    }];
    seeds.push((
        "batchput",
        plain(
            Header::request(Opcode::BatchPut, 5),
            b"",
            &batch::encode_put_request(&items),
        ),
    ));
    seeds.push((
        "batchget",
        plain(
            Header::request(Opcode::BatchGet, 6),
            b"",
            &batch::encode_keys(&[b"a", b"b"]),
        ),
    ));
    let resp = Header::response(&Header::request(Opcode::BatchGet, 6), Status::Ok);
    let got = [GetItem {
        status: Status::Ok,
        value: &value,
        checksum: checksum::of(&value),
    }];
    seeds.push((
        "batchget-resp",
        plain(resp, b"", &batch::encode_get_response(&got)),
    ));
    write_all("frame_decoder", seeds)
}
