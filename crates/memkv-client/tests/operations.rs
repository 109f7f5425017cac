//! Single-key and batch operations against real servers on loopback.

mod common;

use std::collections::HashMap;

use common::{client, pattern, start};
use memkv_client::{Client, Error};

#[tokio::test]
async fn values_from_0_bytes_to_the_maximum_round_trip_bit_exact() {
    let server = start("").await;
    let c = client(&[&server]).await;
    let max = 64usize << 20;
    for (i, len) in [0, 1, 4095, 4096, 65_537, (2 << 20) + 3, max]
        .into_iter()
        .enumerate()
    {
        let key = format!("size/{len}");
        let value = pattern(len, i as u64);
        c.put(key.as_bytes(), &value).await.unwrap();
        let got = c.get(key.as_bytes()).await.unwrap().expect("stored");
        assert!(got == value, "value of {len} bytes differs");
    }
    let err = c.put(b"too-big", &vec![0u8; max + 1]).await.unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { what: "value", .. }),
        "{err}"
    );
    let err = c.put(&[b'k'; 1025], b"v").await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { what: "key", .. }), "{err}");
    let err = c.put(b"", b"v").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                what: "key",
                len: 0,
                ..
            }
        ),
        "{err}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_empty_key_is_refused_before_anything_is_sent() {
    // No server listens: a key sent anywhere would fail as unreachable instead.
    let mut config = memkv_client::ClientConfig::new(["127.0.0.1:1"], common::key());
    config.transport = memkv_client::Transport::Tcp;
    let c = Client::connect(config).await.unwrap();
    let empty: &[u8] = b"";
    let err = c.put(empty, b"v").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                what: "key",
                len: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("empty key"), "{err}");
    assert!(matches!(
        c.get(empty).await,
        Err(Error::TooLarge { len: 0, .. })
    ));
    assert!(matches!(
        c.exists(empty).await,
        Err(Error::TooLarge { len: 0, .. })
    ));
    assert!(matches!(
        c.delete(empty).await,
        Err(Error::TooLarge { len: 0, .. })
    ));
    let results = c.get_batch(&[empty, b"k"]).await;
    assert!(
        matches!(results[0], Err(Error::TooLarge { len: 0, .. })),
        "{:?}",
        results[0]
    );
}

