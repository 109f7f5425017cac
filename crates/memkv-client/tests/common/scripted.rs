//! Scripted servers for the client's tests: raw frames read off a socket, the server side of
//! the handshake, and a listener that accepts connections and never answers on them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use memkv_proto::{Frame, HEADER_LEN, Header, Limits, ServerHandshake, Session, Step};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One frame as it came: its raw header, the header, and its body (key and payload).
pub async fn read_raw(s: &mut TcpStream, limits: &Limits) -> ([u8; HEADER_LEN], Header, Vec<u8>) {
    let mut raw = [0u8; HEADER_LEN];
    s.read_exact(&mut raw).await.unwrap();
    let h = Header::decode(&raw, limits).unwrap();
    let mut body = vec![0u8; h.body_len() as usize];
    s.read_exact(&mut body).await.unwrap();
    (raw, h, body)
}

/// Accepts one connection and completes the server side of the handshake on it.
pub async fn accept_session(listener: &TcpListener) -> (TcpStream, Session) {
    let (mut s, _) = listener.accept().await.unwrap();
    let mut hs = ServerHandshake::new(super::key(), [9; 32], false, Limits::DEFAULT);
    loop {
        let (raw, _, body) = read_raw(&mut s, &Limits::DEFAULT).await;
        let mut bytes = raw.to_vec();
        bytes.extend_from_slice(&body);
        let (frame, _) = Frame::decode(&bytes, &Limits::DEFAULT).unwrap();
        match hs.on_frame(&frame).unwrap() {
            Step::Send(b) => s.write_all(&b).await.unwrap(),
            Step::Established { reply, session } => {
                s.write_all(&reply.unwrap()).await.unwrap();
                return (s, session);
            }
        }
    }
}

/// Reads one sealed request: its header and key.
pub async fn read_request(s: &mut TcpStream, session: &mut Session) -> (Header, Vec<u8>) {
    let (raw, h, body) = read_raw(s, &Limits::DEFAULT).await;
    let key = &body[..usize::from(h.key_len)];
    let payload = &body[usize::from(h.key_len)..];
    session.opener.verify(&raw, key, payload, true).unwrap();
    (h, key.to_vec())
}

/// A server that accepts every connection and never answers on it (hung, its kernel still
/// accepting): its address, how many connections it accepted, and its task (abort it).
pub async fn silent_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    (addr, accepted, task)
}
