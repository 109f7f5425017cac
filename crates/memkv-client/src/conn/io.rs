//! The byte-moving halves of a connection: vectored request writes and the response reader.

use std::io::{ErrorKind, IoSlice};
use std::sync::Arc;

use memkv_proto::{HEADER_LEN, Opener, ProtoError, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::pending::Pending;
use super::{Response, Sink, Writer};
use crate::Error;

/// Most slices handed to one `writev` (the kernel's IOV_MAX).
const MAX_IOV: usize = 1024;

/// Writes every part, in order, with vectored writes; no part is copied.
pub(crate) async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    parts: &[&[u8]],
) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = rest.len().min(MAX_IOV);
        let written = w.write_vectored(&rest[..n]).await?;
        if written == 0 {
            return Err(ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, written);
    }
    w.flush().await
}

/// Held while a request is written. If the write is abandoned half way (the caller's deadline
/// passed and its future was dropped), the stream holds a partial frame and can never carry
/// another: the guard then shuts the socket and fails the connection's outstanding requests.
pub(crate) struct WriteGuard<'a> {
    writer: &'a mut Writer,
    shared: &'a Pending,
    finished: bool,
}

impl<'a> WriteGuard<'a> {
    pub fn new(writer: &'a mut Writer, shared: &'a Pending) -> Self {
        WriteGuard {
            writer,
            shared,
            finished: false,
        }
    }

    pub fn writer(&mut self) -> &mut Writer {
        self.writer
    }

    /// The frame went out whole (or nothing was written).
    pub fn done(mut self) {
        self.finished = true;
    }

    /// The write failed: close the connection with `err`.
    pub fn fail(mut self, err: Error) {
        self.writer.half = None;
        self.shared.close(err);
        self.finished = true;
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.writer.half = None;
            self.shared.close(Error::Disconnected {
                server: self.shared.server().to_owned(),
                reason: "a request was abandoned part-written (deadline passed)".into(),
            });
        }
    }
}

/// Reads exactly `len` bytes into `buf` (cleared first), straight into its spare capacity.
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    len: usize,
) -> std::io::Result<()> {
    buf.clear();
    buf.reserve_exact(len);
    let mut limited = r.take(len as u64);
    while buf.len() < len {
        if limited.read_buf(buf).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Reads and verifies response frames until the connection fails, completing requests.
pub(crate) async fn read_loop<R: AsyncRead + Unpin>(
    shared: Arc<Pending>,
    mut reader: R,
    mut opener: Opener,
) {
    let err = loop {
        match read_one(&shared, &mut reader, &mut opener).await {
            Ok(()) => continue,
            Err(e) => break e,
        }
    };
    if !matches!(err, Error::Disconnected { .. }) {
        tracing::warn!(server = shared.server(), "closing connection: {err}");
    }
    shared.close(err);
}

async fn read_one<R: AsyncRead + Unpin>(
    shared: &Pending,
    reader: &mut R,
    opener: &mut Opener,
) -> Result<(), Error> {
    let server = shared.server();
    let lost = |e: std::io::Error| Error::Disconnected {
        server: server.to_owned(),
        reason: if e.kind() == ErrorKind::UnexpectedEof {
            "the server closed the connection".to_owned()
        } else {
            e.to_string()
        },
    };
    let protocol = |source: ProtoError| Error::Protocol {
        server: server.to_owned(),
        source,
    };
    let mut raw = [0u8; HEADER_LEN];
    reader.read_exact(&mut raw).await.map_err(lost)?;
    // Header, sequence and limits are checked before anything is allocated from its lengths.
    let header = opener.header(&raw).map_err(protocol)?;
    if !header.is_response() {
        return Err(protocol(ProtoError::BadRequest(format!(
            "server sent a {:?} request on a client connection",
            header.opcode
        ))));
    }
    let entry = shared.take(header.request_id);
    let body = usize::try_from(header.payload_len).expect("u32 fits usize");
    let (mut entry, mut sink) = match entry {
        Some(mut e) => {
            let sink = std::mem::take(&mut e.sink);
            (Some(e), sink)
        }
        None => (None, Sink::default()),
    };
    // A successful answer that fits the caller's memory is read straight into it.
    let landed = match &mut sink {
        Sink::Direct(dest) if header.status == Status::Ok => {
            match dest.as_mut_bytes().get_mut(..body) {
                Some(slice) => {
                    reader.read_exact(slice).await.map_err(lost)?;
                    Some(body)
                }
                None => None,
            }
        }
        _ => None,
    };
    let (payload, direct) = match sink {
        Sink::Direct(mut dest) => {
            let payload = match landed {
                Some(_) => Vec::new(),
                None => {
                    let mut buf = Vec::new();
                    read_body(reader, &mut buf, body).await.map_err(lost)?;
                    buf
                }
            };
            let verified = match landed {
                Some(len) => verify(opener, &raw, &dest.as_mut_bytes()[..len]),
                None => verify(opener, &raw, &payload),
            };
            (verified.map(|()| payload), Some((dest, landed)))
        }
        Sink::Buffer(mut buf) => {
            read_body(reader, &mut buf, body).await.map_err(lost)?;
            let verified = verify(opener, &raw, &buf);
            (verified.map(|()| buf), None)
        }
    };
    let payload = payload.map_err(protocol);
    let Some(entry) = entry.take() else {
        // A response to a request whose caller gave up; it was verified to keep the sequence.
        return payload.map(drop);
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => {
            let _ = entry.tx.send(Err(e.clone()));
            return Err(e);
        }
    };
    if entry.opcode != header.opcode {
        let e = protocol(ProtoError::BadRequest(format!(
            "response to request {} is a {:?}, but the request was a {:?}",
            header.request_id, header.opcode, entry.opcode
        )));
        let _ = entry.tx.send(Err(e.clone()));
        return Err(e);
    }
    let _ = entry.tx.send(Ok(Response {
        status: header.status,
        payload,
        direct,
    }));
    Ok(())
}

/// Checks a response's MAC and its payload's checksum (as far as the protocol's coverage goes:
/// a batch's values are checked against their own checksums as they are taken).
fn verify(opener: &mut Opener, raw: &[u8; HEADER_LEN], payload: &[u8]) -> Result<(), ProtoError> {
    opener.verify(raw, &[], payload, true).map(drop)
}
