//! The client's multi-server behaviour against real servers on loopback: where keys are placed,
//! and what a server's pool does when it cannot open more connections.

mod common;

use std::time::{Duration, Instant};

use common::{client_config, start};
use memkv_client::{Client, Transport};

/// A server at `limits.max_connections` refuses a new connection with `Busy` during the
/// handshake. The pool sends each request to its least loaded slot, and a slot that never
/// connected counts as least loaded: when dialling it failed, the request failed with the
/// dial's error although the pool held an open connection to the same server, and again at
/// every back-off step (50 ms doubling to 2 s) for as long as the client ran. A request whose
/// slot cannot connect now goes over another slot's open connection.
#[tokio::test]
async fn a_refused_extra_connection_fails_no_request_while_the_pool_has_an_open_one() {
    let server = start("limits:\n  max_connections: 1\n").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Tcp;
    config.num_connections = 2;
    let c = Client::connect(config).await.unwrap();
    c.put(b"first", b"v")
        .await
        .expect("the first request opens the one connection admitted");
    // Sequential requests for 3 s (past the 2 s backoff ceiling): the server serves every one
    // of them on the open connection when asked there.
    let until = Instant::now() + Duration::from_secs(3);
    let (mut sent, mut failed) = (0, Vec::new());
    while Instant::now() < until {
        let key = format!("k{sent}");
        if let Err(e) = c.put(key.as_bytes(), b"v").await {
            failed.push((sent, e.to_string()));
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        failed.is_empty(),
        "{} of {sent} requests failed although the pool held an open connection to {}; \
         first: {:?}, last: {:?}",
        failed.len(),
        server.data_addr(),
        failed.first(),
        failed.last()
    );
    server.shutdown().await.unwrap();
}

/// A client turned away at `limits.max_connections` gets `Unreachable`, naming the limit (the
/// Python package's `ServerUnavailableError`); it used to get a bare `Server { Busy }`, which an
/// engine could not tell from a failed operation.
#[tokio::test]
async fn a_client_turned_away_at_the_connection_limit_finds_the_server_unreachable() {
    let server = start("limits:\n  max_connections: 1\n").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Tcp;
    config.num_connections = 1;
    let first = Client::connect(config.clone()).await.unwrap();
    first.put(b"k", b"v").await.unwrap();
    let second = Client::connect(config).await.unwrap();
    let err = second.put(b"k", b"v").await.unwrap_err();
    assert!(
        matches!(err, memkv_client::Error::Unreachable { .. })
            && err.to_string().contains("limits.max_connections (1)"),
        "{err:?}"
    );
    server.shutdown().await.unwrap();
}

/// A caller's own short deadline ends a request on a healthy server in a timeout too. That
/// starts a background check of the server, which must leave the server in use: here the
/// check's new connection is turned away (the server is at `limits.max_connections`), which
/// is an answer. A timeout used to fail every call to the server at once until the check got a
/// connection of its own, and at the connection limit it never did.
#[tokio::test]
async fn a_callers_short_deadline_leaves_a_healthy_server_in_use() {
    let server = start("limits:\n  max_connections: 1\n").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Tcp;
    config.num_connections = 1;
    let c = Client::connect(config).await.unwrap();
    let big = common::pattern(8 << 20, 1);
    c.put(b"big", &big).await.unwrap();
    c.put(b"k", b"v").await.unwrap();
    let hurried = c.with_timeout(Duration::from_millis(1));
    assert!(matches!(
        hurried.get(b"big").await,
        Err(memkv_client::Error::Timeout { .. })
    ));
    for i in 0..40 {
        let got = c.get(b"k").await;
        assert!(
            matches!(&got, Ok(Some(v)) if v == b"v"),
            "call {i} after a caller's short deadline: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await.unwrap();
}

/// Placement does not depend on the order the servers are listed in, nor on
/// spaces around entries of `MEMKV_SERVERS` (the Python package's `servers` list goes through
/// that parser): a batch written by one client is read whole by another that lists the same
/// servers differently, and both name the same owner for every key.
#[tokio::test]
async fn the_order_servers_are_listed_in_does_not_move_keys() {
    let servers = [start("").await, start("").await, start("").await];
    let addrs: Vec<String> = servers.iter().map(|s| s.data_addr().to_string()).collect();
    let mut forward = client_config(&servers.iter().collect::<Vec<_>>());
    forward.transport = Transport::Tcp;
    let mut backward = forward.clone();
    backward.servers = memkv_client::config::parse_server_list(
        &format!(" {} ,{},  {}", addrs[2], addrs[0], addrs[1]),
        "test",
    )
    .unwrap();
    let a = Client::connect(forward).await.unwrap();
    let b = Client::connect(backward).await.unwrap();
    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..300u64)
        .map(|i| {
            let len = if i % 60 == 0 { 100 << 10 } else { 100 };
            (format!("order/{i}").into_bytes(), common::pattern(len, i))
        })
        .collect();
    for (k, _) in &items {
        assert_eq!(a.owner(k), b.owner(k));
    }
    for r in a.put_batch(&items).await {
        r.unwrap();
    }
    let keys: Vec<&[u8]> = items.iter().map(|(k, _)| k.as_slice()).collect();
    for ((_, v), got) in items.iter().zip(b.get_batch(&keys).await) {
        assert_eq!(got.unwrap().as_ref(), Some(v));
    }
    for s in servers {
        s.shutdown().await.unwrap();
    }
}