#[tokio::test]
async fn get_exists_delete_and_overwrite() {
    let server = start("").await;
    let c = client(&[&server]).await;
    assert_eq!(c.get(b"absent").await.unwrap(), None);
    assert!(!c.exists(b"absent").await.unwrap());
    assert!(!c.delete(b"absent").await.unwrap());

    c.put(b"k", b"first").await.unwrap();
    c.put(b"k", b"second value").await.unwrap();
    assert!(c.exists(b"k").await.unwrap());
    let mut buf = Vec::with_capacity(1 << 20);
    let capacity = buf.capacity();
    assert!(c.get_into(b"k", &mut buf).await.unwrap());
    assert_eq!(buf, b"second value");
    assert_eq!(buf.capacity(), capacity, "the caller's buffer was reused");
    assert!(c.delete(b"k").await.unwrap());
    assert!(!c.get_into(b"k", &mut buf).await.unwrap());
    assert!(buf.is_empty());
    assert!(!c.exists(b"k").await.unwrap());

    let addr = server.data_addr().to_string();
    assert!(c.ping(&addr).await.is_ok());
    assert!(matches!(c.ping("10.9.9.9:1").await, Err(Error::Config(_))));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn one_connection_carries_many_requests_at_once() {
    let server = start("").await;
    let mut config = common::client_config(&[&server]);
    config.num_connections = 1;
    let c = Client::connect(config).await.unwrap();
    // Large and small values interleaved, so answers come back in a different order.
    let values: Vec<Vec<u8>> = (0..64)
        .map(|i| pattern(if i % 8 == 0 { 3 << 20 } else { 100 + i }, i as u64))
        .collect();
    let puts = values.iter().enumerate().map(|(i, v)| {
        let c = c.clone();
        let v = v.clone();
        tokio::spawn(async move { c.put(format!("m{i}").as_bytes(), &v).await })
    });
    for p in puts.collect::<Vec<_>>() {
        p.await.unwrap().unwrap();
    }
    let gets: Vec<_> = (0..values.len())
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.get(format!("m{i}").as_bytes()).await })
        })
        .collect();
    for (i, g) in gets.into_iter().enumerate() {
        assert!(g.await.unwrap().unwrap().unwrap() == values[i], "m{i}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn batches_split_across_three_servers_by_placement() {
    let servers = [start("").await, start("").await, start("").await];
    let refs: Vec<&memkv_server::Server> = servers.iter().collect();
    let c = client(&refs).await;
    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..300u64)
        .map(|i| {
            let len = if i % 50 == 0 {
                1 << 20
            } else {
                (i as usize * 37) % 5000
            };
            (format!("batch/{i}").into_bytes(), pattern(len, i))
        })
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }

    // Every key sits on the server placement names, and only there.
    let mut expected: HashMap<String, u64> = HashMap::new();
    for (k, _) in &items {
        *expected.entry(c.owner(k).to_owned()).or_default() += 1;
    }
    assert_eq!(expected.len(), 3, "300 keys reach all three servers");
    for s in &servers {
        let addr = s.data_addr().to_string();
        let stats = c.stats(&addr).await.unwrap();
        assert_eq!(stats.blocks, expected[&addr], "blocks on {addr}");
        let only_this = client(&[s]).await;
        for (k, v) in items.iter().filter(|(k, _)| c.owner(k) == addr).take(10) {
            assert_eq!(only_this.get(k).await.unwrap().as_ref(), Some(v));
        }
    }

    let mut keys: Vec<Vec<u8>> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.push(b"batch/missing".to_vec());
    let got = c.get_batch(&keys).await;
    assert_eq!(got.len(), keys.len());
    for (i, r) in got.iter().enumerate() {
        match items.get(i) {
            Some((_, v)) => assert!(r.as_ref().unwrap().as_ref() == Some(v), "item {i}"),
            None => assert_eq!(r.as_ref().unwrap(), &None),
        }
    }
    let exists = c.exists_batch(&keys).await;
    assert!(exists[..300].iter().all(|r| *r.as_ref().unwrap()));
    assert!(!exists[300].as_ref().unwrap());

    let deleted = c.delete_batch(&keys[..150]).await;
    assert!(deleted.iter().all(|r| *r.as_ref().unwrap()));
    let exists = c.exists_batch(&keys).await;
    for (i, r) in exists.iter().enumerate() {
        assert_eq!(*r.as_ref().unwrap(), (150..300).contains(&i), "item {i}");
    }
    let again = c.delete_batch(&keys[..2]).await;
    assert!(again.iter().all(|r| !*r.as_ref().unwrap()));

    // A bad item fails alone.
    let mixed = c
        .put_batch(&[
            (vec![b'k'; 2000], b"v".to_vec()),
            (b"ok".to_vec(), b"v".to_vec()),
        ])
        .await;
    assert!(matches!(mixed[0], Err(Error::TooLarge { .. })));
    assert!(mixed[1].is_ok());
    assert!(c.get_batch::<&[u8]>(&[]).await.is_empty());
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

#[test]
fn the_blocking_client_works_without_a_runtime() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(start(""));
    let config = common::client_config(&[&server]);
    let c = memkv_client::BlockingClient::connect(config).unwrap();
    c.put(b"b", b"blocking").unwrap();
    assert_eq!(c.get(b"b").unwrap().as_deref(), Some(&b"blocking"[..]));
    assert!(c.exists(b"b").unwrap());
    let batch = c.get_batch(&[b"b".as_slice(), b"nope"]);
    assert_eq!(
        batch[0].as_ref().unwrap().as_deref(),
        Some(&b"blocking"[..])
    );
    assert!(c.delete(b"b").unwrap());
    drop(c);
    rt.block_on(server.shutdown()).unwrap();
}

