//! The client against a scripted server (a test double built on memkv-proto's server
//! handshake) that answers out of order or sends frames that fail verification.

mod common;

use common::scripted::{accept_session, read_raw, read_request};

use std::net::SocketAddr;
use std::time::Duration;

use memkv_client::{Client, ClientConfig, Error};
use memkv_proto::{HEADER_LEN, Header, Limits, ProtoError, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn client_for(addr: SocketAddr) -> Client {
    let mut config = ClientConfig::new([addr.to_string()], common::key());
    // The scripted server speaks TCP frames only (no LocalAttach).
    config.transport = memkv_client::Transport::Tcp;
    config.num_connections = 1;
    config.timeout = Duration::from_secs(5);
    Client::connect(config).await.unwrap()
}

#[tokio::test]
async fn responses_complete_their_own_requests_in_any_order() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        let mut requests = Vec::new();
        for _ in 0..3 {
            requests.push(read_request(&mut s, &mut session).await);
        }
        // Answer newest first; each value names its key.
        for (h, key) in requests.into_iter().rev() {
            let mut value = b"value of ".to_vec();
            value.extend_from_slice(&key);
            let frame = session
                .sealer
                .frame(Header::response(&h, Status::Ok), &[], &value);
            s.write_all(&frame).await.unwrap();
        }
        s
    });
    let c = client_for(addr).await;
    let (a, b, d) = tokio::join!(c.get(b"a"), c.get(b"b"), c.get(b"d"));
    assert_eq!(a.unwrap().unwrap(), b"value of a");
    assert_eq!(b.unwrap().unwrap(), b"value of b");
    assert_eq!(d.unwrap().unwrap(), b"value of d");
    drop(server.await.unwrap());
}

/// Starts a server that reads `requests` requests, then answers the first with `tamper`
/// applied to a valid frame.
async fn tampering_server(requests: usize, tamper: fn(&mut Vec<u8>)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        let (h, _) = read_request(&mut s, &mut session).await;
        for _ in 1..requests {
            read_request(&mut s, &mut session).await;
        }
        let mut frame = session
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], b"a value");
        tamper(&mut frame);
        s.write_all(&frame).await.unwrap();
        // Keep the socket open: the client must close it on its own.
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
    });
    addr
}

