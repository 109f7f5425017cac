//! Drives the server side of the handshake over a fresh connection.

use memkv_proto::frame::encode_refusal_of;
use memkv_proto::{
    Frame, HEADER_LEN, Header, Limits, NONCE_LEN, ProtoError, ServerHandshake, Session, Step,
};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::state::Shared;

/// After a refusal: how long and how much the server reads and discards before closing.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: u64 = 1 << 20;

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

/// Reads one handshake frame; a frame that fails a check comes back as its raw header and
/// the error, for the refusal to answer.
async fn read_frame(
    stream: &mut TcpStream,
) -> Result<Result<Frame, ([u8; HEADER_LEN], ProtoError)>, std::io::Error> {
    let mut raw = [0u8; HEADER_LEN];
    stream.read_exact(&mut raw).await?;
    let header = match Header::decode(&raw, &Limits::HANDSHAKE) {
        Ok(h) => h,
        Err(e) => return Ok(Err((raw, e))),
    };
    let mut body = vec![0u8; header.body_len() as usize];
    stream.read_exact(&mut body).await?;
    let mut whole = raw.to_vec();
    whole.extend_from_slice(&body);
    Ok(Frame::decode(&whole, &Limits::HANDSHAKE)
        .map(|(f, _)| f)
        .map_err(|e| (raw, e)))
}

/// Runs the handshake; on refusal sends the named error to the peer before returning it.
pub async fn accept(shared: &Shared, stream: &mut TcpStream) -> Result<Session, HandshakeError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| HandshakeError::Random(e.to_string()))?;
    let mut machine = ServerHandshake::new(shared.key.clone(), nonce, false, shared.limits);
    loop {
        let frame = match read_frame(stream).await? {
            Ok(f) => f,
            Err((raw, e)) => return Err(refuse(shared, stream, &raw, e).await),
        };
        match machine.on_frame(&frame) {
            Ok(Step::Send(bytes)) => stream.write_all(&bytes).await?,
            Ok(Step::Established { reply, session }) => {
                if let Some(bytes) = reply {
                    stream.write_all(&bytes).await?;
                }
                return Ok(session);
            }
            Err(e) => return Err(refuse(shared, stream, &frame.raw_header, e).await),
        }
    }
}

/// Every refusal is a frame, even for a header that does not decode; then the connection
/// closes. It is counted before the linger, so metrics show it as soon as the peer sees it.
async fn refuse(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &[u8; HEADER_LEN],
    e: ProtoError,
) -> HandshakeError {
    crate::metrics::record_refusal(crate::metrics::RefusalReason::of(&e));
    if matches!(e, ProtoError::Unauthorized(_)) {
        shared.auth_failed();
    }
    let _ = stream.write_all(&encode_refusal_of(request, &e)).await;
    let _ = stream.shutdown().await;
    // Read what the peer already sent (briefly, and not much: it is not authenticated), so
    // closing does not reset the connection before the peer has read the refusal.
    let mut rest = (&mut *stream).take(LINGER_BYTES);
    let _ = tokio::time::timeout(LINGER, tokio::io::copy(&mut rest, &mut tokio::io::sink())).await;
    HandshakeError::Refused(e)
}
