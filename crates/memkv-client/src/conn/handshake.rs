//! Opening one authenticated connection: TCP connect, then the four-frame handshake.

use std::sync::Arc;

use memkv_proto::frame::MAX_ERROR_MESSAGE;
use memkv_proto::{
    ClientHandshake, Frame, HEADER_LEN, Header, Limits, NONCE_LEN, ProtoError, Session, Step,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Error, Result};

/// Handshake frames are tiny, but a refusal may carry an error message of up to 1 KiB:
/// the protocol's handshake limit is that message's.
const HANDSHAKE_READ_LIMITS: Limits = Limits::HANDSHAKE;
const _: () = assert!(HANDSHAKE_READ_LIMITS.max_frame_payload == MAX_ERROR_MESSAGE as u64);

/// What the connect step needs to know.
pub(crate) struct Dial<'a> {
    pub server: &'a str,
    pub key: &'a memkv_proto::AuthKey,
    pub payload_mac: bool,
    pub limits: Limits,
}

/// Connects and authenticates; returns the stream and the open session.
pub(crate) async fn open(dial: &Dial<'_>) -> Result<(TcpStream, Session)> {
    let server = dial.server;
    let mut stream = TcpStream::connect(server)
        .await
        .map_err(|e| Error::Unreachable {
            server: server.to_owned(),
            source: Arc::new(e),
        })?;
    stream.set_nodelay(true).map_err(|e| Error::Unreachable {
        server: server.to_owned(),
        source: Arc::new(e),
    })?;
    super::dead_peer::watch(&stream, server);
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| Error::Io {
        context: "cannot draw a handshake nonce".into(),
        source: Arc::new(std::io::Error::other(e.to_string())),
    })?;
    let (mut machine, hello) =
        ClientHandshake::start(dial.key.clone(), nonce, dial.payload_mac, dial.limits);
    send(&mut stream, server, &hello).await?;
    loop {
        let frame = read_plain_frame(&mut stream, server).await?;
        match machine
            .on_frame(&frame)
            .map_err(|e| Error::from_handshake(server, e))?
        {
            Step::Send(bytes) => send(&mut stream, server, &bytes).await?,
            Step::Established { reply, session } => {
                if let Some(bytes) = reply {
                    send(&mut stream, server, &bytes).await?;
                }
                return Ok((stream, session));
            }
        }
    }
}

async fn send(stream: &mut TcpStream, server: &str, bytes: &[u8]) -> Result<()> {
    stream
        .write_all(bytes)
        .await
        .map_err(|e| Error::Disconnected {
            server: server.to_owned(),
            reason: format!("during the handshake: {e}"),
        })
}

/// Reads one handshake frame (or a refusal). Ready is sealed, but its body is small too.
async fn read_plain_frame(stream: &mut TcpStream, server: &str) -> Result<Frame> {
    let lost = |e: std::io::Error| Error::Disconnected {
        server: server.to_owned(),
        reason: if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "the server closed the connection during the handshake".to_owned()
        } else {
            format!("during the handshake: {e}")
        },
    };
    let mut raw = [0u8; HEADER_LEN];
    stream.read_exact(&mut raw).await.map_err(lost)?;
    let header = Header::decode(&raw, &HANDSHAKE_READ_LIMITS)
        .map_err(|e| Error::from_handshake(server, e))?;
    if !header.is_response() {
        return Err(Error::Protocol {
            server: server.to_owned(),
            source: ProtoError::BadRequest(format!(
                "server sent a {:?} request during the handshake",
                header.opcode
            )),
        });
    }
    let body_len = usize::try_from(header.body_len()).expect("bounded by handshake limits");
    let mut bytes = vec![0u8; HEADER_LEN + body_len];
    bytes[..HEADER_LEN].copy_from_slice(&raw);
    stream
        .read_exact(&mut bytes[HEADER_LEN..])
        .await
        .map_err(lost)?;
    let (frame, _) = Frame::decode(&bytes, &HANDSHAKE_READ_LIMITS)
        .map_err(|e| Error::from_handshake(server, e))?;
    Ok(frame)
}
