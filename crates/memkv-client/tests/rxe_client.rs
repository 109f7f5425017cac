//! The client's RDMA transport on real verbs, inside the Soft-RoCE VM (testing/rxe-vm): the
//! server serves its arena on the first rxe device, the client uses the last one as its rail.
//! Outside the VM each test prints why it is skipped and passes.

mod common;

use std::time::{Duration, Instant};

use memkv_client::{Client, Error, Transport};

fn rxe_or_skip(test: &str) -> Option<(String, String)> {
    use std::io::Write;
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
        );
        return None;
    }
    let devices: Vec<String> = std::env::var("MEMKV_RXE_DEVICES")
        .expect("MEMKV_RXE_DEVICES")
        .split(',')
        .map(str::to_owned)
        .collect();
    Some((devices[0].clone(), devices.last().unwrap().clone()))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 11) as u8) ^ seed)
        .collect()
}

async fn rdma_client(
    server: &memkv_server::Server,
    rail: &str,
    transport: Transport,
) -> Result<Client, Error> {
    let mut config = common::client_config(&[server]);
    config.transport = transport;
    config.rdma_devices = vec![rail.to_owned()];
    config.timeout = Duration::from_secs(20);
    Client::connect(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_and_gets_move_over_rdma_bit_exact() {
    let Some((server_dev, rail)) = rxe_or_skip("puts_and_gets_move_over_rdma_bit_exact") else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let client = rdma_client(&server, &rail, Transport::Rdma)
        .await
        .expect("strict RDMA client");
    let tcp = common::client(&[&server]).await;
    for (i, size) in [1usize, 4096, 1 << 20, 16 << 20].into_iter().enumerate() {
        let value = pattern(size, i as u8);
        let key = format!("rdma/{size}");
        client.put(key.as_bytes(), &value).await.expect("RDMA put");
        assert_eq!(client.transport(), "rdma");
        assert!(
            client.get(key.as_bytes()).await.expect("RDMA get").unwrap() == value,
            "{size}: RDMA get differs"
        );
        // A TCP client sees the same bytes, at the same time.
        assert!(
            tcp.get(key.as_bytes()).await.unwrap().unwrap() == value,
            "{size}: TCP get differs"
        );
    }
    assert_eq!(client.get(b"rdma/missing").await.unwrap(), None);
    client.put(b"rdma/empty", b"").await.unwrap();
    assert_eq!(client.get(b"rdma/empty").await.unwrap(), Some(Vec::new()));
    assert_eq!(client.rdma_rails(), vec![rail]);
    assert_eq!(client.rdma_fallback_reason(), None);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_buffers_move_without_copies() {
    let Some((server_dev, rail)) = rxe_or_skip("registered_buffers_move_without_copies") else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let client = rdma_client(&server, &rail, Transport::Rdma).await.unwrap();
    let mut out = client.register_buffer(16 << 20).unwrap();
    let mut inp = client.register_buffer(16 << 20).unwrap();
    for (i, size) in [1usize, 4096, 1 << 20, 16 << 20].into_iter().enumerate() {
        let value = pattern(size, 40 + i as u8);
        out.as_mut_slice()[..size].copy_from_slice(&value);
        let key = format!("registered/{size}");
        client
            .put_from(key.as_bytes(), &out, size)
            .await
            .expect("put_from");
        assert_eq!(
            client
                .get_into_buffer(key.as_bytes(), &mut inp)
                .await
                .unwrap(),
            Some(size)
        );
        assert!(inp.as_slice()[..size] == value[..], "{size}: differs");
        // The unregistered path reads the same bytes.
        assert!(client.get(key.as_bytes()).await.unwrap().unwrap() == value);
    }
    assert_eq!(
        client
            .get_into_buffer(b"registered/none", &mut inp)
            .await
            .unwrap(),
        None
    );
    let mut small = client.register_buffer(16).unwrap();
    let err = client
        .get_into_buffer(b"registered/4096", &mut small)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit of 16"), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_rdma_sends_auto_to_tcp_and_strict_to_an_error() {
    let Some((server_dev, rail)) =
        rxe_or_skip("a_server_refusing_rdma_sends_auto_to_tcp_and_strict_to_an_error")
    else {
        return;
    };
    // rxe's P_Key table has one entry: index 1 keeps the server on TCP.
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n  pkey_index: 1\n")).await;
    let auto = rdma_client(&server, &rail, Transport::Auto).await.unwrap();
    auto.put(b"k", b"over tcp after all")
        .await
        .expect("auto falls back");
    assert_eq!(auto.transport(), "tcp");
    let reason = auto.rdma_fallback_reason().unwrap();
    assert!(reason.contains("index 1"), "{reason}");
    assert_eq!(
        auto.get(b"k").await.unwrap().unwrap(),
        b"over tcp after all"
    );
    let strict = rdma_client(&server, &rail, Transport::Rdma).await.unwrap();
    let err = strict.put(b"k2", b"x").await.unwrap_err();
    assert!(matches!(err, Error::Rdma { .. }), "{err}");
    assert!(err.to_string().contains("index 1"), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_rail_failing_its_checks_is_dropped_with_its_reason() {
    let Some((server_dev, rail)) =
        rxe_or_skip("a_client_rail_failing_its_checks_is_dropped_with_its_reason")
    else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail.clone()];
    config.pkey_index = Some(1);
    let err = Client::connect(config).await.unwrap_err();
    assert!(matches!(err, Error::RdmaUnavailable { .. }), "{err}");
    assert!(
        err.to_string().contains(&rail) && err.to_string().contains("1"),
        "{err}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_transfer_fails_operations_within_their_deadline() {
    let Some((server_dev, rail)) =
        rxe_or_skip("a_server_killed_mid_transfer_fails_operations_within_their_deadline")
    else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail];
    config.timeout = Duration::from_secs(5);
    let client = Client::connect(config).await.unwrap();
    client.put(b"warm", b"up").await.unwrap();
    let value = pattern(16 << 20, 7);
    let started = Instant::now();
    let put = tokio::spawn({
        let client = client.clone();
        async move { client.put(b"big", &value).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.kill();
    let result = put.await.unwrap();
    let elapsed = started.elapsed();
    if let Err(e) = &result {
        eprintln!("put ended with: {e}");
    }
    // Either it finished before the kill or it failed; either way within the deadline.
    assert!(
        elapsed < Duration::from_secs(5) + Duration::from_secs(3),
        "took {elapsed:?}"
    );
    let after = client.get(b"warm").await;
    assert!(after.is_err(), "the server is gone: {after:?}");
}
