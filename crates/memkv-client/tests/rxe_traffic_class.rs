//! A client's `traffic_class`, `service_level` and `gid_index` overrides on real verbs, inside
//! the Soft-RoCE VM (testing/rxe-vm): the client's rail is planned with them, its queue pairs
//! connect with them and move values, and its rail reports the class it sends in. Soft-RoCE has
//! no DCB, so without overrides the rail runs best effort (traffic class 0). Outside the VM the
//! test prints why it is skipped and passes.

mod common;

use std::time::Duration;

use memkv_client::{Client, Transport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_traffic_class_moves_values_and_its_rail_reports_the_class() {
    use std::io::Write;
    let test = "a_client_with_a_traffic_class_moves_values_and_its_rail_reports_the_class";
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
        );
        return;
    }
    let devices: Vec<String> = std::env::var("MEMKV_RXE_DEVICES")
        .expect("MEMKV_RXE_DEVICES")
        .split(',')
        .map(str::to_owned)
        .collect();
    let gid_index: u8 = std::env::var("MEMKV_RXE_GID_INDEX")
        .expect("MEMKV_RXE_GID_INDEX")
        .parse()
        .expect("MEMKV_RXE_GID_INDEX is a number");
    let rail = devices.last().unwrap().clone();
    let server = common::start(&format!("rdma:\n  device: {}\n", devices[0])).await;

    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail.clone()];
    config.timeout = Duration::from_secs(20);
    config.traffic_class = Some(10 << 2);
    config.service_level = Some(0);
    config.gid_index = Some(gid_index);
    let client = Client::connect(config).await.expect("strict RDMA client");
    let value: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 7 + 3) as u8).collect();
    client.put(b"tclass/1m", &value).await.expect("RDMA put");
    assert!(client.get(b"tclass/1m").await.expect("RDMA get").unwrap() == value);
    assert_eq!(client.transport(), "rdma");
    let stats = client.rdma_rail_stats();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].device, rail);
    assert_eq!(stats[0].traffic_class, Some(40), "{stats:?}");
    assert_eq!(stats[0].service_level, 0);
    assert!(stats[0].bytes >= 2 << 20, "{stats:?}");

    // The default: Soft-RoCE has no DCB to detect a lossless class from, so best effort.
    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![rail];
    config.timeout = Duration::from_secs(20);
    let detected = Client::connect(config).await.unwrap();
    assert!(detected.get(b"tclass/1m").await.unwrap().unwrap() == value);
    assert_eq!(detected.rdma_rail_stats()[0].traffic_class, Some(0));
    server.shutdown().await.unwrap();
}
