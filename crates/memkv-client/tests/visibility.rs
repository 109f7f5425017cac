//! What a server shows of the real client: its connections in `/v1/status` with transport,
//! operations and bytes, and the operations and bytes in `/v1/metrics` under that transport.

mod common;

use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_clients_connections_ops_and_bytes_show_in_status_and_metrics() {
    let server = common::start("rdma:\n  enabled: false\n").await;
    let mut config = common::client_config(&[&server]);
    config.num_connections = 2;
    config.transport = memkv_client::Transport::Tcp;
    let client = memkv_client::Client::connect(config).await.unwrap();
    let before = common::admin_get(&server, "/v1/metrics").await;
    let value = common::pattern(64 << 10, 1);
    for i in 0..10 {
        client
            .put(format!("vis/{i}").as_bytes(), &value)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let got = client.get(format!("vis/{i}").as_bytes()).await.unwrap();
        assert!(got.as_deref() == Some(&value[..]));
    }

    let status: serde_json::Value =
        serde_json::from_str(&common::admin_get(&server, "/v1/status").await).unwrap();
    let clients = status["clients"].as_array().unwrap();
    assert!(!clients.is_empty() && clients.len() <= 2, "{status}");
    let sum = |field: &str| -> u64 { clients.iter().map(|c| c[field].as_u64().unwrap()).sum() };
    assert!(sum("ops") >= 20, "{status}");
    assert!(sum("bytes_in") >= 10 * value.len() as u64, "{status}");
    assert!(sum("bytes_out") >= 10 * value.len() as u64, "{status}");
    for c in clients {
        assert_eq!(c["transport"], "tcp");
        assert!(c["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{c}");
        assert_eq!(c["device"], serde_json::Value::Null);
    }
    assert_eq!(
        status["connections"]["by_transport"]["tcp"].as_u64(),
        Some(clients.len() as u64)
    );

    let after = common::admin_get(&server, "/v1/metrics").await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        common::metric_sum(&after, name, labels) - common::metric_sum(&before, name, labels)
    };
    // Other tests in this process add to the same counters; ours add at least this much.
    assert!(delta("memkv_ops_total", &[("op", "TcpPut"), ("transport", "tcp")]) >= 10.0);
    assert!(delta("memkv_ops_total", &[("op", "TcpGet"), ("transport", "tcp")]) >= 10.0);
    assert!(delta("memkv_bytes_in_total", &[("transport", "tcp")]) >= 10.0 * value.len() as f64);
    assert!(delta("memkv_bytes_out_total", &[("transport", "tcp")]) >= 10.0 * value.len() as f64);
    assert!(common::metric_sum(&after, "memkv_stored_values", &[]) >= 10.0);

    drop(client);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let status: serde_json::Value =
            serde_json::from_str(&common::admin_get(&server, "/v1/status").await).unwrap();
        if status["clients"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.shutdown().await.unwrap();
}
