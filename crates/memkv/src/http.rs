//! Just enough HTTP/1.x to GET a JSON document from a server's admin API: one request per
//! connection (HTTP/1.0, `Connection: close`), body bounded in size.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response accepted (a status document is a few KiB).
const MAX_RESPONSE: u64 = 4 << 20;

/// A response: status code and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET path` from `address` (host:port) within `deadline`.
pub async fn get(address: &str, path: &str, deadline: Duration) -> Result<Response, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(address)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let host = address;
        let request = format!(
            "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending the request: {e}"))?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE + 1)
            .read_to_end(&mut raw)
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        if raw.len() as u64 > MAX_RESPONSE {
            return Err(format!("response exceeds {MAX_RESPONSE} bytes"));
        }
        parse(&raw)
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| format!("no answer within {deadline:?}"))?
}

/// Parses a complete response read to end of stream.
pub fn parse(raw: &[u8]) -> Result<Response, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("response ends inside its headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| "response headers are not UTF-8")?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 response: {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(len) = length {
        body.get(..len)
            .ok_or_else(|| format!("body is {} bytes, Content-Length says {len}", body.len()))?
            .to_vec()
    } else {
        body.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunked body ends inside a chunk size")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or("chunked body ends inside a chunk")?;
        out.extend_from_slice(chunk);
        rest = rest
            .get(size + 2..)
            .ok_or("chunked body ends after a chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_chunked_and_close_delimited_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        let r =
            parse(b"HTTP/1.1 503 Unavailable\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (503, &b"abcde"[..]));
        let r = parse(b"HTTP/1.0 200 OK\r\n\r\nall of it").unwrap();
        assert_eq!(r.body, b"all of it");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse(&raw);
        }

        #[test]
        fn arbitrary_chunked_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            raw.extend_from_slice(&body);
            let _ = parse(&raw);
        }
    }

    #[test]
    fn refuses_malformed_responses() {
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9").is_err());
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 abc OK\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }
}
