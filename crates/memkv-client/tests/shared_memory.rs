//! The same-host transport against real servers on loopback: values copied through the
//! server's arena mapped into the client, and the ways it can fail (a server that does not
//! offer it, a server restarted under a client holding the old mapping).

mod common;

use std::time::{Duration, Instant};

use common::{KEY_HEX, admin_get, client_config, metric_sum, pattern, start};
use memkv_client::{Client, Error, Transport};
use memkv_server::Server;
use memkv_server::config::ServerConfig;

async fn shm_client(server: &Server, transport: Transport) -> Client {
    let mut config = client_config(&[server]);
    config.transport = transport;
    Client::connect(config).await.unwrap()
}

/// A server whose arena is `max_size` (e.g. "93 MiB": a size no other test uses finds this
/// arena's mappings).
async fn server_with_arena(max_size: &str) -> Server {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: {max_size}\n"
    );
    Server::start(ServerConfig::from_yaml_str(&yaml, "test").unwrap())
        .await
        .unwrap()
}
#[tokio::test]
async fn values_move_through_the_servers_arena() {
    let server = start("").await;
    let c = shm_client(&server, Transport::Shm).await;
    let sizes = [0usize, 1, 4096, 100_000, 3 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("single/{i}");
        let value = pattern(len, i as u64);
        c.put(key.as_bytes(), &value).await.unwrap();
        assert_eq!(c.get(key.as_bytes()).await.unwrap(), Some(value.clone()));
        let mut buf = vec![0u8; len + 7];
        assert_eq!(
            c.get_into_slice(key.as_bytes(), &mut buf).await.unwrap(),
            Some(len)
        );
        assert_eq!(&buf[..len], &value[..]);
    }
    assert_eq!(
        c.shared_memory_servers(),
        vec![server.data_addr().to_string()]
    );
    assert_eq!(c.get(b"absent").await.unwrap(), None);
    let err = c
        .get_into_slice(b"single/4", &mut [0u8; 10])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::BufferTooSmall { len, capacity: 10 } if len == 3 << 20),
        "{err}"
    );

    // Batches, including keys that are absent.
    let items: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("batch/{i}"), pattern(1000 * i + 1, 100 + i as u64)))
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    let mut keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.push("batch/absent".into());
    let got = c.get_batch(&keys).await;
    for ((_, v), r) in items.iter().zip(&got) {
        assert_eq!(r.as_ref().unwrap().as_ref(), Some(v));
    }
    assert_eq!(got.last().unwrap().as_ref().unwrap(), &None);
    let mut bufs: Vec<Vec<u8>> = keys.iter().map(|_| vec![0u8; 40_000]).collect();
    let lens = c.get_batch_into(&keys, &mut bufs).await;
    for (((_, v), r), b) in items.iter().zip(&lens).zip(&bufs) {
        assert_eq!(*r.as_ref().unwrap(), Some(v.len()));
        assert_eq!(&b[..v.len()], &v[..]);
    }
    let dests: Vec<Vec<u8>> = keys.iter().map(|_| vec![0u8; 40_000]).collect();
    let (lens, back) = c.get_batch_into_destinations(&keys, dests).await;
    for (((_, v), r), b) in items.iter().zip(&lens).zip(&back) {
        assert_eq!(*r.as_ref().unwrap(), Some(v.len()));
        assert_eq!(&b.as_ref().unwrap()[..v.len()], &v[..]);
    }

    // The server saw a same-host client, and counted its operations under `shm`.
    let status = admin_get(&server, "/v1/status").await;
    assert!(status.contains("\"transport\":\"shm\""), "{status}");
    assert!(status.contains("\"shared_memory\":true"), "{status}");
    let metrics = admin_get(&server, "/v1/metrics").await;
    let commits = metric_sum(
        &metrics,
        "memkv_ops_total",
        &[("op", "Commit"), ("transport", "shm")],
    );
    assert!(
        commits >= 45.0,
        "Commit over shm counted {commits} times:\n{metrics}"
    );
    server.shutdown().await.unwrap();
}

fn config_without_shared_memory() -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n  shared_memory: false\nmemory:\n  max_size: 64 MiB\n"
    );
    ServerConfig::from_yaml_str(&yaml, "test").unwrap()
}

