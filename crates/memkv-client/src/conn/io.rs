//! The byte-moving halves of a connection: vectored request writes and the response reader.

use std::io::{ErrorKind, IoSlice};
use std::sync::Arc;

use memkv_proto::{HEADER_LEN, Opener, ProtoError, Status};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use super::pending::{Pending, Reply};
use super::{READ_BUFFER, Response, Sink, Writer};
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
    r: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    len: usize,
) -> std::io::Result<()> {
    buf.clear();
    buf.reserve_exact(len);
    if len >= READ_BUFFER {
        take_buffered(r, len, |part| buf.extend_from_slice(part));
        return fill_to(r.get_mut(), buf, len).await;
    }
    fill_to(r, buf, len).await
}

/// Reads from `src` into `buf`'s spare capacity until `buf` holds `len` bytes.
async fn fill_to<S: AsyncRead + Unpin>(
    src: &mut S,
    buf: &mut Vec<u8>,
    len: usize,
) -> std::io::Result<()> {
    let mut limited = src.take((len - buf.len()) as u64);
    while buf.len() < len {
        if limited.read_buf(buf).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Fills `dest` exactly, as [`read_body`] does a vector, unless the caller stops waiting
/// first (`waiting` closes: a deadline passed, or its future was dropped). Then the read stops
/// at once, since the caller may be waiting for its memory back before it reuses it.
async fn read_body_into<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    dest: &mut [u8],
    waiting: &mut oneshot::Sender<Reply>,
) -> std::io::Result<Landing> {
    if dest.len() >= READ_BUFFER {
        let taken = take_buffered(r, dest.len(), |part| {
            dest[..part.len()].copy_from_slice(part)
        });
        return fill_while_awaited(r.get_mut(), dest, taken, waiting).await;
    }
    fill_while_awaited(r, dest, 0, waiting).await
}

/// What became of a value read into a caller's memory.
#[derive(Debug, PartialEq, Eq)]
enum Landing {
    Whole,
    /// The caller stopped waiting after this many bytes had landed.
    Abandoned(usize),
}

async fn fill_while_awaited<S: AsyncRead + Unpin>(
    src: &mut S,
    dest: &mut [u8],
    mut filled: usize,
    waiting: &mut oneshot::Sender<Reply>,
) -> std::io::Result<Landing> {
    while filled < dest.len() {
        tokio::select! {
            biased;
            () = waiting.closed() => return Ok(Landing::Abandoned(filled)),
            read = src.read(&mut dest[filled..]) => match read? {
                0 => return Err(ErrorKind::UnexpectedEof.into()),
                n => filled += n,
            },
        }
    }
    Ok(Landing::Whole)
}

/// Hands over (to `put`) up to `max` bytes the reader holds, and how many. A payload at least
/// as large as the reader's buffer ([`READ_BUFFER`]) reads the rest from the socket itself:
/// through the buffer, its last part would be copied twice.
fn take_buffered<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    max: usize,
    put: impl FnOnce(&[u8]),
) -> usize {
    let buffered = r.buffer();
    let n = buffered.len().min(max);
    put(&buffered[..n]);
    r.consume(n);
    n
}

/// Reads and verifies response frames until the connection fails, completing requests.
pub(crate) async fn read_loop<R: AsyncRead + Unpin>(
    shared: Arc<Pending>,
    mut reader: BufReader<R>,
    mut opener: Opener,
) {
    let mut headers = HeaderReads::Buffered;
    let err = loop {
        match read_one(&shared, &mut reader, &mut opener, &mut headers).await {
            Ok(()) => continue,
            Err(e) => break e,
        }
    };
    if !matches!(err, Error::Disconnected { .. }) {
        tracing::warn!(server = shared.server(), "closing connection: {err}");
    }
    shared.close(err);
}

/// How the next header is read. A buffered read fills the reader's buffer with whatever
/// follows the header, which is what small answers want (several per read) and what a large
/// payload does not: its first part would be copied out of the buffer again. Answers on a
/// connection tend to look like the one before, so after a large payload the next header is
/// read on its own, and the payload behind it goes from the socket straight to where it lands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HeaderReads {
    Buffered,
    Exact,
}

impl HeaderReads {
    fn after(body: usize) -> Self {
        if body >= READ_BUFFER {
            HeaderReads::Exact
        } else {
            HeaderReads::Buffered
        }
    }
}

async fn read_header<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    raw: &mut [u8; HEADER_LEN],
    how: HeaderReads,
) -> std::io::Result<()> {
    if how == HeaderReads::Exact && reader.buffer().is_empty() {
        // Nothing is buffered, so reading past the buffer keeps the bytes in order.
        reader.get_mut().read_exact(raw).await?;
    } else {
        reader.read_exact(raw).await?;
    }
    Ok(())
}