#[tokio::test]
async fn get_batch_into_fills_callers_buffers_in_order_small_and_large() {
    let servers = [start("").await, start("").await];
    let refs: Vec<&memkv_server::Server> = servers.iter().collect();
    let c = client(&refs).await;
    // Small values travel in batch frames, large ones as single requests: one call mixes both.
    let lens = [10usize, 70_000, 0, 3 << 20, 4096, 200_000];
    let items: Vec<(Vec<u8>, Vec<u8>)> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| (format!("into/{i}").into_bytes(), pattern(n, i as u64)))
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    let mut keys: Vec<Vec<u8>> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.push(b"into/missing".to_vec());
    keys.push(items[5].0.clone());
    let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0xEE; n + 7]).collect();
    bufs.push(vec![0; 1 << 20]);
    bufs.push(vec![0; 100]); // too small for the 200,000-byte value
    let results = c.get_batch_into(&keys, &mut bufs).await;
    for (i, &n) in lens.iter().enumerate() {
        assert_eq!(results[i].as_ref().unwrap(), &Some(n), "item {i}");
        assert!(bufs[i][..n] == items[i].1[..], "item {i} bytes");
        assert!(
            bufs[i][n..].iter().all(|&b| b == 0xEE),
            "item {i}: nothing past the value"
        );
    }
    assert!(matches!(results[6], Ok(None)));
    assert!(
        matches!(
            results[7],
            Err(memkv_client::Error::BufferTooSmall {
                len: 200_000,
                capacity: 100
            })
        ),
        "{:?}",
        results[7]
    );
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn owned_destinations_receive_values_in_place_small_and_large() {
    let servers = [start("").await, start("").await];
    let refs: Vec<&memkv_server::Server> = servers.iter().collect();
    let c = client(&refs).await;
    let lens = [10usize, 70_000, 0, 3 << 20, 4096, 200_000];
    let items: Vec<(Vec<u8>, Vec<u8>)> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| (format!("owned/{i}").into_bytes(), pattern(n, 40 + i as u64)))
        .collect();
    for r in c.put_batch(&items).await {
        r.unwrap();
    }
    let mut keys: Vec<Vec<u8>> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.push(b"owned/missing".to_vec());
    keys.push(items[5].0.clone());
    keys.push(items[3].0.clone());
    let mut dests: Vec<Box<[u8]>> = lens
        .iter()
        .map(|&n| vec![0xEE; n + 7].into_boxed_slice())
        .collect();
    dests.push(vec![0; 1 << 20].into_boxed_slice());
    dests.push(vec![0; 100].into_boxed_slice()); // too small for 200,000 bytes, framed
    dests.push(vec![0; 1 << 20].into_boxed_slice()); // too small for 3 MiB, single
    let (results, dests) = c.get_batch_into_destinations(&keys, dests).await;
    let dests: Vec<Box<[u8]>> = dests.into_iter().map(|d| d.expect("returned")).collect();
    for (i, &n) in lens.iter().enumerate() {
        assert_eq!(results[i].as_ref().unwrap(), &Some(n), "item {i}");
        assert!(dests[i][..n] == items[i].1[..], "item {i} bytes");
        assert!(
            dests[i][n..].iter().all(|&b| b == 0xEE),
            "item {i}: nothing past the value"
        );
    }
    assert!(matches!(results[6], Ok(None)));
    for (i, len, capacity) in [(7, 200_000, 100), (8, 3 << 20, 1 << 20)] {
        assert!(
            matches!(
                results[i],
                Err(Error::BufferTooSmall { len: l, capacity: c }) if l == len && c == capacity
            ),
            "item {i}: {:?}",
            results[i]
        );
    }
    let (one, dest) = c.get_into_destination(&keys[3], vec![0u8; 4 << 20]).await;
    assert_eq!(one.unwrap(), Some(3 << 20));
    assert!(dest.unwrap()[..3 << 20] == items[3].1[..]);
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_naming_a_key_twice_stores_the_later_value() {
    let servers = [start("").await, start("").await];
    let c = client(&[&servers[0], &servers[1]]).await;
    // A large value travels alone, beside the frames of small ones, so without care the
    // earlier, larger item of a key lands last.
    let big = pattern(1 << 20, 7);
    let mut items: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for i in 0..8 {
        items.push((format!("twice/{i}").into_bytes(), big.clone()));
        items.push((format!("once/{i}").into_bytes(), pattern(100, i)));
    }
    for i in 0..8 {
        items.push((
            format!("twice/{i}").into_bytes(),
            format!("later {i}").into_bytes(),
        ));
    }
    items.push((b"grows".to_vec(), b"small first".to_vec()));
    items.push((b"grows".to_vec(), big.clone()));
    let results = c.put_batch(&items).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    for i in 0..8u64 {
        let later = c
            .get(format!("twice/{i}").as_bytes())
            .await
            .unwrap()
            .unwrap();
        assert!(
            later == format!("later {i}").as_bytes(),
            "twice/{i} holds {} bytes, not its later value",
            later.len()
        );
        let once = c.get(format!("once/{i}").as_bytes()).await.unwrap();
        assert_eq!(once, Some(pattern(100, i)));
    }
    assert!(c.get(b"grows").await.unwrap() == Some(big));
    for s in servers {
        s.shutdown().await.unwrap();
    }
}
