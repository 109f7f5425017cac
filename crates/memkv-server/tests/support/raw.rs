//! A minimal protocol client over one connection: a test driver, not the product client.
#![allow(dead_code)]

use std::net::SocketAddr;

use memkv_proto::{
    AuthKey, ClientHandshake, Frame, HEADER_LEN, Header, Limits, Opcode, PROTOCOL_VERSION,
    ProtoError, Session, Status, Step,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A minimal protocol client over one connection (a test driver, not the product client).
pub struct Raw {
    pub stream: TcpStream,
    pub session: Session,
    pub next_id: u64,
}

pub async fn read_frame(
    stream: &mut TcpStream,
    limits: &Limits,
) -> std::io::Result<(Header, [u8; HEADER_LEN], Vec<u8>)> {
    let mut raw = [0u8; HEADER_LEN];
    stream.read_exact(&mut raw).await?;
    let h = Header::decode(&raw, limits).map_err(std::io::Error::other)?;
    let mut body = vec![0u8; h.body_len() as usize];
    stream.read_exact(&mut body).await?;
    Ok((h, raw, body))
}

pub async fn connect(addr: SocketAddr, key: AuthKey) -> Result<Raw, ProtoError> {
    connect_with(addr, key, false).await
}

/// [`connect`], asking for payload MACs when `payload_mac`.
pub async fn connect_with(
    addr: SocketAddr,
    key: AuthKey,
    payload_mac: bool,
) -> Result<Raw, ProtoError> {
    connect_at(PROTOCOL_VERSION, addr, key, payload_mac).await
}

/// [`connect_with`], speaking protocol `version` (an older client).
pub async fn connect_at(
    version: u8,
    addr: SocketAddr,
    key: AuthKey,
    payload_mac: bool,
) -> Result<Raw, ProtoError> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (mut hs, hello) =
        ClientHandshake::start_at(version, key, [3; 32], payload_mac, Limits::DEFAULT);
    stream.write_all(&hello).await.unwrap();
    loop {
        let (_, raw, body) = read_frame(&mut stream, &Limits::DEFAULT).await.unwrap();
        let mut bytes = raw.to_vec();
        bytes.extend_from_slice(&body);
        let (frame, _) = Frame::decode(&bytes, &Limits::DEFAULT)?;
        match hs.on_frame(&frame)? {
            Step::Send(b) => stream.write_all(&b).await.unwrap(),
            Step::Established { session, .. } => {
                return Ok(Raw {
                    stream,
                    session,
                    next_id: 1,
                });
            }
        }
    }
}

impl Raw {
    pub fn frame(&mut self, op: Opcode, key: &[u8], payload: &[u8]) -> Vec<u8> {
        self.next_id += 1;
        self.session
            .sealer
            .frame(Header::request(op, self.next_id), key, payload)
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    pub async fn recv(&mut self) -> std::io::Result<(Header, Vec<u8>)> {
        let (_, raw, body) = read_frame(&mut self.stream, &Limits::DEFAULT).await?;
        let h = self
            .session
            .opener
            .verify(&raw, &[], &body, true)
            .map_err(std::io::Error::other)?;
        Ok((h, body))
    }

    /// Sends a request whose header carries `sum` as its payload checksum, right or wrong, and
    /// returns the answer.
    pub async fn call_with_checksum(
        &mut self,
        op: Opcode,
        key: &[u8],
        payload: &[u8],
        sum: u64,
    ) -> (Header, Vec<u8>) {
        self.next_id += 1;
        let mut h = Header::request(op, self.next_id);
        let head = self
            .session
            .sealer
            .seal_with_checksum(&mut h, key, &[payload], sum);
        self.send(&[&head[..], key, payload].concat()).await;
        self.recv().await.expect("response")
    }

    pub async fn call(&mut self, op: Opcode, key: &[u8], payload: &[u8]) -> (Status, Vec<u8>) {
        let f = self.frame(op, key, payload);
        self.send(&f).await;
        let (h, body) = self.recv().await.expect("response");
        (h.status, body)
    }
}
