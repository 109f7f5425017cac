//! Frame costs: seal + encode + decode + verify of a header, and payload integrity at 1 MiB
//! (xxh3-64 checksum against a full payload MAC).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memkv_proto::{
    AuthKey, ClientHandshake, Frame, HEADER_LEN, Header, Limits, Opcode, ServerHandshake, Session,
    Step, checksum,
};
use std::hint::black_box;

fn sessions(payload_mac: bool) -> (Session, Session) {
    let key = AuthKey::from_bytes([5; 32]);
    let decode = |b: &[u8]| Frame::decode(b, &Limits::HANDSHAKE).unwrap().0;
    let (mut c, hello) = ClientHandshake::start(key.clone(), [1; 32], payload_mac, Limits::DEFAULT);
    let mut s = ServerHandshake::new(key, [2; 32], false, Limits::DEFAULT);
    let Ok(Step::Send(ch)) = s.on_frame(&decode(&hello)) else {
        panic!()
    };
    let Ok(Step::Send(pr)) = c.on_frame(&decode(&ch)) else {
        panic!()
    };
    let Ok(Step::Established {
        reply: Some(r),
        session: ss,
    }) = s.on_frame(&decode(&pr))
    else {
        panic!()
    };
    let Ok(Step::Established { session: cs, .. }) = c.on_frame(&decode(&r)) else {
        panic!()
    };
    (cs, ss)
}

fn header_round_trip(c: &mut Criterion) {
    let (mut client, mut server) = sessions(false);
    let key = [7u8; 64];
    let mut g = c.benchmark_group("header");
    g.throughput(Throughput::Elements(1));
    g.bench_function("seal+encode+decode+verify (64 B key)", |b| {
        b.iter(|| {
            let mut h = Header::request(Opcode::TcpGet, 1);
            let raw = client.sealer.seal_with_checksum(&mut h, &key, &[], 0);
            let raw: &[u8; HEADER_LEN] = black_box(&raw);
            let h = server.opener.header(raw).unwrap();
            // Verification without the payload checksum: the payload is empty.
            black_box(server.opener.verify(raw, &key, &[], false).unwrap());
            h
        })
    });
    g.finish();
}

fn payload_integrity(c: &mut Criterion) {
    let payload: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut g = c.benchmark_group("payload 1 MiB");
    g.throughput(Throughput::Bytes(payload.len() as u64));
    g.bench_function("xxh3-64 checksum", |b| {
        b.iter(|| checksum::of(black_box(&payload)))
    });
    g.bench_function("memcpy (reference)", |b| {
        let mut dst = vec![0u8; payload.len()];
        b.iter(|| dst.copy_from_slice(black_box(&payload)))
    });
    let (mut client, _) = sessions(true);
    g.bench_function("seal with payload MAC (HMAC-SHA256)", |b| {
        b.iter(|| {
            let mut h = Header::request(Opcode::TcpPut, 1);
            client
                .sealer
                .seal_with_checksum(&mut h, b"k", &[black_box(&payload)], 0)
        })
    });
    g.finish();
}

criterion_group!(benches, header_round_trip, payload_integrity);
criterion_main!(benches);
