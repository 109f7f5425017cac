//! One file descriptor over a Unix stream socket (SCM_RIGHTS), with a short message.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Longest message sent with a descriptor (or instead of one).
pub const MAX_MESSAGE: usize = 512;

/// Sends `message` and, when given, `fd` with it, in one `sendmsg`. Returns the bytes sent
/// (less than `message.len()` only on a full socket buffer, which a fresh socket never has).
pub fn send(socket: impl AsFd, message: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other(
                "no room for the descriptor in the control buffer",
            ));
        }
    }
    let sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(message)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(sent)
}

/// Receives one message (at most [`MAX_MESSAGE`] bytes) and the descriptor sent with it, if
/// any. Extra descriptors a hostile peer might send are closed, not kept.
pub fn receive(socket: impl AsFd) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut message = vec![0u8; MAX_MESSAGE];
    let received = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut message)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    message.truncate(received.bytes);
    let mut fd = None;
    for part in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = part {
            for received_fd in fds {
                fd.get_or_insert(received_fd);
            }
        }
    }
    Ok((message, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_descriptor_travels_with_its_message() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut file = crate::arena_file::create("memkv-test", 4096, None).unwrap();
        file.write_all(b"shared bytes").unwrap();
        assert_eq!(send(&a, b"ok", Some(file.as_fd())).unwrap(), 2);
        let (message, fd) = receive(&b).unwrap();
        assert_eq!(message, b"ok");
        let mut received = std::fs::File::from(fd.expect("a descriptor"));
        received.rewind().unwrap();
        let mut text = [0u8; 12];
        received.read_exact(&mut text).unwrap();
        assert_eq!(&text, b"shared bytes");
    }

    #[test]
    fn a_message_may_come_alone() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, b"refused: no such token", None).unwrap();
        let (message, fd) = receive(&b).unwrap();
        assert_eq!(message, b"refused: no such token");
        assert!(fd.is_none());
    }
}
