//! The client's RDMA transport on real verbs, inside the Soft-RoCE VM (testing/rxe-vm): the
//! server serves its arena on the first rxe device, the client uses the last one as its rail.
//! Outside the VM each test prints why it is skipped and passes.

mod common;

use std::time::{Duration, Instant};

use memkv_client::{Client, ClientConfig, Error, Transport};

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
async fn a_large_registered_buffer_is_populated_in_parallel_and_used_at_any_offset() {
    let Some((server_dev, rail)) =
        rxe_or_skip("a_large_registered_buffer_is_populated_in_parallel_and_used_at_any_offset")
    else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let client = rdma_client(&server, &rail, Transport::Rdma).await.unwrap();
    // Above the size from which pages are populated on several threads before ibv_reg_mr.
    let len = 96 << 20;
    let mut buf = client.register_buffer(len).unwrap();
    eprintln!(
        "registered {} MiB in {:?}",
        len >> 20,
        buf.registration_time()
    );
    assert!(buf.registration_time() > std::time::Duration::ZERO);
    assert!(buf.as_slice().iter().step_by(4096).all(|&b| b == 0));
    let value = pattern(1 << 20, 77);
    buf.as_mut_slice()[..1 << 20].copy_from_slice(&value);
    client.put_from(b"large/1", &buf, 1 << 20).await.unwrap();
    assert!(client.get(b"large/1").await.unwrap().unwrap() == value);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_rdma_sends_auto_to_tcp_and_strict_to_an_error() {
    let Some((server_dev, rail)) =
        rxe_or_skip("a_server_refusing_rdma_sends_auto_to_tcp_and_strict_to_an_error")
    else {
        return;
    };
    // rxe's P_Key table has one entry: index 1 keeps the server on TCP. Shared memory is off,
    // or an auto client on this host would use it and never try RDMA.
    let mut config = common::server_config(
        "127.0.0.1:0",
        &format!("rdma:\n  device: {server_dev}\n  pkey_index: 1\n"),
    );
    config.network.shared_memory = false;
    let server = memkv_server::Server::start(config)
        .await
        .expect("server starts");
    let auto = rdma_client(&server, &rail, Transport::Auto).await.unwrap();
    // A batch is the first operation: its items go over TCP after the RDMA failure.
    let batch = [("b1", vec![1u8; 10]), ("b2", pattern(100_000, 3))];
    for r in auto.put_batch(&batch).await {
        r.expect("auto batch falls back");
    }
    let got = auto.get_batch(&["b2", "nope", "b1"]).await;
    assert!(got[0].as_ref().unwrap().as_ref() == Some(&batch[1].1));
    assert_eq!(got[1].as_ref().unwrap(), &None);
    assert_eq!(got[2].as_ref().unwrap().as_ref(), Some(&batch[0].1));
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
    for r in strict.put_batch(&batch).await {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::Rdma { .. }), "{err}");
    }
    let err = strict.put(b"k2", b"x").await.unwrap_err();
    assert!(matches!(err, Error::Rdma { .. }), "{err}");
    assert!(err.to_string().contains("index 1"), "{err}");
    server.shutdown().await.unwrap();
}

