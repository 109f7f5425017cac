//! The client's retries and deadlines against scripted servers (a connection reset under a
//! pooled request, a server that accepts but never answers, one that cannot be reached).

mod common;

use common::scripted::{accept_session, read_request, silent_server};

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use memkv_client::{Client, ClientConfig};
use memkv_proto::{HEADER_LEN, Header, Status};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

fn tcp_config(addr: &str) -> ClientConfig {
    let mut config = ClientConfig::new([addr.to_string()], common::key());
    config.transport = memkv_client::Transport::Tcp;
    config.num_connections = 1;
    config.timeout = Duration::from_secs(5);
    config
}

/// A scripted server on its own thread (so it keeps running while the test's single-threaded
/// runtime is blocked): it answers one request on a first connection, then, when told, resets
/// that connection (RST) and reports back; on a second connection it answers every request
/// with `Ok` and the value "hello".
fn resetting_server() -> (SocketAddr, mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let (mut s, mut session) = accept_session(&listener).await;
            let (h, _) = read_request(&mut s, &mut session).await;
            let frame = session
                .sealer
                .frame(Header::response(&h, Status::NotFound), &[], &[]);
            s.write_all(&frame).await.unwrap();
            tokio::task::spawn_blocking(move || go_rx.recv().unwrap())
                .await
                .unwrap();
            #[allow(deprecated)]
            s.set_linger(Some(Duration::ZERO)).unwrap();
            drop(s);
            done_tx.send(()).unwrap();
            let (mut s, mut session) = accept_session(&listener).await;
            loop {
                let mut raw = [0u8; HEADER_LEN];
                if s.peek(&mut raw).await.unwrap_or(0) == 0 {
                    return; // the client went away
                }
                let (h, _) = read_request(&mut s, &mut session).await;
                let frame = session
                    .sealer
                    .frame(Header::response(&h, Status::Ok), &[], b"hello");
                if s.write_all(&frame).await.is_err() {
                    return;
                }
            }
        });
    });
    (addr_rx.recv().unwrap(), go_tx, done_rx)
}

/// A pooled connection whose server reset it, before the reader task noticed: the request's
/// write fails (not sent) and the client retries it once on a fresh connection, with the same
/// destination (it used to go with an empty buffer, and the answer's missing destination
/// panicked the caller).
#[tokio::test]
async fn a_direct_get_retried_after_a_reset_connection_keeps_its_destination() {
    let (addr, go, done) = resetting_server();
    let c = Client::connect(tcp_config(&addr.to_string()))
        .await
        .unwrap();
    assert!(!c.exists(b"warm-up").await.unwrap());
    // Reset the connection and wait, blocking this runtime's only thread so the connection's
    // reader task cannot see the reset first.
    go.send(()).unwrap();
    done.recv().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let outcome = tokio::spawn(async move {
        let (result, dest) = c.get_into_destination(b"k", vec![0u8; 64]).await;
        (result.map_err(|e| e.to_string()), dest)
    })
    .await;
    let (result, dest) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("get_into_destination panicked: {e}"),
    };
    assert_eq!(result.unwrap(), Some(5));
    assert_eq!(&dest.expect("the destination comes back")[..5], b"hello");
}

/// `get_into_destination` gives its destination back when the request was never sent: a
/// server that cannot be reached never had it.
#[tokio::test]
async fn a_direct_get_to_an_unreachable_server_gives_the_destination_back() {
    // Bind then drop: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = Client::connect(tcp_config(&addr.to_string()))
        .await
        .unwrap();
    let (result, dest) = c.get_into_destination(b"k", vec![7u8; 64]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, memkv_client::Error::Unreachable { .. }),
        "{err:?}"
    );
    assert!(
        dest.is_some(),
        "the destination was never sent ({err}), yet it is not given back"
    );
}

