//! A batch across several servers while one of them misbehaves (refuses connections, hangs,
//! restarts), as an inference engine sees it: the healthy servers' items come back, in the
//! caller's order, within one deadline.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{client_config, start};
use memkv_client::{BACKOFF_MAX, Client, Error, Transport};
use memkv_server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay in front of a real server that can be frozen: frozen, it accepts nothing and
/// moves no byte either way, but keeps its connections open (a SIGSTOPped server: its kernel
/// still completes connects and acknowledges bytes; nothing answers).
struct Freezer {
    addr: String,
    frozen: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Freezer {
    async fn new(upstream: std::net::SocketAddr) -> Freezer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&frozen);
        let task = tokio::spawn(async move {
            loop {
                while flag.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let Ok((down, _)) = listener.accept().await else {
                    return;
                };
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(relay(dr, uw, Arc::clone(&flag)));
                tokio::spawn(relay(ur, dw, Arc::clone(&flag)));
            }
        });
        Freezer { addr, frozen, task }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn keys(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{tag}/{i}").into_bytes()).collect()
}

/// Three healthy servers and one behind a [`Freezer`].
async fn fleet(transport: Transport, deadline: Duration) -> (Vec<Server>, Freezer, Client) {
    let servers = vec![
        start("").await,
        start("").await,
        start("").await,
        start("").await,
    ];
    let freezer = Freezer::new(servers[3].data_addr()).await;
    let mut config = client_config(&servers.iter().collect::<Vec<_>>());
    config.servers[3] = freezer.addr.clone();
    config.transport = transport;
    config.timeout = deadline;
    let c = Client::connect(config).await.unwrap();
    (servers, freezer, c)
}

/// A batch across four servers, one of them hung after the client had used it: every other
/// server's items come back (in the caller's order, with their values) and the hung server's
/// fail, within one deadline, for every batch operation; once a fresh connection's ping has
/// gone unanswered too, at once; once the server answers again, a batch uses it within
/// moments.
#[tokio::test]
async fn a_hung_server_fails_only_its_items_within_one_deadline() {
    let deadline = Duration::from_millis(500);
    let (servers, freezer, c) = fleet(Transport::Tcp, deadline).await;
    let ks = keys(400, "hung");
    let items: Vec<(Vec<u8>, Vec<u8>)> = ks
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                k.clone(),
                common::pattern(if i % 10 == 0 { 96 << 10 } else { 700 }, i as u64),
            )
        })
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    freezer.freeze(true);
    let hung = |k: &[u8]| c.owner(k) == freezer.addr;
    assert!(ks.iter().any(|k| hung(k)) && !ks.iter().all(|k| hung(k)));
    let within = |what: &str, took: Duration| {
        assert!(
            took < deadline + Duration::from_millis(400),
            "{what} took {took:?} with a deadline of {deadline:?}"
        );
    };

    let t = Instant::now();
    let r = c.put_batch(&items).await;
    within("put_batch", t.elapsed());
    for ((k, _), r) in items.iter().zip(&r) {
        assert_eq!(r.is_err(), hung(k), "{r:?}");
    }
    let t = Instant::now();
    let r = c.get_batch(&ks).await;
    within("get_batch", t.elapsed());
    for ((k, v), r) in items.iter().zip(&r) {
        match r {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "{k:?}"),
            Err(e) => {
                assert!(hung(k), "{k:?}: {e}");
                assert!(
                    matches!(e, Error::Timeout { .. } | Error::Unreachable { .. }),
                    "{e:?}"
                );
                assert_eq!(e.server(), Some(freezer.addr.as_str()));
            }
        }
    }
    let t = Instant::now();
    let r = c.exists_batch(&ks).await;
    within("exists_batch", t.elapsed());
    for (k, r) in ks.iter().zip(&r) {
        assert_eq!(r.as_ref().ok(), (!hung(k)).then_some(&true), "{r:?}");
    }
    let dests: Vec<Vec<u8>> = ks.iter().map(|_| vec![0u8; 128 << 10]).collect();
    let t = Instant::now();
    let (r, back) = c.get_batch_into_destinations(&ks, dests).await;
    within("get_batch_into_destinations", t.elapsed());
    for (((k, v), r), d) in items.iter().zip(&r).zip(&back) {
        match r {
            Ok(len) => assert_eq!(&d.as_ref().unwrap()[..len.unwrap()], &v[..], "{k:?}"),
            Err(e) => assert!(hung(k), "{k:?}: {e}"),
        }
    }

    // The silence confirmed (a fresh connection's ping unanswered for a second): the hung
    // server's items fail at once.
    let t = Instant::now();
    loop {
        let started = Instant::now();
        let r = c.get_batch(&ks).await;
        let fast = started.elapsed() < Duration::from_millis(100);
        let unreachable = ks
            .iter()
            .zip(&r)
            .all(|(k, r)| !hung(k) || matches!(r, Err(Error::Unreachable { .. })));
        if fast && unreachable {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the hung server's items still wait their deadline: {:?}",
            started.elapsed()
        );
    }

    freezer.freeze(false);
    // The background probe's dial, waiting on the hung server, is answered now.
    let t = Instant::now();
    while !c
        .get_batch(&ks)
        .await
        .iter()
        .all(|r| matches!(r, Ok(Some(_))))
    {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the server answers again, but the client does not use it"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(freezer);
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

/// Under `auto` a batch moves its same-host servers' large values through shared memory and
/// the rest over TCP. Those steps ran one after the other over the whole batch: with one
/// same-host server hung, its large values waited out the deadline, then its small ones were
/// sent over TCP and waited out a second deadline, and every healthy server's small values
/// waited for the first step to end. Each server's items now take the two steps on their own,
/// the second within what is left of the deadline.
#[tokio::test]
async fn a_hung_same_host_server_costs_a_batch_of_mixed_sizes_one_deadline_not_two() {
    let deadline = Duration::from_millis(600);
    let (servers, freezer, c) = fleet(Transport::Auto, deadline).await;
    let ks = keys(100, "mixed");
    let items: Vec<(Vec<u8>, Vec<u8>)> = ks
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let len = if i % 2 == 0 { 256 << 10 } else { 1 << 10 };
            (k.clone(), common::pattern(len, i as u64))
        })
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    // Each server's items go their own way; the results still come in the caller's order,
    // an invalid key's among them.
    let mut named: Vec<&[u8]> = ks.iter().map(Vec::as_slice).collect();
    named.insert(37, b"");
    let got = c.get_batch(&named).await;
    assert!(
        matches!(got[37], Err(Error::TooLarge { len: 0, .. })),
        "{:?}",
        got[37]
    );
    let values = items.iter().map(|(_, v)| Some(v));
    for (want, got) in values.zip(got.iter().take(37).chain(got.iter().skip(38))) {
        assert_eq!(got.as_ref().unwrap().as_ref(), want);
    }
    common::until_attached(&c, &freezer.addr).await;
    assert!(
        c.shared_memory_servers().contains(&freezer.addr),
        "the test needs the hung server attached: {:?}",
        c.shared_memory_servers()
    );
    freezer.freeze(true);
    let hung = |k: &[u8]| c.owner(k) == freezer.addr;
    let t = Instant::now();
    let r = c.put_batch(&items).await;
    let took = t.elapsed();
    for ((k, _), r) in items.iter().zip(&r) {
        assert_eq!(r.is_err(), hung(k), "{r:?}");
        if let Err(e) = r {
            assert!(
                matches!(e, Error::Timeout { after, .. } if *after == deadline),
                "{e:?}"
            );
        }
    }
    assert!(
        took < deadline + Duration::from_millis(300),
        "put_batch took {took:?} with a deadline of {deadline:?}"
    );
    let dests: Vec<Vec<u8>> = (0..ks.len())
        .map(|i| vec![0u8; if i % 2 == 0 { 1 << 20 } else { 4 << 10 }])
        .collect();
    let t = Instant::now();
    let (r, back) = c.get_batch_into_destinations(&ks, dests).await;
    let took = t.elapsed();
    for (((k, v), r), d) in items.iter().zip(&r).zip(&back) {
        match r {
            Ok(len) => assert_eq!(&d.as_ref().unwrap()[..len.unwrap()], &v[..], "{k:?}"),
            Err(e) => assert!(hung(k), "{k:?}: {e}"),
        }
    }
    assert!(
        took < deadline + Duration::from_millis(300),
        "get_batch_into_destinations took {took:?} with a deadline of {deadline:?}"
    );
    let mut bufs: Vec<Vec<u8>> = (0..ks.len())
        .map(|i| vec![0u8; if i % 2 == 0 { 1 << 20 } else { 4 << 10 }])
        .collect();
    let t = Instant::now();
    let r = c.get_batch_into(&ks, &mut bufs).await;
    let took = t.elapsed();
    for ((k, _), r) in items.iter().zip(&r) {
        assert_eq!(r.is_err(), hung(k), "{r:?}");
    }
    assert!(
        took < deadline + Duration::from_millis(300),
        "get_batch_into took {took:?} with a deadline of {deadline:?}"
    );
    freezer.freeze(false);
    drop(freezer);
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