/// One server refusing RDMA sends only its own values over TCP, for a while: the other
/// server's stay on RDMA (the first failure used to switch the whole client to TCP for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_refusing_rdma_leaves_the_others_on_rdma() {
    let Some((server_dev, rail)) =
        rxe_or_skip("one_server_refusing_rdma_leaves_the_others_on_rdma")
    else {
        return;
    };
    // Shared memory is off, or an auto client on this host would use it and never try RDMA;
    // P_Key index 1 keeps the second server on TCP (rxe's table has one entry).
    let start = |pkey: &str| {
        let mut config = common::server_config(
            "127.0.0.1:0",
            &format!("rdma:\n  device: {server_dev}\n{pkey}"),
        );
        config.network.shared_memory = false;
        memkv_server::Server::start(config)
    };
    let good = start("").await.expect("server starts");
    let refusing = start("  pkey_index: 1\n").await.expect("server starts");
    let mut config = common::client_config(&[&good, &refusing]);
    config.transport = Transport::Auto;
    config.rdma_devices = vec![rail.clone()];
    config.timeout = Duration::from_secs(20);
    let auto = Client::connect(config).await.unwrap();
    let values: Vec<(String, Vec<u8>)> = (0..32u8)
        .map(|i| (format!("spread/{i}"), pattern(100_000, i)))
        .collect();
    for (key, value) in &values {
        auto.put(key.as_bytes(), value).await.expect("auto put");
    }
    for (key, value) in &values {
        assert!(
            auto.get(key.as_bytes()).await.unwrap().as_ref() == Some(value),
            "{key}"
        );
    }
    let reason = auto
        .rdma_fallback_reason()
        .expect("the refusing server's values go over TCP");
    assert!(
        reason.contains(&refusing.data_addr().to_string())
            && !reason.contains(&good.data_addr().to_string()),
        "{reason}"
    );
    assert_eq!(
        auto.transport(),
        "rdma",
        "the other server stays on RDMA: {reason}"
    );
    good.shutdown().await.unwrap();
    refusing.shutdown().await.unwrap();
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

/// Sizes from 1 byte to 16 MiB, several of each kind, for batches.
const BATCH_SIZES: [usize; 12] = [
    1,
    17,
    4096,
    4096,
    65_536,
    100_000,
    1 << 20,
    (1 << 20) + 3,
    2 << 20,
    4 << 20,
    5_000_000,
    16 << 20,
];

/// Work requests the values of `sizes` take: one per message of at most
/// `memkv_rdma::transfer::MAX_MESSAGE_BYTES`.
fn work_requests(sizes: impl IntoIterator<Item = usize>) -> u64 {
    let max = memkv_rdma::transfer::MAX_MESSAGE_BYTES as usize;
    sizes.into_iter().map(|s| s.div_ceil(max) as u64).sum()
}

fn doorbells(client: &Client) -> u64 {
    client.rdma_rail_stats().iter().map(|r| r.doorbells).sum()
}