async fn read_one<R: AsyncRead + Unpin>(
    shared: &Pending,
    reader: &mut BufReader<R>,
    opener: &mut Opener,
    headers: &mut HeaderReads,
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
    read_header(reader, &mut raw, *headers)
        .await
        .map_err(lost)?;
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
    *headers = HeaderReads::after(body);
    let (mut entry, mut sink) = match entry {
        Some(mut e) => {
            let sink = std::mem::take(&mut e.sink);
            (Some(e), sink)
        }
        None => (None, Sink::default()),
    };
    // A successful answer that fits the caller's memory is read straight into it.
    let landed = match (&mut sink, entry.as_mut()) {
        (Sink::Direct(dest), Some(waiting)) if header.status == Status::Ok => {
            match dest.as_mut_bytes().get_mut(..body) {
                Some(slice) => Some(
                    read_body_into(reader, slice, &mut waiting.tx)
                        .await
                        .map_err(lost)?,
                ),
                None => None,
            }
        }
        _ => None,
    };
    if let Some(Landing::Abandoned(read)) = landed {
        // The caller's memory goes back now; the rest of the payload is read (and the frame
        // verified, to keep the sequence) into a vector of our own.
        let Sink::Direct(mut dest) = sink else {
            unreachable!("only a direct sink is abandoned")
        };
        let mut rest = dest.as_mut_bytes()[..read].to_vec();
        drop(dest);
        fill_to(reader, &mut rest, body).await.map_err(lost)?;
        return opener
            .verify(&raw, &[], &rest, false)
            .map(drop)
            .map_err(protocol);
    }
    let landed = landed.map(|_| body);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn large_payloads_skip_the_buffer_and_keep_the_bytes_in_order() {
        let data = pattern(4 * READ_BUFFER);
        let mut r = BufReader::with_capacity(READ_BUFFER, &data[..]);
        let mut raw = [0u8; HEADER_LEN];
        read_header(&mut r, &mut raw, HeaderReads::Buffered)
            .await
            .unwrap();
        assert_eq!(raw[..], data[..HEADER_LEN]);
        assert!(!r.buffer().is_empty(), "a buffered header read fills ahead");
        let mut at = HEADER_LEN;
        let mut body = Vec::new();
        read_body(&mut r, &mut body, READ_BUFFER + 5).await.unwrap();
        assert_eq!(body[..], data[at..at + READ_BUFFER + 5]);
        at += READ_BUFFER + 5;
        assert!(r.buffer().is_empty(), "nothing past the payload was read");
        let (mut waiting, _caller) = oneshot::channel();
        let mut dest = vec![0u8; READ_BUFFER];
        let landing = read_body_into(&mut r, &mut dest, &mut waiting).await;
        assert_eq!(landing.unwrap(), Landing::Whole);
        assert_eq!(dest[..], data[at..at + READ_BUFFER]);
        at += READ_BUFFER;
        read_header(&mut r, &mut raw, HeaderReads::Exact)
            .await
            .unwrap();
        assert_eq!(raw[..], data[at..at + HEADER_LEN]);
        at += HEADER_LEN;
        assert!(
            r.buffer().is_empty(),
            "an exact header read reads nothing more"
        );
        let mut small = Vec::new();
        read_body(&mut r, &mut small, 100).await.unwrap();
        assert_eq!(small[..], data[at..at + 100]);
        at += 100;
        let mut rest = vec![0u8; data.len() - at];
        let landing = read_body_into(&mut r, &mut rest, &mut waiting).await;
        assert_eq!(landing.unwrap(), Landing::Whole);
        assert_eq!(rest[..], data[at..]);
    }

    #[tokio::test]
    async fn a_payload_cut_short_is_an_error_either_way() {
        let data = pattern(READ_BUFFER + 100);
        for len in [101, 4_096, READ_BUFFER, 2 * READ_BUFFER] {
            let mut r = BufReader::with_capacity(READ_BUFFER, &data[..]);
            let mut head = [0u8; READ_BUFFER];
            r.read_exact(&mut head).await.unwrap();
            let mut body = Vec::new();
            let e = read_body(&mut r, &mut body, len).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "len {len}");
            let mut r = BufReader::with_capacity(READ_BUFFER, &data[..]);
            r.read_exact(&mut head).await.unwrap();
            let mut dest = vec![0u8; len];
            let (mut waiting, _caller) = oneshot::channel();
            let e = read_body_into(&mut r, &mut dest, &mut waiting)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "len {len}");
        }
    }

    #[tokio::test]
    async fn a_read_into_caller_memory_stops_when_the_caller_stops_waiting() {
        for len in [READ_BUFFER / 2, 4 * READ_BUFFER] {
            let (mut server, client) = tokio::io::duplex(8 * READ_BUFFER);
            let mut r = BufReader::with_capacity(READ_BUFFER, client);
            server.write_all(&pattern(len / 4)).await.unwrap();
            let (mut waiting, caller) = oneshot::channel();
            let mut dest = vec![0u8; len];
            let landing = {
                let reading = read_body_into(&mut r, &mut dest, &mut waiting);
                tokio::pin!(reading);
                // The rest of the value never comes: the read waits, holding the memory.
                let stalled = tokio::time::timeout(Duration::from_millis(50), &mut reading).await;
                assert!(stalled.is_err(), "len {len}");
                drop(caller);
                tokio::time::timeout(Duration::from_secs(5), reading).await
            };
            assert_eq!(
                landing
                    .expect("the read ends once the caller stops waiting")
                    .unwrap(),
                Landing::Abandoned(len / 4),
                "len {len}"
            );
            assert_eq!(dest[..len / 4], pattern(len / 4)[..]);
        }
    }

    #[test]
    fn headers_are_read_alone_after_a_large_payload() {
        assert!(HeaderReads::after(READ_BUFFER) == HeaderReads::Exact);
        assert!(HeaderReads::after(READ_BUFFER - 1) == HeaderReads::Buffered);
    }
}
