use super::*;
use proptest::prelude::*;

fn planned(servers: &[usize], size: usize) -> Vec<Planned> {
    servers
        .iter()
        .enumerate()
        .map(|(index, &server)| Planned {
            index,
            server,
            size,
        })
        .collect()
}

#[test]
fn groups_by_server_keeping_order() {
    let chunks = plan_chunks(&planned(&[0, 1, 0, 2, 1, 0], 10), 3, 100, 1 << 20);
    assert_eq!(
        chunks,
        vec![
            Chunk {
                server: 0,
                items: vec![0, 2, 5]
            },
            Chunk {
                server: 1,
                items: vec![1, 4]
            },
            Chunk {
                server: 2,
                items: vec![3]
            },
        ]
    );
}

#[test]
fn cuts_at_the_item_limit() {
    let chunks = plan_chunks(&planned(&[0; 7], 10), 1, 3, 1 << 20);
    let sizes: Vec<usize> = chunks.iter().map(|c| c.items.len()).collect();
    assert_eq!(sizes, vec![3, 3, 1]);
    assert_eq!(chunks[1].items, vec![3, 4, 5]);
}

#[test]
fn cuts_at_the_byte_limit_counting_the_prefix() {
    // 4-byte prefix + 3 items of 32 = 100: fits exactly; a fourth does not.
    let chunks = plan_chunks(&planned(&[0; 4], 32), 1, 100, 100);
    let sizes: Vec<usize> = chunks.iter().map(|c| c.items.len()).collect();
    assert_eq!(sizes, vec![3, 1]);
}

#[test]
fn an_empty_batch_has_no_chunks() {
    assert!(plan_chunks(&[], 3, 10, 100).is_empty());
}

proptest! {
    #[test]
    fn every_item_lands_once_within_limits(
        owners in proptest::collection::vec(0usize..4, 0..300),
        sizes in proptest::collection::vec(1usize..50, 300),
        max_items in 1usize..20,
    ) {
        let items: Vec<Planned> = owners
            .iter()
            .enumerate()
            .map(|(index, &server)| Planned { index, server, size: sizes[index] })
            .collect();
        let max_bytes = 200;
        let chunks = plan_chunks(&items, 4, max_items, max_bytes);
        let mut seen = vec![0; items.len()];
        for c in &chunks {
            prop_assert!(!c.items.is_empty() && c.items.len() <= max_items);
            let bytes: usize = BATCH_PREFIX + c.items.iter().map(|&i| sizes[i]).sum::<usize>();
            prop_assert!(bytes <= max_bytes);
            prop_assert!(c.items.windows(2).all(|w| w[0] < w[1]));
            for &i in &c.items {
                prop_assert_eq!(owners[i], c.server);
                seen[i] += 1;
            }
        }
        prop_assert!(seen.iter().all(|&n| n == 1));
    }
}

#[tokio::test]
async fn tcp_frames_of_large_values_spread_while_rdma_chunks_keep_the_frame_limit() {
    let mut config =
        crate::ClientConfig::new(["127.0.0.1:1"], memkv_proto::AuthKey::from_bytes([7; 32]));
    config.transport = crate::Transport::Tcp;
    let client = Client::connect(config).await.unwrap();
    // Eight 4 MiB values for one server: about 8 MiB per TCP frame, one frame otherwise.
    let items = planned(&[0; 8], PUT_ITEM_HEADER + 8 + (4 << 20));
    let tcp = client.tcp_chunks(&items);
    assert!(tcp.len() >= 4, "{tcp:?}");
    assert!(
        tcp.iter()
            .all(|c| c.items.len() * (4 << 20) <= TCP_CHUNK_TARGET),
        "{tcp:?}"
    );
    assert_eq!(client.chunks(&items).len(), 1);
    // A value larger than the target still travels, alone.
    let big = planned(&[0; 2], PUT_ITEM_HEADER + 8 + (32 << 20));
    assert_eq!(client.tcp_chunks(&big).len(), 2);
}