#[tokio::test]
async fn a_frame_with_a_bad_mac_fails_the_request_and_closes_the_connection() {
    let addr = tampering_server(2, |f| f[HEADER_LEN - 1] ^= 1).await;
    let c = client_for(addr).await;
    // Two requests in flight on the one connection: the bad frame fails both.
    let (first, second) = tokio::join!(c.get(b"k"), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.exists(b"other").await
    });
    for err in [first.unwrap_err(), second.unwrap_err()] {
        assert!(
            matches!(
                err,
                Error::Protocol {
                    source: ProtoError::BadMac,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // The connection is gone; the scripted server accepts no second one, so the next call
    // fails to reconnect instead of reusing the poisoned stream.
    let next = c.with_timeout(Duration::from_millis(300)).get(b"k").await;
    assert!(next.is_err());
}

#[tokio::test]
async fn a_value_that_does_not_match_its_checksum_is_refused() {
    // Flip a payload byte: the MAC (which covers the checksum, not the payload) still
    // verifies, so only the checksum catches it.
    let addr = tampering_server(1, |f| *f.last_mut().unwrap() ^= 0x20).await;
    let c = client_for(addr).await;
    let err = c.get(b"k").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Protocol {
                source: ProtoError::ChecksumMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_value_read_straight_into_caller_memory_is_still_checked() {
    let addr = tampering_server(1, |f| *f.last_mut().unwrap() ^= 0x20).await;
    let c = client_for(addr).await;
    let (result, dest) = c.get_into_destination(b"k", vec![0u8; 64]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Protocol {
                source: ProtoError::ChecksumMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
    // Closing the connection fails the request; its destination is not handed back.
    assert!(dest.is_none());
}

#[tokio::test]
async fn a_value_too_large_for_a_batch_answer_is_fetched_on_its_own() {
    use memkv_proto::{Opcode, batch, checksum};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        // The batch: keys a, big, c. `big` did not fit in the answer.
        let (raw, h, body) = read_raw(&mut s, &Limits::DEFAULT).await;
        session.opener.verify(&raw, &[], &body, true).unwrap();
        assert_eq!(h.opcode, Opcode::BatchGet);
        let keys = batch::decode_keys(&body, &Limits::DEFAULT).unwrap();
        assert_eq!(keys, vec![&b"a"[..], b"big", b"c"]);
        let items = [
            batch::GetItem {
                status: Status::Ok,
                value: b"A",
                checksum: checksum::of(b"A"),
            },
            batch::GetItem {
                status: Status::TooLarge,
                value: b"",
                checksum: checksum::of(b""),
            },
            batch::GetItem {
                status: Status::NotFound,
                value: b"",
                checksum: checksum::of(b""),
            },
        ];
        let answer = batch::encode_get_response(&items);
        let frame = session
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], &answer);
        s.write_all(&frame).await.unwrap();
        // Then the single get of `big`.
        let (h, key) = read_request(&mut s, &mut session).await;
        assert_eq!((h.opcode, key.as_slice()), (Opcode::TcpGet, &b"big"[..]));
        let frame = session
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], b"BIG VALUE");
        s.write_all(&frame).await.unwrap();
        s
    });
    let c = client_for(addr).await;
    let got = c.get_batch(&[&b"a"[..], b"big", b"c"]).await;
    assert_eq!(got[0].as_ref().unwrap().as_deref(), Some(&b"A"[..]));
    assert_eq!(got[1].as_ref().unwrap().as_deref(), Some(&b"BIG VALUE"[..]));
    assert_eq!(got[2].as_ref().unwrap(), &None);
    drop(server.await.unwrap());
}

/// A batch answer whose value fails its checksum fails that item alone, for `get_batch` and for
/// `get_batch_into` (which checks each value while copying it into the caller's buffer).
#[tokio::test]
async fn a_batch_value_failing_its_checksum_fails_that_item_alone() {
    use memkv_proto::{Opcode, batch, checksum};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let good = vec![3u8; 4096];
    let bad = vec![5u8; 4096];
    let (good2, bad2) = (good.clone(), bad.clone());
    let server = tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        for _ in 0..2 {
            let (raw, h, body) = read_raw(&mut s, &Limits::DEFAULT).await;
            session.opener.verify(&raw, &[], &body, true).unwrap();
            assert_eq!(h.opcode, Opcode::BatchGet);
            let items = [
                batch::GetItem {
                    status: Status::Ok,
                    value: &good2,
                    checksum: checksum::of(&good2),
                },
                batch::GetItem {
                    status: Status::Ok,
                    value: &bad2,
                    checksum: checksum::of(&bad2) ^ 1,
                },
            ];
            let answer = batch::encode_get_response(&items);
            let frame = session
                .sealer
                .frame(Header::response(&h, Status::Ok), &[], &answer);
            s.write_all(&frame).await.unwrap();
        }
        s
    });
    let c = client_for(addr).await;
    let keys = [&b"good"[..], b"bad"];
    let got = c.get_batch(&keys).await;
    assert_eq!(got[0].as_ref().unwrap().as_deref(), Some(&good[..]));
    assert!(
        matches!(&got[1], Err(Error::Protocol { .. })),
        "{:?}",
        got[1]
    );
    let mut bufs = vec![vec![0u8; 8192], vec![0u8; 8192]];
    let got = c.get_batch_into(&keys, &mut bufs).await;
    assert_eq!(got[0].as_ref().unwrap(), &Some(4096));
    assert_eq!(&bufs[0][..4096], &good[..]);
    let err = got[1].as_ref().unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("checksum"), "{err}");
    drop(server.await.unwrap());
}

/// A fatal refusal (docs/protocol.md, "Refusals") reaches the caller of the refused request as
/// the server's status and message; the close that follows fails the other outstanding
/// request, and the next call opens a fresh connection.
#[tokio::test]
async fn a_fatal_refusal_fails_its_request_with_the_servers_message_then_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        let (first, _) = read_request(&mut s, &mut session).await;
        read_request(&mut s, &mut session).await;
        let refused = ProtoError::BadSequence {
            expected: 1,
            got: 1,
        };
        let refusal = session.sealer.refusal(&first.to_bytes(), &refused);
        s.write_all(&refusal).await.unwrap();
        drop(s);
        // A second connection answers normally.
        let (mut s, mut session) = accept_session(&listener).await;
        let (h, _) = read_request(&mut s, &mut session).await;
        let frame = session
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], b"fresh");
        s.write_all(&frame).await.unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
    });
    let c = client_for(addr).await;
    let (first, second) = tokio::join!(c.get(b"k"), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.exists(b"other").await
    });
    match first.unwrap_err() {
        Error::Unauthorized { message, .. } => {
            assert!(message.contains("frame sequence 1"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(second.unwrap_err(), Error::Disconnected { .. }),
        "the close fails the other request"
    );
    assert_eq!(c.get(b"k").await.unwrap().unwrap(), b"fresh");
}