/// A server that is down fails its keys at once (the others' come back), and after a long
/// outage, once its backoff has reached the ceiling, it is used again within that ceiling of
/// being back, by the same client.
#[tokio::test]
async fn a_server_down_fails_its_keys_at_once_and_is_used_again_soon_after_it_returns() {
    let (a, b) = (start("").await, start("").await);
    let down = common::start_restartable("").await;
    let down_addr = down.data_addr().to_string();
    let mut config = client_config(&[&a, &b, &down]);
    config.transport = Transport::Tcp;
    config.timeout = Duration::from_secs(2);
    let c = Client::connect(config).await.unwrap();
    let ks = keys(300, "down");
    let items: Vec<(Vec<u8>, Vec<u8>)> = ks.iter().map(|k| (k.clone(), k.clone())).collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    down.shutdown().await.unwrap();
    // Past the backoff's ceiling (50 ms doubling to 2 s).
    let outage = Instant::now();
    while outage.elapsed() < BACKOFF_MAX * 2 {
        let t = Instant::now();
        let r = c.get_batch(&ks).await;
        let took = t.elapsed();
        assert!(took < Duration::from_millis(300), "a batch took {took:?}");
        for ((k, v), r) in items.iter().zip(&r) {
            match r {
                Ok(got) => assert_eq!(got.as_ref(), Some(v)),
                Err(e) => {
                    assert_eq!(c.owner(k), down_addr, "{e}");
                    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = common::start_again(&down_addr, "").await;
    let back = Instant::now();
    while c.put_batch(&items).await.iter().any(Result::is_err) {
        assert!(
            back.elapsed() < BACKOFF_MAX + Duration::from_millis(500),
            "the server has been back for {:?}",
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in [a, b, down] {
        s.shutdown().await.unwrap();
    }
}

/// A server that leaves a dial unanswered (a host that died without a reset, a frozen
/// process) costs one caller its deadline; the calls after it fail at once while the client
/// dials in the background, and once the server answers the client uses it again. Every call
/// used to dial again after the back-off and wait out its whole deadline, for as long as the
/// server stayed silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_unanswered_dial_calls_fail_at_once_until_a_background_dial_answers() {
    let server = start("").await;
    let freezer = Freezer::new(server.data_addr()).await;
    freezer.freeze(true);
    let deadline = Duration::from_millis(300);
    let mut config = client_config(&[&server]);
    config.servers = vec![freezer.addr.clone()];
    config.transport = Transport::Tcp;
    config.timeout = deadline;
    let c = Client::connect(config).await.unwrap();

    let started = Instant::now();
    let first = c.get(b"k").await.unwrap_err();
    assert!(matches!(first, Error::Timeout { .. }), "{first:?}");
    assert!(started.elapsed() >= deadline);

    // The pool has four connection slots; none may make a caller wait for a dial now.
    for i in 0..20 {
        let started = Instant::now();
        let err = c.put(format!("k{i}").as_bytes(), b"v").await.unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(err, Error::Unreachable { .. }),
            "call {i}: {err:?}"
        );
        assert!(
            took < Duration::from_millis(100),
            "call {i} waited {took:?} for a server that did not answer: {err}"
        );
    }

    freezer.freeze(false);
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        match c.put(b"back", b"v").await {
            Ok(()) => break,
            Err(e) if Instant::now() < until => {
                assert!(
                    matches!(e, Error::Unreachable { .. } | Error::Timeout { .. }),
                    "{e:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the server answers again, yet the client never used it: {e}"),
        }
    }
    assert_eq!(c.get(b"back").await.unwrap(), Some(b"v".to_vec()));
}
