//! The body of the frame-decoder fuzz target, shared with the property test that runs it on
//! every `cargo test`.

use crate::batch;
use crate::messages::{AllocateResponse, LookupResponse, StatsResponse};
use crate::{AuthKey, Frame, HEADER_LEN, Header, Limits, ProtoError, ServerHandshake};

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

fn decode_payloads(payload: &[u8], limits: &Limits) {
    let _ = batch::decode_put_request(payload, limits);
    let _ = batch::decode_keys(payload, limits);
    let _ = batch::decode_get_response(payload, limits);
    let _ = batch::decode_statuses(payload, limits);
    let _ = LookupResponse::decode(payload);
    let _ = AllocateResponse::decode(payload);
    let _ = StatsResponse::decode(payload);
    let _ = crate::connect::RdmaEndpoint::decode(payload);
}
