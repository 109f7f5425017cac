//! Drives both handshake machines in memory, as two runtimes would over a socket.
#![allow(dead_code)]

use memkv_proto::{
    AuthKey, ClientHandshake, Frame, Limits, ProtoError, ServerHandshake, Session, Step,
    frame::encode_refusal,
};

pub const CLIENT_NONCE: [u8; 32] = [0x11; 32];
pub const SERVER_NONCE: [u8; 32] = [0x22; 32];

pub fn key(byte: u8) -> AuthKey {
    AuthKey::from_bytes([byte; 32])
}

fn one_frame(bytes: &[u8]) -> Frame {
    let (frame, used) = Frame::decode(bytes, &Limits::HANDSHAKE).expect("decodes");
    assert_eq!(used, bytes.len());
    frame
}

/// What each side saw. `Err` holds the error each side ended with.
pub struct Outcome {
    pub client: Result<Session, ProtoError>,
    pub server: Result<Session, ProtoError>,
}

/// Runs a full handshake; `tamper` may rewrite each frame on the wire (index, bytes).
pub fn run(
    client_key: AuthKey,
    server_key: AuthKey,
    client_payload_mac: bool,
    server_requires_mac: bool,
    mut tamper: impl FnMut(usize, &mut Vec<u8>),
) -> Outcome {
    let (mut client, mut hello) = ClientHandshake::start(
        client_key,
        CLIENT_NONCE,
        client_payload_mac,
        Limits::DEFAULT,
    );
    let mut server = ServerHandshake::new(
        server_key,
        SERVER_NONCE,
        server_requires_mac,
        Limits::DEFAULT,
    );
    tamper(0, &mut hello);
    let hello_frame = match Frame::decode(&hello, &Limits::HANDSHAKE) {
        Ok((f, _)) => f,
        Err(e) => return refuse_raw(&hello, e),
    };
    let challenge = match server.on_frame(&hello_frame) {
        Ok(Step::Send(b)) => b,
        Ok(_) => panic!("server established after Hello"),
        Err(e) => return refused(&mut client, &hello_frame, e),
    };
    let mut challenge = challenge;
    tamper(1, &mut challenge);
    let proof = match client.on_frame(&one_frame(&challenge)) {
        Ok(Step::Send(b)) => b,
        Ok(_) => panic!("client established after Challenge"),
        Err(e) => {
            return Outcome {
                client: Err(e),
                server: Err(ProtoError::Unauthorized("client gave up")),
            };
        }
    };
    let mut proof = proof;
    tamper(2, &mut proof);
    let proof_frame = one_frame(&proof);
    let (ready, server_session) = match server.on_frame(&proof_frame) {
        Ok(Step::Established {
            reply: Some(r),
            session,
        }) => (r, session),
        Ok(_) => panic!("server did not establish on Proof"),
        Err(e) => return refused(&mut client, &proof_frame, e),
    };
    let mut ready = ready;
    tamper(3, &mut ready);
    let client_session = match client.on_frame(&one_frame(&ready)) {
        Ok(Step::Established {
            reply: None,
            session,
        }) => Ok(session),
        Ok(_) => panic!("client did not establish on Ready"),
        Err(e) => Err(e),
    };
    Outcome {
        client: client_session,
        server: Ok(server_session),
    }
}

fn refused(client: &mut ClientHandshake, request: &Frame, err: ProtoError) -> Outcome {
    let refusal = encode_refusal(&request.header, &err);
    let client_err = client
        .on_frame(&one_frame(&refusal))
        .expect_err("client sees refusal");
    Outcome {
        client: Err(client_err),
        server: Err(err),
    }
}

fn refuse_raw(_hello: &[u8], err: ProtoError) -> Outcome {
    Outcome {
        client: Err(err.clone()),
        server: Err(err),
    }
}

pub fn established(client_payload_mac: bool, server_requires_mac: bool) -> (Session, Session) {
    let o = run(
        key(7),
        key(7),
        client_payload_mac,
        server_requires_mac,
        |_, _| {},
    );
    (
        o.client.expect("client established"),
        o.server.expect("server established"),
    )
}