fn rdma_bytes(client: &Client) -> u64 {
    client.rdma_rail_stats().iter().map(|r| r.bytes).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_move_over_rdma_in_fewer_doorbells_than_items() {
    let Some((server_dev, rail)) =
        rxe_or_skip("batches_move_over_rdma_in_fewer_doorbells_than_items")
    else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let client = rdma_client(&server, &rail, Transport::Rdma).await.unwrap();
    let tcp = common::client(&[&server]).await;
    let items: Vec<(String, Vec<u8>)> = BATCH_SIZES
        .iter()
        .enumerate()
        .map(|(i, &size)| (format!("batch/{i}"), pattern(size, 60 + i as u8)))
        .chain((0..20).map(|i| (format!("batch/small/{i}"), pattern(64 + i, i as u8))))
        .collect();
    let total: usize = items.iter().map(|(_, v)| v.len()).sum();
    // Chains of several work requests per doorbell: fewer doorbells than requests.
    let requests = work_requests(items.iter().map(|(_, v)| v.len()));
    let (bells, bytes) = (doorbells(&client), rdma_bytes(&client));
    for r in client.put_batch(&items).await {
        r.expect("RDMA batch put");
    }
    let put_bells = doorbells(&client) - bells;
    assert_eq!(
        rdma_bytes(&client) - bytes,
        total as u64,
        "every byte by RDMA"
    );
    assert!(
        put_bells < requests,
        "{put_bells} doorbells for {requests} work requests ({} items)",
        items.len()
    );
    let mut keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.insert(3, "batch/missing-a".into());
    keys.push("batch/missing-b".into());
    let (bells, bytes) = (doorbells(&client), rdma_bytes(&client));
    let got = client.get_batch(&keys).await;
    let get_bells = doorbells(&client) - bells;
    assert_eq!(
        rdma_bytes(&client) - bytes,
        total as u64,
        "every byte by RDMA"
    );
    assert!(
        get_bells < requests,
        "{get_bells} doorbells for {requests} work requests"
    );
    eprintln!(
        "{} items, {total} bytes: {put_bells} doorbells to put, {get_bells} to get",
        items.len()
    );
    let expected: std::collections::HashMap<&str, &Vec<u8>> =
        items.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for (key, got) in keys.iter().zip(got) {
        let got = got.expect("RDMA batch get");
        match expected.get(key.as_str()) {
            Some(v) => assert!(got.as_ref() == Some(*v), "{key} differs"),
            None => assert_eq!(got, None, "{key} is a miss"),
        }
    }
    // A TCP client reads what the RDMA batch wrote.
    assert!(tcp.get(b"batch/11").await.unwrap().unwrap() == items[11].1);
    assert_eq!(client.transport(), "rdma");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_batches_move_without_copies() {
    let Some((server_dev, rail)) = rxe_or_skip("registered_batches_move_without_copies") else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let client = rdma_client(&server, &rail, Transport::Rdma).await.unwrap();
    let total: usize = BATCH_SIZES.iter().sum();
    let mut out = client.register_buffer(total).unwrap();
    let mut ranges = Vec::new();
    let mut at = 0;
    for (i, &size) in BATCH_SIZES.iter().enumerate() {
        out.as_mut_slice()[at..at + size].copy_from_slice(&pattern(size, 90 + i as u8));
        ranges.push((format!("reg-batch/{i}"), at..at + size));
        at += size;
    }
    let bells = doorbells(&client);
    for r in client.put_batch_from(&out, &ranges).await {
        r.expect("put_batch_from");
    }
    let put_bells = doorbells(&client) - bells;
    let requests = work_requests(BATCH_SIZES);
    assert!(
        put_bells < requests,
        "{put_bells} doorbells for {requests} work requests"
    );
    // Read back in reverse order into another buffer, with a miss and a range too small.
    let mut inp = client.register_buffer(total + 64).unwrap();
    let mut wanted: Vec<(String, std::ops::Range<usize>)> = ranges.iter().rev().cloned().collect();
    let mut at = 0;
    for (_, r) in &mut wanted {
        let len = r.len();
        *r = at..at + len;
        at += len;
    }
    wanted.push(("reg-batch/none".into(), at..at + 8));
    wanted.push(("reg-batch/1".into(), at + 8..at + 16));
    let bells = doorbells(&client);
    let got = client.get_batch_into_buffer(&mut inp, &wanted).await;
    let get_bells = doorbells(&client) - bells;
    assert!(
        get_bells < requests,
        "{get_bells} doorbells for {requests} work requests"
    );
    let n = BATCH_SIZES.len();
    for (i, (_, range)) in wanted[..n].iter().enumerate() {
        let original = n - 1 - i;
        assert_eq!(got[i].as_ref().unwrap(), &Some(range.len()));
        assert!(
            inp.as_slice()[range.clone()]
                == pattern(BATCH_SIZES[original], 90 + original as u8)[..],
            "item {original} differs"
        );
    }
    assert_eq!(got[n].as_ref().unwrap(), &None);
    let err = got[n + 1].as_ref().unwrap_err();
    assert!(err.to_string().contains("exceeds the limit of 8"), "{err}");
    server.shutdown().await.unwrap();
}

/// A registered batch reads every server at once, each into its own pieces of the buffer:
/// values from two servers land interleaved in their places, and two hung servers cost the
/// caller one deadline, not one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_batch_reads_every_server_at_once() {
    let Some((server_dev, rail)) = rxe_or_skip("a_registered_batch_reads_every_server_at_once")
    else {
        return;
    };
    let start = || {
        let mut config =
            common::server_config("127.0.0.1:0", &format!("rdma:\n  device: {server_dev}\n"));
        // Or a client on this host would take the shared arena, not RDMA.
        config.network.shared_memory = false;
        memkv_server::Server::start(config)
    };
    let (a, b) = (start().await.unwrap(), start().await.unwrap());
    let size = 100_000;
    let keys: Vec<String> = (0..24).map(|i| format!("spread/{i}")).collect();
    let mut config = common::client_config(&[&a, &b]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail.clone()];
    config.timeout = Duration::from_secs(20);
    let both = Client::connect(config).await.unwrap();
    for (i, key) in keys.iter().enumerate() {
        both.put(key.as_bytes(), &pattern(size, i as u8))
            .await
            .unwrap();
    }
    let mut inp = both.register_buffer(keys.len() * size).unwrap();
    let wanted: Vec<(&str, std::ops::Range<usize>)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i * size..(i + 1) * size))
        .collect();
    for (i, got) in both
        .get_batch_into_buffer(&mut inp, &wanted)
        .await
        .iter()
        .enumerate()
    {
        assert_eq!(got.as_ref().unwrap(), &Some(size), "{}", keys[i]);
        assert!(
            inp.as_slice()[wanted[i].1.clone()] == pattern(size, i as u8)[..],
            "{}",
            keys[i]
        );
    }
    assert_eq!(both.transport(), "rdma");

    let (hung_1, _, hold_1) = common::scripted::silent_server().await;
    let (hung_2, _, hold_2) = common::scripted::silent_server().await;
    let deadline = Duration::from_secs(2);
    let mut config = ClientConfig::new([a.data_addr().to_string(), hung_1, hung_2], common::key());
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail];
    config.timeout = deadline;
    let three = Client::connect(config).await.unwrap();
    let mut inp = three.register_buffer(keys.len() * size).unwrap();
    let started = Instant::now();
    let got = three.get_batch_into_buffer(&mut inp, &wanted).await;
    let took = started.elapsed();
    let hung = got
        .iter()
        .filter(|r| matches!(r, Err(Error::Timeout { .. })))
        .count();
    // Keys placed on `a` are read (or missed: they were placed among a and b when stored).
    let answered = got.iter().filter(|r| r.is_ok()).count();
    assert!(
        hung > 0 && answered > 0 && hung + answered == got.len(),
        "{got:?}"
    );
    assert!(
        took < deadline + deadline / 2,
        "{hung} keys on two hung servers held the batch {took:?} (deadline {deadline:?})"
    );
    hold_1.abort();
    hold_2.abort();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rails_share_a_16_mib_value() {
    let Some((server_dev, _)) = rxe_or_skip("two_rails_share_a_16_mib_value") else {
        return;
    };
    let devices: Vec<String> = std::env::var("MEMKV_RXE_DEVICES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    // Both rxe devices reach the server's (rxe0 over its own address); with one device in the
    // VM the same device is listed twice: two queue pairs, still two rails.
    config.rdma_devices = if devices.len() >= 2 {
        vec![devices[1].clone(), devices[0].clone()]
    } else {
        vec![devices[0].clone(), devices[0].clone()]
    };
    config.timeout = Duration::from_secs(30);
    let client = Client::connect(config).await.unwrap();
    assert_eq!(client.rdma_rails().len(), 2);
    let value = pattern(16 << 20, 123);
    client.put(b"striped", &value).await.unwrap();
    let after_put: Vec<u64> = client.rdma_rail_stats().iter().map(|r| r.bytes).collect();
    assert_eq!(
        after_put,
        vec![8 << 20, 8 << 20],
        "half of the value per rail"
    );
    assert!(client.get(b"striped").await.unwrap().unwrap() == value);
    let stats = client.rdma_rail_stats();
    assert_eq!(
        stats.iter().map(|r| r.bytes).collect::<Vec<_>>(),
        vec![16 << 20, 16 << 20]
    );
    assert!(stats.iter().all(|r| r.dropped.is_empty()), "{stats:?}");
    // Small values take the rails in turn.
    let small: Vec<(String, Vec<u8>)> = (0..8)
        .map(|i| (format!("small/{i}"), pattern(1000, i)))
        .collect();
    for r in client.put_batch(&small).await {
        r.unwrap();
    }
    let stats = client.rdma_rail_stats();
    assert_eq!(
        stats.iter().map(|r| r.bytes).collect::<Vec<_>>(),
        vec![(16 << 20) + 4000, (16 << 20) + 4000]
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rdma_and_a_tcp_client_show_their_transports_in_status_and_metrics() {
    let Some((server_dev, rail)) =
        rxe_or_skip("an_rdma_and_a_tcp_client_show_their_transports_in_status_and_metrics")
    else {
        return;
    };
    let server = common::start(&format!("rdma:\n  device: {server_dev}\n")).await;
    let rdma = rdma_client(&server, &rail, Transport::Rdma)
        .await
        .expect("strict RDMA client");
    let mut tcp_config = common::client_config(&[&server]);
    tcp_config.transport = Transport::Tcp;
    let tcp = Client::connect(tcp_config).await.unwrap();
    let before = common::admin_get(&server, "/v1/metrics").await;
    let value = pattern(256 << 10, 7);
    for i in 0..4 {
        rdma.put(format!("mix/rdma/{i}").as_bytes(), &value)
            .await
            .unwrap();
        tcp.put(format!("mix/tcp/{i}").as_bytes(), &value)
            .await
            .unwrap();
    }
    for i in 0..4 {
        assert!(rdma.get(format!("mix/tcp/{i}").as_bytes()).await.unwrap() == Some(value.clone()));
        assert!(tcp.get(format!("mix/rdma/{i}").as_bytes()).await.unwrap() == Some(value.clone()));
    }
    assert_eq!(rdma.transport(), "rdma");

    let body = common::admin_get(&server, "/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let clients = status["clients"].as_array().unwrap();
    let rdma_clients: Vec<_> = clients
        .iter()
        .filter(|c| c["transport"] == "rdma-rc")
        .collect();
    let tcp_clients: Vec<_> = clients.iter().filter(|c| c["transport"] == "tcp").collect();
    assert!(!rdma_clients.is_empty(), "{body}");
    assert!(!tcp_clients.is_empty(), "{body}");
    for c in &rdma_clients {
        assert_eq!(c["device"], server_dev.as_str(), "{c}");
    }
    let sum = |list: &[&serde_json::Value], field: &str| -> u64 {
        list.iter().map(|c| c[field].as_u64().unwrap()).sum()
    };
    // The RDMA client's values moved one-sided and still count: written at Commit, read at
    // Lookup.
    assert!(
        sum(&rdma_clients, "bytes_in") >= 4 * value.len() as u64,
        "{body}"
    );
    assert!(
        sum(&rdma_clients, "bytes_out") >= 4 * value.len() as u64,
        "{body}"
    );
    assert!(
        sum(&tcp_clients, "bytes_in") >= 4 * value.len() as u64,
        "{body}"
    );
    assert!(
        sum(&tcp_clients, "bytes_out") >= 4 * value.len() as u64,
        "{body}"
    );
    assert!(status["connections"]["by_transport"]["rdma-rc"].as_u64() >= Some(1));
    assert!(status["connections"]["by_transport"]["tcp"].as_u64() >= Some(1));

    let after = common::admin_get(&server, "/v1/metrics").await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        common::metric_sum(&after, name, labels) - common::metric_sum(&before, name, labels)
    };
    assert!(
        delta(
            "memkv_ops_total",
            &[("op", "Commit"), ("transport", "rdma-rc")]
        ) >= 4.0
    );
    assert!(
        delta(
            "memkv_ops_total",
            &[("op", "Lookup"), ("transport", "rdma-rc")]
        ) >= 4.0
    );
    assert!(delta("memkv_ops_total", &[("op", "TcpPut"), ("transport", "tcp")]) >= 4.0);
    let len = value.len() as f64;
    assert!(delta("memkv_bytes_in_total", &[("transport", "rdma-rc")]) >= 4.0 * len);
    assert!(delta("memkv_bytes_out_total", &[("transport", "rdma-rc")]) >= 4.0 * len);
    assert!(delta("memkv_bytes_in_total", &[("transport", "tcp")]) >= 4.0 * len);
    server.shutdown().await.unwrap();
}
