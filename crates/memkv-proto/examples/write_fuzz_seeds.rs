//! Writes the frame-decoder fuzz target's seed corpus: one valid frame of each shape.

use memkv_proto::batch::{self, GetItem, PutItem};
use memkv_proto::messages::{AllocateRequest, LookupResponse};
use memkv_proto::{
    AuthKey, ClientHandshake, Header, Limits, Opcode, ServerHandshake, Status, Step, checksum,
};

fn main() -> std::io::Result<()> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/frame_decoder");
    std::fs::create_dir_all(&dir)?;
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
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote seeds to {}", dir.display());
    Ok(())
}
