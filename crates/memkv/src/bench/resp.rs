//! `--redis`: the same workload against a Redis server (SET / GET / DEL over RESP), so that
//! `scripts/bench/compare` can hold both stores to one load generator, one pacing and one
//! histogram (redis-benchmark has no fixed-rate mode). One connection per task, one command in
//! flight per connection, as memkv's single-key calls.
//!
//! Only the three replies these commands produce are read (`+OK`, `:N`, `$N` / `$-1`), and an
//! error reply (`-ERR ...`) is reported with its text. This is a benchmark baseline, not a Redis
//! client: a general one (the `redis` crate) would add URL parsing and IDNA tables to the
//! `memkv` binary for two commands.

use std::io::{self, IoSlice};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Longest reply line read (a status, an integer or a bulk length): far above any of them.
const MAX_LINE: usize = 1024;

pub struct RespConn {
    stream: BufReader<TcpStream>,
    addr: String,
    line: Vec<u8>,
}

impl RespConn {
    pub async fn connect(addr: &str) -> io::Result<RespConn> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("redis {addr}: {e}")))?;
        stream.set_nodelay(true)?;
        Ok(RespConn {
            stream: BufReader::new(stream),
            addr: addr.to_owned(),
            line: Vec::new(),
        })
    }

    pub async fn set(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let mut head = command_head(3, b"SET");
        push_bulk_head(&mut head, key.len());
        head.extend_from_slice(key);
        head.extend_from_slice(b"\r\n");
        push_bulk_head(&mut head, value.len());
        write_parts(self.stream.get_mut(), &[&head, value, b"\r\n"]).await?;
        match self.reply_line().await?.as_slice() {
            b"+OK" => Ok(()),
            other => Err(self.unexpected("SET", other)),
        }
    }

    /// GETs `key` into `buf`; `false` when absent. A value longer than `max_len` is refused
    /// before anything is allocated for it.
    pub async fn get(&mut self, key: &[u8], buf: &mut Vec<u8>, max_len: usize) -> io::Result<bool> {
        self.send_key_command(b"GET", key).await?;
        let line = self.reply_line().await?;
        let Some(len) = line.strip_prefix(b"$") else {
            return Err(self.unexpected("GET", &line));
        };
        if len == b"-1" {
            return Ok(false);
        }
        let len = parse_len(len).ok_or_else(|| self.unexpected("GET", &line))?;
        if len > max_len {
            return Err(io::Error::other(format!(
                "redis {}: GET answered {len} bytes, more than the {max_len} this bench stored",
                self.addr
            )));
        }
        buf.resize(len + 2, 0);
        self.stream.read_exact(buf).await?;
        if !buf.ends_with(b"\r\n") {
            return Err(io::Error::other(format!(
                "redis {}: GET's {len}-byte value is not followed by CRLF",
                self.addr
            )));
        }
        buf.truncate(len);
        Ok(true)
    }

    pub async fn del(&mut self, key: &[u8]) -> io::Result<()> {
        self.send_key_command(b"DEL", key).await?;
        let line = self.reply_line().await?;
        match line.strip_prefix(b":").and_then(parse_len) {
            Some(_) => Ok(()),
            None => Err(self.unexpected("DEL", &line)),
        }
    }

    async fn send_key_command(&mut self, name: &[u8], key: &[u8]) -> io::Result<()> {
        let mut out = command_head(2, name);
        push_bulk_head(&mut out, key.len());
        out.extend_from_slice(key);
        out.extend_from_slice(b"\r\n");
        self.stream.get_mut().write_all(&out).await
    }

    /// One reply line without its CRLF.
    async fn reply_line(&mut self) -> io::Result<Vec<u8>> {
        self.line.clear();
        let n = (&mut self.stream)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut self.line)
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("redis {}: connection closed", self.addr),
            ));
        }
        if !self.line.ends_with(b"\r\n") {
            return Err(io::Error::other(format!(
                "redis {}: a reply line longer than {MAX_LINE} bytes or without CRLF",
                self.addr
            )));
        }
        self.line.truncate(self.line.len() - 2);
        Ok(self.line.clone())
    }

    fn unexpected(&self, command: &str, line: &[u8]) -> io::Error {
        io::Error::other(format!(
            "redis {}: {command} answered {:?}",
            self.addr,
            String::from_utf8_lossy(line)
        ))
    }
}

/// Writes `parts` in order with vectored writes: one system call for a whole SET in the
/// common case, and the value is not copied into a command buffer first.
async fn write_parts(stream: &mut TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut rest = &mut slices[..];
    IoSlice::advance_slices(&mut rest, 0);
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

fn command_head(args: usize, name: &[u8]) -> Vec<u8> {
    let mut out = format!("*{args}\r\n").into_bytes();
    push_bulk_head(&mut out, name.len());
    out.extend_from_slice(name);
    out.extend_from_slice(b"\r\n");
    out
}

fn push_bulk_head(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(format!("${len}\r\n").as_bytes());
}

/// A non-negative decimal of at most 18 digits (no sign, no spaces).
fn parse_len(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    #[test]
    fn lengths_parse_strictly() {
        assert_eq!(parse_len(b"0"), Some(0));
        assert_eq!(parse_len(b"1048576"), Some(1 << 20));
        for bad in [&b""[..], b"-1", b"+5", b" 5", b"5x", b"9999999999999999999"] {
            assert_eq!(parse_len(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn commands_are_resp_arrays_of_bulk_strings() {
        let mut out = command_head(2, b"GET");
        push_bulk_head(&mut out, 3);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$3\r\n");
    }

    /// A scripted peer (a test double for redis-server): answers each command with the next
    /// canned reply, so the reply parsing and its refusals are checked without Redis.
    async fn scripted(replies: &'static [&'static [u8]]) -> RespConn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut sink = [0u8; 4096];
            for reply in replies {
                let _ = s.read(&mut sink).await;
                s.write_all(reply).await.unwrap();
            }
        });
        RespConn::connect(&addr).await.unwrap()
    }

    #[tokio::test]
    async fn replies_are_read_and_bad_ones_named() {
        let mut c = scripted(&[b"+OK\r\n", b"$3\r\nabc\r\n", b"$-1\r\n", b":1\r\n"]).await;
        c.set(b"k", b"abc").await.unwrap();
        let mut buf = Vec::new();
        assert!(c.get(b"k", &mut buf, 3).await.unwrap());
        assert_eq!(buf, b"abc");
        assert!(!c.get(b"k", &mut buf, 3).await.unwrap());
        c.del(b"k").await.unwrap();

        let mut c = scripted(&[b"$5000000000\r\n"]).await;
        let err = c.get(b"k", &mut buf, 1 << 20).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("5000000000 bytes, more than the 1048576"),
            "{err}"
        );
        let mut c = scripted(&[b"-OOM command not allowed\r\n"]).await;
        let err = c.set(b"k", b"v").await.unwrap_err();
        assert!(err.to_string().contains("SET answered \"-OOM"), "{err}");
    }
}