/// Under `transport: auto` (the default) a server on this host is first asked for its arena
/// (LocalAttach). A same-host server that accepts connections but never answers (hung,
/// stopped) fails the operation within one deadline, not one for the attach and a second for
/// TCP.
#[tokio::test]
async fn a_hung_same_host_server_fails_the_operation_within_its_deadline() {
    let (addr, _, hold) = silent_server().await;
    let deadline = Duration::from_millis(500);
    let mut config = ClientConfig::new([addr], common::key());
    config.timeout = deadline;
    for op in ["get", "put"] {
        // A client each: after one unanswered dial a client fails its next calls at once.
        let c = Client::connect(config.clone()).await.unwrap();
        let started = std::time::Instant::now();
        let err = match op {
            "get" => c.get(b"k").await.map(drop).unwrap_err(),
            _ => c.put(b"k", b"v").await.unwrap_err(),
        };
        let took = started.elapsed();
        assert!(
            matches!(err, memkv_client::Error::Timeout { .. }),
            "{err:?}"
        );
        assert!(
            took < deadline + Duration::from_millis(300),
            "{op}: {err} (deadline {deadline:?}), yet the caller waited {took:?}"
        );
        // Past the 1 s the failed attach is remembered for.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    hold.abort();
}

/// The pool backs off after a failed connect, so a dead server costs its callers one fast
/// error instead of a connect attempt per request. A connect whose handshake never finishes
/// (a hung server whose kernel still accepts), cut by the caller's deadline, counts as failed
/// too.
#[tokio::test]
async fn a_handshake_that_never_finishes_backs_off_like_a_refused_connect() {
    use std::sync::atomic::Ordering;
    let (addr, accepted, hold) = silent_server().await;
    let mut config = tcp_config(&addr);
    config.timeout = Duration::from_millis(200);
    let c = Client::connect(config).await.unwrap();
    let mut took = Vec::new();
    for _ in 0..6 {
        let started = std::time::Instant::now();
        assert!(c.exists(b"k").await.is_err());
        took.push(started.elapsed());
    }
    let connects = accepted.load(Ordering::SeqCst);
    assert!(
        connects <= 3,
        "6 requests within ~1.2 s opened {connects} connections (each took {took:?}); \
         a refused connect would have backed off"
    );
    hold.abort();
}

/// One attach at a time per server: a caller with a short deadline (`with_timeout`) that
/// waits for another caller's (longer) attach keeps to its own deadline.
#[tokio::test]
async fn a_short_deadline_is_kept_while_another_caller_attaches() {
    let (addr, _, hold) = silent_server().await;
    let mut config = ClientConfig::new([addr], common::key());
    config.timeout = Duration::from_secs(3);
    let patient = Client::connect(config).await.unwrap();
    let hurried = patient.with_timeout(Duration::from_millis(200));
    let first = tokio::spawn(async move { patient.get(b"k").await.map(drop) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let err = hurried.get(b"k").await.map(drop).unwrap_err();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(600),
        "a 200 ms get ({err}) returned after {took:?}"
    );
    first.abort();
    hold.abort();
}

/// Caller memory that says when it is dropped.
struct Watched {
    bytes: Vec<u8>,
    dropped: Option<tokio::sync::oneshot::Sender<()>>,
}

impl memkv_client::ReadDestination for Watched {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.dropped.take().map(|tx| tx.send(()));
    }
}

/// A value half read into caller memory when the caller's deadline passes: the reader stops
/// writing into that memory and drops it at once, not when (if ever) the rest of the value
/// arrives. The Python binding hands the memory back to its caller only once it is dropped.
#[tokio::test]
async fn a_direct_get_past_its_deadline_lets_go_of_the_destination_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        let (h, _) = read_request(&mut s, &mut session).await;
        let value = vec![5u8; 1 << 20];
        let frame = session
            .sealer
            .frame(Header::response(&h, Status::Ok), &[], &value);
        s.write_all(&frame[..frame.len() / 2]).await.unwrap();
        // The rest never comes; the connection stays open.
        std::future::pending::<()>().await;
        drop(s);
    });
    let mut config = tcp_config(&addr);
    config.timeout = Duration::from_millis(300);
    let c = Client::connect(config).await.unwrap();
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel();
    let dest = Watched {
        bytes: vec![0; 1 << 20],
        dropped: Some(dropped_tx),
    };
    let (result, back) = c.get_into_destination(b"k", dest).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, memkv_client::Error::Timeout { .. }),
        "{err:?}"
    );
    assert!(
        back.is_none(),
        "the reader held the destination when the deadline passed"
    );
    tokio::time::timeout(Duration::from_secs(2), dropped)
        .await
        .expect("the destination is dropped once its caller stops waiting")
        .unwrap();
    server.abort();
}

