//! Batches over RDMA: each server's share (cut into chunks within the batch limits, as over
//! TCP) goes through `rdma_flow`, so its values move in a few chains of work requests instead
//! of one operation per value. Under `auto` the items an RDMA failure hit are retried over TCP
//! (which then carries values for a while, [`super::fallback`]); under `rdma` their errors are
//! the caller's.

use super::path::RdmaPath;
use super::values::Dest;
use crate::plan::Chunk;
use crate::{Client, Error, Result};
use futures::future::join_all;

impl Client {
    /// `put_batch`'s chunks over RDMA; one outcome per chunk, as the TCP path gives.
    pub(crate) async fn put_chunks_rdma<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        rdma: &RdmaPath,
        chunks: &[Chunk],
        items: &[(K, V)],
    ) -> Vec<Result<Vec<Result<()>>>> {
        join_all(chunks.iter().map(|chunk| async move {
            let keys: Vec<&[u8]> = chunk.items.iter().map(|&i| items[i].0.as_ref()).collect();
            let values: Vec<&[u8]> = chunk.items.iter().map(|&i| items[i].1.as_ref()).collect();
            Ok(self
                .put_values_rdma(rdma, chunk.server, "put_batch", &keys, &values, None)
                .await)
        }))
        .await
    }

    /// `get_batch`'s chunks over RDMA.
    pub(crate) async fn get_chunks_rdma<K: AsRef<[u8]>>(
        &self,
        rdma: &RdmaPath,
        chunks: &[Chunk],
        keys: &[K],
    ) -> Vec<Result<Vec<Result<Option<Vec<u8>>>>>> {
        join_all(chunks.iter().map(|chunk| async move {
            let chosen: Vec<&[u8]> = chunk.items.iter().map(|&i| keys[i].as_ref()).collect();
            let mut vecs = vec![Vec::new(); chosen.len()];
            let found = self
                .get_values_rdma(
                    rdma,
                    chunk.server,
                    "get_batch",
                    &chosen,
                    Dest::Vecs(&mut vecs),
                )
                .await;
            Ok(found
                .into_iter()
                .zip(vecs)
                .map(|(r, v)| r.map(|len| len.map(|_| v)))
                .collect())
        }))
        .await
    }
}

/// Which items failed over RDMA in a way that sends them to TCP: under `auto`, an RDMA
/// failure (which sends values over TCP for a while, logged once) or a Busy server (staging
/// full: that item only); never under `rdma`.
pub(crate) fn fallen_back<T>(rdma: &RdmaPath, out: &[Option<Result<T>>]) -> Vec<bool> {
    out.iter()
        .map(|r| match r {
            Some(Err(e @ Error::Rdma { .. })) => rdma.failed(e),
            Some(Err(e)) => rdma.busy_to_tcp(e),
            _ => false,
        })
        .collect()
}
