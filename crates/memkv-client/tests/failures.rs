//! Failure handling: wrong key, deadlines, dead and returning servers.

mod common;

use std::time::{Duration, Instant};

use common::{KEY_HEX, OTHER_KEY_HEX, client_config, start};
use memkv_client::{AuthKey, Client, ClientConfig, Error};

#[tokio::test]
async fn a_wrong_key_is_unauthorized_and_names_no_key() {
    let server = start("").await;
    let mut config = client_config(&[&server]);
    config.auth_key = AuthKey::from_hex(OTHER_KEY_HEX).unwrap();
    let c = Client::connect(config).await.unwrap();
    let err = c.put(b"k", b"v").await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&server.data_addr().to_string()), "{text}");
    assert!(
        !text.contains(OTHER_KEY_HEX) && !text.contains(KEY_HEX),
        "{text}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn strict_rdma_without_rdma_is_refused_clearly() {
    let mut config = ClientConfig::new(["127.0.0.1:1"], common::key());
    config.transport = memkv_client::Transport::Rdma;
    // Strict RDMA on a host (or build) without a usable RDMA rail fails at connect, saying so.
    let err = Client::connect(config).await.unwrap_err().to_string();
    assert!(err.contains("RDMA"), "{err}");
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_backs_off() {
    // Bind then drop a listener to find a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::connect(ClientConfig::new(
        [format!("127.0.0.1:{port}")],
        common::key(),
    ))
    .await
    .unwrap();
    let err = c.get(b"k").await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    // The slot backs off: the next call answers from memory, with the same error kind.
    let err = c.get(b"k").await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_within_the_deadline() {
    let (addr, _, hold) = common::scripted::silent_server().await;
    let mut config = ClientConfig::new([addr.clone()], common::key());
    config.timeout = Duration::from_millis(300);
    let c = Client::connect(config).await.unwrap();
    let started = Instant::now();
    let err = c.put(b"k", b"v").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    match err {
        Error::Timeout { server, op, after } => {
            assert_eq!((server.as_str(), op), (addr.as_str(), "put"));
            assert_eq!(after, Duration::from_millis(300));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // A per-call deadline overrides the configured one (a new client: this one's next calls
    // fail at once, the server having left its dial unanswered).
    let c = Client::connect(ClientConfig::new([addr.clone()], common::key()))
        .await
        .unwrap();
    let started = Instant::now();
    let short = c.with_timeout(Duration::from_millis(50));
    assert!(matches!(
        short.exists(b"k").await,
        Err(Error::Timeout { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(1));
    hold.abort();
}

/// Tries `op` until it succeeds or `within` passes.
async fn eventually<F, Fut, T>(within: Duration, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = memkv_client::Result<T>>,
{
    let until = Instant::now() + within;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > until => panic!("still failing after {within:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test]
async fn a_dead_server_fails_only_its_keys_and_is_reconnected_when_it_returns() {
    let a = start("").await;
    let b = common::start_restartable("").await;
    let b_addr = b.data_addr();
    let mut config = client_config(&[&a, &b]);
    config.timeout = Duration::from_millis(1000);
    let c = Client::connect(config).await.unwrap();
    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("r{i}").into_bytes()).collect();
    for k in &keys {
        c.put(k, k).await.unwrap();
    }
    let on_b: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| c.owner(k) == b_addr.to_string())
        .collect();
    let on_a: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| c.owner(k) != b_addr.to_string())
        .collect();
    assert!(!on_a.is_empty() && !on_b.is_empty());

    b.shutdown().await.unwrap();
    for k in &on_b {
        let started = Instant::now();
        let err = c.get(k).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(1500), "{err}");
        assert!(
            matches!(
                err,
                Error::Unreachable { .. } | Error::Disconnected { .. } | Error::Timeout { .. }
            ),
            "{err:?}"
        );
        assert_eq!(err.server(), Some(b_addr.to_string().as_str()));
    }
    for k in &on_a {
        assert_eq!(c.get(k).await.unwrap().as_ref(), Some(*k));
    }
    // Batches: the dead server's items fail, the others succeed.
    let batch = c.get_batch(&keys).await;
    for (k, r) in keys.iter().zip(&batch) {
        assert_eq!(r.is_ok(), c.owner(k) != b_addr.to_string(), "{r:?}");
    }

    // Same port again (memory mode: the values are gone, the server is back).
    let b = common::start_again(&b_addr.to_string(), "").await;
    let k = on_b[0];
    eventually(Duration::from_secs(10), || c.put(k, b"back")).await;
    assert_eq!(c.get(k).await.unwrap().as_deref(), Some(&b"back"[..]));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