/// A server that answers a batch get with `TooLarge` for every item (values that did not fit
/// its answer), then never answers the single gets that fetch them: the batch fails those
/// items within one deadline of its start. The singles were fetched one after another, each
/// with a deadline of its own, so `get_batch_into` waited one deadline per item; and
/// `get_batch` gave its singles a fresh deadline after the batch's.
#[tokio::test]
async fn values_refetched_after_a_batch_answer_keep_to_the_batchs_deadline() {
    use memkv_proto::{Limits, Opcode, batch, checksum};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let keys: Vec<Vec<u8>> = (0..3).map(|i| format!("big{i}").into_bytes()).collect();
    let server = tokio::spawn(async move {
        let (mut s, mut session) = accept_session(&listener).await;
        let mut held = Vec::new();
        loop {
            let (raw, h, body) = common::scripted::read_raw(&mut s, &Limits::DEFAULT).await;
            let key = &body[..usize::from(h.key_len)];
            session
                .opener
                .verify(&raw, key, &body[usize::from(h.key_len)..], true)
                .unwrap();
            if h.opcode != Opcode::BatchGet {
                held.push(h); // a single get: never answered
                continue;
            }
            // Answered after most of the deadline, every value too large for the answer.
            tokio::time::sleep(Duration::from_millis(250)).await;
            let n = batch::decode_keys(&body, &Limits::DEFAULT).unwrap().len();
            let items: Vec<batch::GetItem<'_>> = (0..n)
                .map(|_| batch::GetItem {
                    status: Status::TooLarge,
                    value: b"",
                    checksum: checksum::of(b""),
                })
                .collect();
            let answer = batch::encode_get_response(&items);
            let frame = session
                .sealer
                .frame(Header::response(&h, Status::Ok), &[], &answer);
            s.write_all(&frame).await.unwrap();
        }
    });
    let deadline = Duration::from_millis(400);
    let mut config = tcp_config(&addr);
    config.timeout = deadline;
    let c = Client::connect(config).await.unwrap();
    let started = std::time::Instant::now();
    let got = c.get_batch(&keys).await;
    let took = started.elapsed();
    for r in &got {
        assert!(
            matches!(r, Err(memkv_client::Error::Timeout { after, .. }) if *after == deadline),
            "{r:?}"
        );
    }
    assert!(
        took < deadline + Duration::from_millis(200),
        "get_batch took {took:?} (deadline {deadline:?})"
    );
    let mut bufs = vec![vec![0u8; 16]; keys.len()];
    let started = std::time::Instant::now();
    let got = c.get_batch_into(&keys, &mut bufs).await;
    let took = started.elapsed();
    // A server that left requests unanswered fails the next calls at once (`pool/probe.rs`).
    for r in &got {
        assert!(
            matches!(
                r,
                Err(memkv_client::Error::Timeout { .. } | memkv_client::Error::Unreachable { .. })
            ),
            "{r:?}"
        );
    }
    assert!(
        took < deadline + Duration::from_millis(200),
        "get_batch_into took {took:?} (deadline {deadline:?})"
    );
    server.abort();
}