#[tokio::test]
async fn a_server_without_shared_memory_is_served_another_way_unless_shm_is_required() {
    let server = Server::start(config_without_shared_memory()).await.unwrap();
    let auto = shm_client(&server, Transport::Auto).await;
    auto.put(b"k", b"over tcp").await.unwrap();
    assert_eq!(
        auto.get(b"k").await.unwrap().as_deref(),
        Some(&b"over tcp"[..])
    );
    assert!(auto.shared_memory_servers().is_empty());

    let strict = shm_client(&server, Transport::Shm).await;
    let err = strict.get(b"k").await.unwrap_err();
    assert!(
        matches!(&err, Error::SharedMemory { reason, .. } if reason.contains("network.shared_memory is off")),
        "{err}"
    );
    let tcp = shm_client(&server, Transport::Tcp).await;
    assert_eq!(
        tcp.get(b"k").await.unwrap().as_deref(),
        Some(&b"over tcp"[..])
    );
    server.shutdown().await.unwrap();
}

/// `shared_memory: false` (what `memkv net verify` sets, to test the fabric) keeps an `auto`
/// client off a same-host server's arena: its values go the network way, and the server is
/// never attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_without_shared_memory_never_attaches_a_same_host_server() {
    let server = start("").await;
    // A default `auto` client attaches this server (in the background, started by a value
    // worth the arena: operations go over TCP until it is done), so the switch, not the
    // server, keeps the other one off. The same values go through both.
    let value = pattern(1 << 20, 7);
    let attached = shm_client(&server, Transport::Auto).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ops = 0;
    while attached.shared_memory_servers().is_empty() {
        assert!(Instant::now() < deadline, "the auto client never attached");
        attached.put(b"k", &value).await.unwrap();
        ops += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut config = client_config(&[&server]);
    config.shared_memory = false;
    let c = Client::connect(config).await.unwrap();
    for _ in 0..ops.max(5) {
        c.put(b"k", &value).await.unwrap();
        assert!(c.get(b"k").await.unwrap().as_ref() == Some(&value));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(c.shared_memory_servers().is_empty());
    server.shutdown().await.unwrap();
}

/// A server restarted under a client holding its old mapping: puts reach the new server, and
/// the old mapping never serves the old server's bytes.
async fn restart_under_a_client(transport: Transport) {
    let first = common::start_restartable("").await;
    let addr = first.data_addr().to_string();
    let mut config = client_config(&[&first]);
    config.transport = transport;
    config.timeout = Duration::from_secs(2);
    let c = Client::connect(config).await.unwrap();
    c.put(b"before", &pattern(200_000, 1)).await.unwrap();
    common::until_attached(&c, &addr).await;
    assert_eq!(c.shared_memory_servers(), vec![addr.clone()]);
    // The old arena stays mapped in the client after the server is gone.
    first.shutdown().await.unwrap();

    let second = common::start_again(&addr, "").await;
    let until = Instant::now() + Duration::from_secs(10);
    let value = pattern(300_000, 2);
    loop {
        match c.put(b"after", &value).await {
            Ok(()) => break,
            Err(e) if Instant::now() < until => {
                assert!(
                    transport != Transport::Auto || !matches!(e, Error::SharedMemory { .. }),
                    "auto hides a stale mapping: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("under {transport:?} the restarted server never took a put: {e}"),
        }
    }
    // The old value died with the first server; the old mapping must not resurrect it.
    assert_eq!(c.get(b"before").await.unwrap(), None);
    assert_eq!(c.get(b"after").await.unwrap(), Some(value.clone()));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(c.get(b"after").await.unwrap(), Some(value));
    common::until_attached(&c, &addr).await;
    assert_eq!(c.shared_memory_servers(), vec![addr], "attached again");
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restarted_server_is_attached_again_and_old_bytes_are_never_served() {
    restart_under_a_client(Transport::Auto).await;
}

/// Mappings of a server arena (`memfd:memkv-arena`) of exactly `len` bytes in this process.
fn arena_mappings(len: u64) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:memkv-arena"))
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            b - a == len
        })
        .count()
}

/// A stopped server's arena is let go once operations find the server gone; it used to stay
/// mapped (and with it every value the dead server held) for as long as the client lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_servers_arena_is_unmapped() {
    // A size no other test here uses, to find this arena's mappings.
    const LEN: u64 = 93 << 20;
    let server = server_with_arena("93 MiB").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Auto;
    config.timeout = Duration::from_secs(2);
    let c = Client::connect(config).await.unwrap();
    c.put(b"k", &pattern(200_000, 1)).await.unwrap();
    common::until_attached(&c, &server.data_addr().to_string()).await;
    assert_eq!(
        arena_mappings(LEN),
        2,
        "the server's mapping and the client's"
    );

    server.shutdown().await.unwrap();
    for round in 0..3 {
        assert!(c.put(b"k", &pattern(200_000, 2)).await.is_err());
        assert!(c.get(b"k").await.is_err());
        tokio::time::sleep(Duration::from_millis(150 * (round + 1))).await;
    }
    assert_eq!(
        (arena_mappings(LEN), c.shared_memory_servers()),
        (0, Vec::<String>::new()),
        "after the server stopped and every operation failed, the client still maps its arena"
    );
}

