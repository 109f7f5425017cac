//! Drives the server side of the handshake over a fresh connection.

use memkv_proto::frame::encode_refusal;
use memkv_proto::{
    Frame, HEADER_LEN, Header, Limits, NONCE_LEN, ProtoError, ServerHandshake, Session, Step,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::state::Shared;

/// Why a handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("{0}")]
    Refused(ProtoError),
    #[error("connection closed during handshake: {0}")]
    Io(#[from] std::io::Error),
    #[error("no random source for the handshake nonce: {0}")]
    Random(String),
}

async fn read_frame(
    stream: &mut TcpStream,
) -> Result<Result<Frame, (Option<Header>, ProtoError)>, std::io::Error> {
    let mut raw = [0u8; HEADER_LEN];
    stream.read_exact(&mut raw).await?;
    let header = match Header::decode(&raw, &Limits::HANDSHAKE) {
        Ok(h) => h,
        Err(e) => {
            // Enough of the header to answer it, if the peer is a memkv peer at all.
            let partial = Header::decode(&raw, &Limits::DEFAULT).ok();
            let guess = partial.or_else(|| {
                (raw[..4] == memkv_proto::MAGIC)
                    .then(|| Header::request(memkv_proto::Opcode::Hello, 0))
            });
            return Ok(Err((guess, e)));
        }
    };
    let mut body = vec![0u8; header.body_len() as usize];
    stream.read_exact(&mut body).await?;
    let mut whole = raw.to_vec();
    whole.extend_from_slice(&body);
    Ok(Frame::decode(&whole, &Limits::HANDSHAKE)
        .map(|(f, _)| f)
        .map_err(|e| (Some(header), e)))
}

/// Runs the handshake; on refusal sends the named error to the peer before returning it.
pub async fn accept(shared: &Shared, stream: &mut TcpStream) -> Result<Session, HandshakeError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| HandshakeError::Random(e.to_string()))?;
    let mut machine = ServerHandshake::new(shared.key.clone(), nonce, false, shared.limits);
    loop {
        let frame = match read_frame(stream).await? {
            Ok(f) => f,
            Err((header, e)) => return Err(refuse(stream, header.as_ref(), e).await),
        };
        match machine.on_frame(&frame) {
            Ok(Step::Send(bytes)) => stream.write_all(&bytes).await?,
            Ok(Step::Established { reply, session }) => {
                if let Some(bytes) = reply {
                    stream.write_all(&bytes).await?;
                }
                return Ok(session);
            }
            Err(e) => return Err(refuse(stream, Some(&frame.header), e).await),
        }
    }
}

async fn refuse(stream: &mut TcpStream, request: Option<&Header>, e: ProtoError) -> HandshakeError {
    if let Some(h) = request {
        let _ = stream.write_all(&encode_refusal(h, &e)).await;
    }
    let _ = stream.shutdown().await;
    HandshakeError::Refused(e)
}
