//! Many connections at once, and file-mode durability across a restart.

mod common;

use common::{admin_get, client_config, metric_sum, pattern, scratch_dir, server_config, start};
use memkv_client::Client;
use memkv_server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_connections_do_mixed_work() {
    let servers = [start("").await, start("").await];
    let refs: Vec<&Server> = servers.iter().collect();
    // 250 clients with 4 connections each; every client touches both servers, so each opens
    // its 4 connections to each: 2000 authenticated connections in all.
    let clients: Vec<Client> = {
        let mut v = Vec::new();
        for _ in 0..250 {
            v.push(Client::connect(client_config(&refs)).await.unwrap());
        }
        v
    };
    let tasks: Vec<tokio::task::JoinHandle<memkv_client::Result<Client>>> = clients
        .into_iter()
        .enumerate()
        .map(|(n, c)| {
            tokio::spawn(async move {
                for i in 0..8u64 {
                    let key = format!("c{n}/k{i}");
                    let value = pattern(((n * 131 + i as usize * 977) % 20_000) + 1, n as u64 + i);
                    c.put(key.as_bytes(), &value).await?;
                    assert!(c.get(key.as_bytes()).await?.unwrap() == value, "{key}");
                    assert!(c.exists(key.as_bytes()).await?);
                    if i % 2 == 0 {
                        assert!(c.delete(key.as_bytes()).await?);
                    }
                }
                let keys: Vec<String> = (0..8).map(|i| format!("c{n}/k{i}")).collect();
                let got = c.exists_batch(&keys).await;
                for (i, r) in got.into_iter().enumerate() {
                    assert_eq!(r?, i % 2 == 1, "c{n}/k{i}");
                }
                memkv_client::Result::Ok(c)
            })
        })
        .collect();
    let mut alive = Vec::new();
    for t in tasks {
        alive.push(t.await.unwrap().unwrap());
    }
    // The servers saw the connections: at least 1000 open at once.
    let mut open = 0;
    for s in &servers {
        open += open_connections(s.admin_addr()).await;
    }
    assert!(open >= 1000, "only {open} connections open");
    drop(alive);
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

/// `connections.current` from a server's `GET /v1/status`.
async fn open_connections(admin: std::net::SocketAddr) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await.unwrap();
    s.write_all(b"GET /v1/status HTTP/1.0\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let marker = "\"current\":";
    let at = body
        .find(marker)
        .expect("connections.current in /v1/status")
        + marker.len();
    body[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn file_mode_keeps_every_acknowledged_block_across_stop_and_restart() {
    keeps_every_acknowledged_block("file", scratch_dir("file-mode")).await;
}

/// Direct mode answers batch gets from the drives' registered buffers where it can spare them
/// and the usual way where it cannot: a batch of 39 values up to 3 MiB needs more than it has.
#[tokio::test]
async fn direct_mode_keeps_every_acknowledged_block_across_stop_and_restart() {
    // O_DIRECT needs a disk filesystem: the target directory is one even where /tmp is not.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memkv-client-direct-mode-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    keeps_every_acknowledged_block("direct", dir).await;
}

async fn keeps_every_acknowledged_block(mode: &str, dir: std::path::PathBuf) {
    let address = common::restartable_address();
    let storage = format!(
        "storage:\n  mode: {mode}\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 96 MiB\n    - media: {}\n      size: 96 MiB\n",
        dir.join("d0").display(),
        dir.join("d1").display()
    );
    let server = Server::start(server_config(&address, &storage))
        .await
        .unwrap();
    let c = Client::connect(client_config(&[&server])).await.unwrap();
    let values: Vec<(String, Vec<u8>)> = (0..40u64)
        .map(|i| {
            (
                format!("durable/{i}"),
                pattern((i as usize * 91_013) % (3 << 20), i),
            )
        })
        .collect();
    let mut acknowledged = Vec::new();
    for (k, v) in &values[..20] {
        c.put(k.as_bytes(), v).await.unwrap();
        acknowledged.push((k.clone(), v.clone()));
    }
    for r in c.put_batch(&values[20..]).await.into_iter() {
        r.unwrap();
    }
    acknowledged.extend(values[20..].iter().cloned());
    assert!(c.delete(b"durable/7").await.unwrap());
    server.shutdown().await.unwrap();

    let server = common::start_again(&address, &storage).await;
    let keys: Vec<&str> = acknowledged.iter().map(|(k, _)| k.as_str()).collect();
    let got = c.get_batch(&keys).await;
    for ((k, v), r) in acknowledged.iter().zip(got) {
        let r = r.unwrap();
        if k == "durable/7" {
            assert_eq!(r, None);
        } else {
            assert!(r.as_ref() == Some(v), "{mode}: {k} lost or changed");
        }
    }
    for (k, v) in acknowledged
        .iter()
        .filter(|(k, _)| k != "durable/7")
        .take(5)
    {
        let got = c.get(k.as_bytes()).await.unwrap();
        assert!(
            got.as_ref() == Some(v),
            "{mode}: {k} changed on a single get"
        );
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A drive that vanishes under a running file-mode server (a test double: its file is
/// truncated to the superblock) goes offline: its values are misses, the server keeps serving
/// from the other drive, and both `/v1/health` and the metrics say so.
#[tokio::test]
async fn a_vanished_drive_shows_as_offline_in_health_and_metrics() {
    // pread, not mapped reads: a mapping of a truncated file faults instead of failing a read.
    vanished_drive("file\n  file_reads: pread", scratch_dir("vanished-drive")).await;
}

/// The same in direct mode, whose batch gets read into the drives' registered buffers.
#[tokio::test]
async fn a_vanished_drive_in_direct_mode_shows_as_offline() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "memkv-client-vanished-direct-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    vanished_drive("direct", dir).await;
}

async fn vanished_drive(mode: &str, dir: std::path::PathBuf) {
    let (d0, d1) = (dir.join("d0"), dir.join("d1"));
    let storage = format!(
        "storage:\n  mode: {mode}\n  block_size: 256 KiB\n  drives:\n    - media: {}\n      size: 32 MiB\n    - media: {}\n      size: 32 MiB\n",
        d0.display(),
        d1.display()
    );
    let server = start(&storage).await;
    let c = Client::connect(client_config(&[&server])).await.unwrap();
    // One extent each, striped over the drives: 12 values on each.
    let values: Vec<(String, Vec<u8>)> = (0..24u64)
        .map(|i| (format!("drive/{i}"), pattern(200_000, i)))
        .collect();
    for r in c.put_batch(&values).await {
        r.unwrap();
    }
    let scrape = admin_get(&server, "/v1/metrics").await;
    let d1_label = d1.display().to_string();
    assert_eq!(
        metric_sum(&scrape, "memkv_drive_online", &[("drive", &d1_label)]),
        1.0
    );

    std::fs::OpenOptions::new()
        .write(true)
        .open(&d1)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    let (mut found, mut missed) = (0, 0);
    for ((k, v), r) in values.iter().zip(c.get_batch(&keys).await) {
        match r.unwrap() {
            Some(got) => {
                assert!(got == *v, "{k}: wrong bytes served");
                found += 1;
            }
            None => missed += 1,
        }
    }
    assert!(found > 0 && missed > 0, "found {found}, missed {missed}");

    let health: serde_json::Value =
        serde_json::from_str(&admin_get(&server, "/v1/health").await).unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["drives_offline"], 1, "{health}");
    let scrape = admin_get(&server, "/v1/metrics").await;
    let d0_label = d0.display().to_string();
    assert_eq!(
        metric_sum(&scrape, "memkv_drive_online", &[("drive", &d1_label)]),
        0.0
    );
    assert_eq!(
        metric_sum(&scrape, "memkv_drive_online", &[("drive", &d0_label)]),
        1.0
    );
    let read_errors = metric_sum(
        &scrape,
        "memkv_drive_read_errors_total",
        &[("drive", &d1_label)],
    );
    assert!(read_errors >= missed as f64, "{read_errors} < {missed}");

    // The server keeps serving: new values go to the drive that works.
    for i in 100..106u64 {
        let (k, v) = (format!("drive/{i}"), pattern(200_000, i));
        c.put(k.as_bytes(), &v).await.unwrap();
        assert!(c.get(k.as_bytes()).await.unwrap().unwrap() == v, "{k}");
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