/// Under `transport: shm` a restarted server is attached again too: the stale mapping's
/// refusal is the operation's error, but the next operation must not go through the old
/// arena again. It used to keep the old mapping for ever, failing every put and get.
#[tokio::test]
async fn under_shm_a_restarted_server_is_attached_again() {
    restart_under_a_client(Transport::Shm).await;
}

/// A client with nothing to do lets go of a stopped server's arena too: the server closing its
/// connections is enough. It used to keep the arena (and every value in it) mapped until its
/// next operation, so a server restarted under idle clients found its old arena still holding
/// the hugepages and memory it needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_lets_go_of_a_stopped_servers_arena() {
    // A size no other test here uses, to find this arena's mappings.
    const LEN: u64 = 91 << 20;
    let server = server_with_arena("91 MiB").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Shm;
    let c = Client::connect(config).await.unwrap();
    c.put(b"k", &pattern(200_000, 1)).await.unwrap();
    assert_eq!(
        arena_mappings(LEN),
        2,
        "the server's mapping and the client's"
    );

    server.shutdown().await.unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while arena_mappings(LEN) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        (arena_mappings(LEN), c.shared_memory_servers()),
        (0, Vec::<String>::new()),
        "with no operation after the server stopped, the client still maps its arena"
    );
}

/// Mapping a large arena can take longer than an operation's deadline (the first client's
/// mapping faults in every page of it). Under `transport: shm` the attach then finishes for the
/// next operation. It used to be abandoned with the operation and started over by the next one,
/// so a client whose deadline was shorter than the mapping never attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_slower_than_the_deadline_finishes_for_the_next_operation() {
    let server = server_with_arena("1 GiB").await;
    let mut config = client_config(&[&server]);
    config.transport = Transport::Shm;
    config.timeout = Duration::from_millis(30);
    let c = Client::connect(config).await.unwrap();
    let value = pattern(1 << 20, 3);
    let until = Instant::now() + Duration::from_secs(15);
    // Until attached, a put times out (waiting for the attach).
    while c.shared_memory_servers().is_empty() {
        match c.put(b"large", &value).await {
            Ok(()) | Err(Error::Timeout { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(()) => panic!("the client never attached; its puts went over TCP"),
            Err(e) => panic!("the client never attached: {e}"),
        }
    }
    // Attached, a 1 MiB put and get fit in 30 ms unless a loaded machine preempts them (seen
    // while other test suites ran): then they are tried again.
    let mut back = vec![0u8; 1 << 20];
    let read = loop {
        let moved = match c.put(b"large", &value).await {
            Ok(()) => c.get_into_slice(b"large", &mut back).await,
            Err(e) => Err(e),
        };
        match moved {
            Err(Error::Timeout { .. }) if Instant::now() < until => continue,
            done => break done.unwrap(),
        }
    };
    assert_eq!(read, Some(value.len()));
    assert!(back == value);
    server.shutdown().await.unwrap();
}

/// Under `auto` no operation waits for an attach: the first value worth the arena starts it in
/// the background and goes over TCP. It used to wait, and mapping a 1 GiB arena (0.7 s on a
/// quiet two-core machine, 2-4 s on a busy one) outlasted a vLLM engine's 3 s deadline: its
/// first save timed out and the engine recomputed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_auto_operations_go_over_tcp_while_a_slow_attach_runs() {
    let server = server_with_arena("1 GiB").await;
    let addr = server.data_addr().to_string();
    let mut config = client_config(&[&server]);
    config.transport = Transport::Auto;
    config.timeout = Duration::from_secs(10);
    let c = Client::connect(config).await.unwrap();
    let value = pattern(1 << 20, 4);
    c.put(b"first", &value).await.unwrap();
    // A 1 MiB put over loopback takes milliseconds, mapping the arena hundreds; and the mapping
    // no longer holds up the put's own allocations (`memkv_shm::SharedArena::map`).
    assert!(
        c.shared_memory_servers().is_empty(),
        "the first put waited for the attach"
    );
    let mut back = vec![0u8; 1 << 20];
    assert_eq!(
        c.get_into_slice(b"first", &mut back).await.unwrap(),
        Some(value.len())
    );
    assert!(back == value);
    common::until_attached(&c, &addr).await;
    c.put(b"second", &value).await.unwrap();
    assert_eq!(c.get(b"first").await.unwrap(), Some(value.clone()));
    assert_eq!(c.get(b"second").await.unwrap(), Some(value));
    server.shutdown().await.unwrap();
}
