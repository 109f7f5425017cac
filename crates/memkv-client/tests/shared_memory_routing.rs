//! Which values `auto` moves through a same-host server's arena and which over TCP. Alone in
//! its test binary: it counts the server's operations in the process-wide metrics, which the
//! other shared-memory tests would add to.

mod common;

use common::{admin_get, client_config, metric_sum, pattern, start};
use memkv_client::{Client, Transport};
use memkv_server::Server;

async fn shm_client(server: &Server, transport: Transport) -> Client {
    let mut config = client_config(&[server]);
    config.transport = transport;
    Client::connect(config).await.unwrap()
}

/// Under `auto`, values small enough that a TCP round trip beats two control round trips
/// around a copy go over TCP; large ones through the arena. `shm` sends everything there.
#[tokio::test]
async fn auto_moves_small_values_over_tcp_and_large_ones_through_the_arena() {
    let server = start("").await;
    let ops = |metrics: &str, op: &str, transport: &str| {
        metric_sum(
            metrics,
            "memkv_ops_total",
            &[("op", op), ("transport", transport)],
        )
    };
    let auto = shm_client(&server, Transport::Auto).await;
    let small = pattern(64 << 10, 1);
    let large = pattern(1 << 20, 2);
    // The first large value starts the attach and goes over TCP itself.
    auto.put(b"first", &large).await.unwrap();
    common::until_attached(&auto, &server.data_addr().to_string()).await;
    auto.put(b"small", &small).await.unwrap();
    auto.put(b"large", &large).await.unwrap();
    let mut small_buf = vec![0u8; 64 << 10];
    let mut large_buf = vec![0u8; 1 << 20];
    assert_eq!(
        auto.get_into_slice(b"small", &mut small_buf).await.unwrap(),
        Some(small.len())
    );
    assert_eq!(
        auto.get_into_slice(b"large", &mut large_buf).await.unwrap(),
        Some(large.len())
    );
    assert!(small_buf == small && large_buf == large);
    // A reused vector's capacity says what size to expect; a new one says nothing.
    let mut reused = Vec::with_capacity(64 << 10);
    assert!(auto.get_into(b"small", &mut reused).await.unwrap() && reused == small);
    assert_eq!(auto.get(b"large").await.unwrap(), Some(large.clone()));
    let metrics = admin_get(&server, "/v1/metrics").await;
    assert_eq!(
        (
            ops(&metrics, "TcpPut", "tcp"),
            ops(&metrics, "Commit", "shm"),
            ops(&metrics, "TcpGet", "tcp"),
            ops(&metrics, "Lookup", "shm"),
        ),
        (2.0, 1.0, 2.0, 2.0),
        "the first and the small values over TCP, the large and the unsized through the arena:\n{metrics}"
    );
    assert_eq!(
        auto.shared_memory_servers(),
        vec![server.data_addr().to_string()]
    );

    let strict = shm_client(&server, Transport::Shm).await;
    strict.put(b"small", &small).await.unwrap();
    assert_eq!(
        strict
            .get_into_slice(b"small", &mut small_buf)
            .await
            .unwrap(),
        Some(small.len())
    );
    let metrics = admin_get(&server, "/v1/metrics").await;
    assert_eq!(
        (
            ops(&metrics, "Commit", "shm"),
            ops(&metrics, "Lookup", "shm")
        ),
        (2.0, 3.0),
        "under shm the small values go through the arena too:\n{metrics}"
    );
    server.shutdown().await.unwrap();
}
