//! Many connections at once, and file-mode durability across a restart.

mod common;

use common::{client_config, pattern, scratch_dir, server_config, start};
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
    let dir = scratch_dir("file-mode");
    let address = common::restartable_address();
    let storage = format!(
        "storage:\n  mode: file\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 96 MiB\n    - media: {}\n      size: 96 MiB\n",
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
            assert!(r.as_ref() == Some(v), "{k} lost or changed");
        }
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
