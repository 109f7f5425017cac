//! Batch operations: items are grouped by owning server, each server's share is cut into
//! frames within the batch limits, and all frames run at once. Results come back in the
//! caller's order, one per item.

use memkv_proto::batch;
use memkv_proto::{Opcode, ProtoError, Status};

use crate::by_server::{deal, gather};
use crate::destination::{Found, copy_into, copy_verified_into};
use crate::local::routes::ItemDest;
use crate::plan::{
    BATCH_PREFIX, Chunk, GET_ITEM_ANSWER_HEADER, KEY_ITEM_HEADER, PUT_ITEM_HEADER, Planned,
    SINGLE_VALUE_MIN,
};
use crate::superseded::Superseded;
use crate::{Client, Error, Result};
use futures::future::join_all;
use tokio::time::Instant;

/// Spreads chunk outcomes over the per-item results; a failed chunk fails each of its items.
fn scatter<T>(
    chunks: &[Chunk],
    outcomes: Vec<Result<Vec<Result<T>>>>,
    out: &mut [Option<Result<T>>],
) {
    for (chunk, outcome) in chunks.iter().zip(outcomes) {
        match outcome {
            Ok(items) => {
                for (&i, r) in chunk.items.iter().zip(items) {
                    out[i] = Some(r);
                }
            }
            Err(e) => {
                for &i in &chunk.items {
                    out[i] = Some(Err(e.clone()));
                }
            }
        }
    }
}

fn item_error(client: &Client, server: usize, status: Status) -> Error {
    Error::from_status(
        client.server_name(server),
        status,
        b"batch item refused by the server",
    )
}

impl Client {
    fn plan_keys<K: AsRef<[u8]>, T>(
        &self,
        keys: &[K],
        out: &mut [Option<Result<T>>],
    ) -> Vec<Chunk> {
        let mut planned = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            let key = key.as_ref();
            match self.check_key(key) {
                Ok(()) => planned.push(Planned {
                    index,
                    server: self.owner_index(key),
                    size: KEY_ITEM_HEADER + key.len(),
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        self.chunks(&planned)
    }

    /// Stores every `(key, value)`; one result per item, in order. A key named twice keeps its
    /// later value, as puts made one after another would: the earlier item is not sent and
    /// shares the later one's result.
    pub async fn put_batch<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        items: &[(K, V)],
    ) -> Vec<Result<()>> {
        let keys = items.iter().map(|(k, v)| {
            let (k, v) = (k.as_ref(), v.as_ref());
            (self.check_key(k).is_ok() && self.check_value(v).is_ok()).then_some(k)
        });
        match Superseded::find(keys) {
            None => self.put_batch_distinct(items).await,
            Some(s) => {
                let kept: Vec<(&[u8], &[u8])> = s
                    .kept()
                    .map(|i| (items[i].0.as_ref(), items[i].1.as_ref()))
                    .collect();
                s.spread(self.put_batch_distinct(&kept).await)
            }
        }
    }

    /// [`Client::put_batch`] of items whose valid keys are all different: each server's
    /// items on their own (`by_server.rs`).
    pub(crate) async fn put_batch_distinct<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        items: &[(K, V)],
    ) -> Vec<Result<()>> {
        let Some(groups) = self.server_groups(items.iter().map(|(k, _)| k.as_ref())) else {
            return self.put_batch_two_step(items).await;
        };
        let done = join_all(groups.iter().map(|group| async move {
            let sub: Vec<(&[u8], &[u8])> = group
                .iter()
                .map(|&i| (items[i].0.as_ref(), items[i].1.as_ref()))
                .collect();
            self.put_batch_two_step(&sub).await
        }))
        .await;
        gather(items.len(), &groups, done)
    }

    /// Through shared memory, then the rest over RDMA or TCP within what is left of the
    /// deadline.
    async fn put_batch_two_step<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        items: &[(K, V)],
    ) -> Vec<Result<()>> {
        let started = Instant::now();
        let mut out = self.put_batch_local("put_batch", items).await;
        let rest: Vec<usize> = (0..items.len()).filter(|&i| out[i].is_none()).collect();
        if !rest.is_empty() {
            let pairs: Vec<(&[u8], &[u8])> = rest
                .iter()
                .map(|&i| (items[i].0.as_ref(), items[i].1.as_ref()))
                .collect();
            let results: Vec<Result<()>> = match self.for_the_rest(started) {
                Some(c) => c.put_batch_remote(&pairs).await,
                None => pairs
                    .iter()
                    .map(|&(k, v)| {
                        self.check_value(v)
                            .and_then(|()| self.out_of_time("put_batch", k))
                    })
                    .collect(),
            };
            for (&i, r) in rest.iter().zip(results) {
                out[i] = Some(self.whole_deadline(r));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// [`Client::put_batch`] over RDMA or TCP.
    async fn put_batch_remote<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        items: &[(K, V)],
    ) -> Vec<Result<()>> {
        let started = Instant::now();
        let mut out: Vec<Option<Result<()>>> = (0..items.len()).map(|_| None).collect();
        let mut planned = Vec::with_capacity(items.len());
        for (index, (key, value)) in items.iter().enumerate() {
            let (key, value) = (key.as_ref(), value.as_ref());
            match self.check_key(key).and_then(|()| self.check_value(value)) {
                Ok(()) => planned.push(Planned {
                    index,
                    server: self.owner_index(key),
                    size: PUT_ITEM_HEADER + key.len() + value.len(),
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        let rdma = self.rdma();
        let singles: Vec<usize> = match rdma {
            Some(_) => Vec::new(),
            None => planned
                .iter()
                .filter(|p| items[p.index].1.as_ref().len() >= SINGLE_VALUE_MIN)
                .map(|p| p.index)
                .collect(),
        };
        let mut single = vec![false; items.len()];
        for &i in &singles {
            single[i] = true;
        }
        let framed: Vec<Planned> = planned
            .iter()
            .filter(|p| !single[p.index])
            .copied()
            .collect();
        let chunks = match rdma {
            Some(_) => self.chunks(&framed),
            None => self.tcp_chunks(&framed),
        };
        let (outcomes, single_results) = tokio::join!(
            async {
                match rdma {
                    Some(rdma) => self.put_chunks_rdma(rdma, &chunks, items).await,
                    None => join_all(chunks.iter().map(|c| self.put_chunk(c, items))).await,
                }
            },
            join_all(singles.iter().map(|&i| {
                let (key, value) = &items[i];
                self.put(key.as_ref(), value.as_ref())
            }))
        );
        scatter(&chunks, outcomes, &mut out);
        for (&i, r) in singles.iter().zip(single_results) {
            out[i] = Some(r);
        }
        if let Some(rdma) = rdma {
            // `auto` after an RDMA failure: those items again, over TCP.
            let retry = crate::rdma::batch::fallen_back(rdma, &out);
            let planned: Vec<Planned> = planned.into_iter().filter(|p| retry[p.index]).collect();
            // Within what is left of the deadline.
            match self.for_the_rest(started) {
                Some(rest) => {
                    let chunks = rest.tcp_chunks(&planned);
                    let outcomes = join_all(chunks.iter().map(|c| rest.put_chunk(c, items))).await;
                    scatter(&chunks, outcomes, &mut out);
                    self.name_the_whole_deadline(&planned, &mut out);
                }
                None => {
                    for p in &planned {
                        out[p.index] =
                            Some(self.out_of_time("put_batch", items[p.index].0.as_ref()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    async fn put_chunk<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        chunk: &Chunk,
        items: &[(K, V)],
    ) -> Result<Vec<Result<()>>> {
        // Item headers and keys go in one small buffer; values are written from the caller's
        // slices.
        let mut meta = Vec::with_capacity(
            BATCH_PREFIX
                + chunk
                    .items
                    .iter()
                    .map(|&i| PUT_ITEM_HEADER + items[i].0.as_ref().len())
                    .sum::<usize>(),
        );
        meta.extend_from_slice(&(chunk.items.len() as u32).to_le_bytes());
        let mut ends = Vec::with_capacity(chunk.items.len());
        for &i in &chunk.items {
            let (key, value) = (items[i].0.as_ref(), items[i].1.as_ref());
            meta.extend_from_slice(&(key.len() as u16).to_le_bytes());
            meta.extend_from_slice(&(value.len() as u32).to_le_bytes());
            meta.extend_from_slice(&memkv_proto::checksum::of(value).to_le_bytes());
            meta.extend_from_slice(key);
            ends.push(meta.len());
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + 2 * chunk.items.len());
        parts.push(&meta[..BATCH_PREFIX]);
        let mut start = BATCH_PREFIX;
        for (&i, &end) in chunk.items.iter().zip(&ends) {
            parts.push(&meta[start..end]);
            parts.push(items[i].1.as_ref());
            start = end;
        }
        // The frame checksum leaves the values out (`memkv_proto::coverage`; this client's
        // sessions are all version 2, it refuses any other): it is the hash of `meta`, which
        // holds everything else in order.
        let sum = memkv_proto::coverage::items_checksum(&meta);
        let statuses = self
            .status_batch(chunk, "put_batch", Opcode::BatchPut, &parts, Some(sum))
            .await?;
        Ok(statuses
            .into_iter()
            .map(|s| match s {
                Status::Ok => Ok(()),
                s => Err(item_error(self, chunk.server, s)),
            })
            .collect())
    }

    /// Sends one batch whose answer is a status list, checking it has one status per item.
    async fn status_batch(
        &self,
        chunk: &Chunk,
        op: &'static str,
        opcode: Opcode,
        payload: &[&[u8]],
        sum: Option<u64>,
    ) -> Result<Vec<Status>> {
        let r = self
            .exchange(chunk.server, op, opcode, &[], payload, sum, Vec::new())
            .await?;
        let server = self.server_name(chunk.server);
        if r.status != Status::Ok {
            return Err(Error::from_status(server, r.status, &r.payload));
        }
        let protocol = |source| Error::Protocol {
            server: server.to_owned(),
            source,
        };
        let statuses = batch::decode_statuses(&r.payload, &self.inner.limits).map_err(protocol)?;
        if statuses.len() != chunk.items.len() {
            return Err(protocol(count_mismatch(statuses.len(), chunk.items.len())));
        }
        Ok(statuses)
    }

    async fn key_batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        op: &'static str,
        opcode: Opcode,
    ) -> Vec<Result<bool>> {
        let mut out: Vec<Option<Result<bool>>> = (0..keys.len()).map(|_| None).collect();
        let chunks = self.plan_keys(keys, &mut out);
        let outcomes = join_all(chunks.iter().map(|chunk| async move {
            let payload = encode_chunk_keys(chunk, keys);
            let statuses = self
                .status_batch(chunk, op, opcode, &[&payload], None)
                .await?;
            Ok(statuses
                .into_iter()
                .map(|s| match s {
                    Status::Ok => Ok(true),
                    Status::NotFound => Ok(false),
                    s => Err(item_error(self, chunk.server, s)),
                })
                .collect())
        }))
        .await;
        scatter(&chunks, outcomes, &mut out);
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// Whether each key exists; one result per key, in order.
    pub async fn exists_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<bool>> {
        self.key_batch(keys, "exists_batch", Opcode::BatchExists)
            .await
    }

    /// Removes each key; each result says whether the key existed.
    pub async fn delete_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<bool>> {
        self.key_batch(keys, "delete_batch", Opcode::BatchDelete)
            .await
    }

    /// The value of each key (`None` when absent); one result per key, in order. A value the
    /// server could not fit in a batch answer (`TooLarge`) is fetched on its own.
    pub async fn get_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        let Some(groups) = self.server_groups(keys.iter().map(AsRef::as_ref)) else {
            return self.get_batch_two_step(keys).await;
        };
        let done = join_all(groups.iter().map(|group| async move {
            let sub: Vec<&[u8]> = group.iter().map(|&i| keys[i].as_ref()).collect();
            self.get_batch_two_step(&sub).await
        }))
        .await;
        gather(keys.len(), &groups, done)
    }

    /// [`Client::get_batch`] through shared memory, then the rest over RDMA or TCP within
    /// what is left of the deadline.
    async fn get_batch_two_step<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        let started = Instant::now();
        let mut vecs: Vec<Vec<u8>> = keys.iter().map(|_| Vec::new()).collect();
        let local = self
            .get_batch_local(
                "get_batch",
                keys,
                vecs.iter_mut().map(ItemDest::Vec).collect(),
            )
            .await;
        if local.iter().all(Option::is_none) {
            return self.get_batch_remote(keys).await;
        }
        let rest: Vec<usize> = (0..keys.len()).filter(|&i| local[i].is_none()).collect();
        let rest_keys: Vec<&[u8]> = rest.iter().map(|&i| keys[i].as_ref()).collect();
        let remote = match self.for_the_rest(started) {
            Some(c) => c.get_batch_remote(&rest_keys).await,
            None => self.gets_out_of_time(rest_keys.iter().copied()),
        };
        let mut remote = remote.into_iter().map(|r| self.whole_deadline(r));
        local
            .into_iter()
            .zip(vecs)
            .map(|(served, v)| match served {
                Some(r) => r.map(|len| len.map(|_| v)),
                None => remote.next().expect("one answer per key sent on"),
            })
            .collect()
    }

    /// [`Client::get_batch`] over RDMA or TCP.
    async fn get_batch_remote<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        let started = Instant::now();
        let mut out: Vec<Option<Result<Option<Vec<u8>>>>> = (0..keys.len()).map(|_| None).collect();
        let chunks = self.plan_keys(keys, &mut out);
        let rdma = self.rdma();
        let outcomes = match rdma {
            Some(rdma) => self.get_chunks_rdma(rdma, &chunks, keys).await,
            None => join_all(chunks.iter().map(|c| self.get_chunk(c, keys))).await,
        };
        scatter(&chunks, outcomes, &mut out);
        if let Some(rdma) = rdma {
            // `auto` after an RDMA failure: those keys again, over TCP.
            let retry = crate::rdma::batch::fallen_back(rdma, &out);
            let planned: Vec<Planned> = chunks
                .iter()
                .flat_map(|c| c.items.iter().map(|&index| (c.server, index)))
                .filter(|&(_, index)| retry[index])
                .map(|(server, index)| Planned {
                    index,
                    server,
                    size: KEY_ITEM_HEADER + keys[index].as_ref().len(),
                })
                .collect();
            // Within what is left of the deadline.
            match self.for_the_rest(started) {
                Some(rest) => {
                    let chunks = rest.chunks(&planned);
                    let outcomes = join_all(chunks.iter().map(|c| rest.get_chunk(c, keys))).await;
                    scatter(&chunks, outcomes, &mut out);
                    self.name_the_whole_deadline(&planned, &mut out);
                }
                None => {
                    for p in &planned {
                        out[p.index] = Some(self.out_of_time("get_batch", keys[p.index].as_ref()));
                    }
                }
            }
        }
        let retry: Vec<usize> = out
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                matches!(
                    r,
                    Some(Err(Error::Server {
                        status: Status::TooLarge,
                        ..
                    }))
                )
            })
            .map(|(i, _)| i)
            .collect();
        for (i, r) in retry.iter().zip(self.refetch(started, &retry, keys).await) {
            out[*i] = Some(r);
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// Like [`Client::get_batch`], but each value is copied straight from the server's answer
    /// into `bufs[i]` (one buffer per key, caller-owned; no `Vec` per value). Each result is the
    /// value's length, `None` for a miss, or [`Error::BufferTooSmall`] naming both sizes. A
    /// buffer whose result is an error holds nothing to use (a value that failed its checksum
    /// may have been copied into it: values are checked as they are copied).
    pub async fn get_batch_into<K: AsRef<[u8]>, B: AsMut<[u8]>>(
        &self,
        keys: &[K],
        bufs: &mut [B],
    ) -> Vec<Result<Option<usize>>> {
        assert_eq!(keys.len(), bufs.len(), "get_batch_into: one buffer per key");
        let Some(groups) = self.server_groups(keys.iter().map(AsRef::as_ref)) else {
            return self.get_batch_into_two_step(keys, bufs).await;
        };
        let by_group = deal(bufs.iter_mut().map(AsMut::as_mut), &groups);
        let done = join_all(
            groups
                .iter()
                .zip(by_group)
                .map(|(group, mut sub_bufs)| async move {
                    let sub_keys: Vec<&[u8]> = group.iter().map(|&i| keys[i].as_ref()).collect();
                    self.get_batch_into_two_step(&sub_keys, &mut sub_bufs).await
                }),
        )
        .await;
        gather(keys.len(), &groups, done)
    }

    /// [`Client::get_batch_into`] through shared memory, then the rest over RDMA or TCP
    /// within what is left of the deadline.
    async fn get_batch_into_two_step<K: AsRef<[u8]>, B: AsMut<[u8]>>(
        &self,
        keys: &[K],
        bufs: &mut [B],
    ) -> Vec<Result<Option<usize>>> {
        let started = Instant::now();
        let mut local = self
            .get_batch_local(
                "get_batch",
                keys,
                bufs.iter_mut()
                    .map(|b| ItemDest::Slice(b.as_mut()))
                    .collect(),
            )
            .await;
        if local.iter().any(Option::is_some) {
            let rest: Vec<usize> = (0..keys.len()).filter(|&i| local[i].is_none()).collect();
            if !rest.is_empty() {
                let rest_keys: Vec<&[u8]> = rest.iter().map(|&i| keys[i].as_ref()).collect();
                let mut rest_bufs: Vec<&mut [u8]> = Vec::with_capacity(rest.len());
                let mut wanted = rest.iter().peekable();
                for (i, b) in bufs.iter_mut().enumerate() {
                    if wanted.next_if(|&&w| w == i).is_some() {
                        rest_bufs.push(b.as_mut());
                    }
                }
                let results = match self.for_the_rest(started) {
                    Some(c) => c.get_batch_into_remote(&rest_keys, &mut rest_bufs).await,
                    None => self.gets_out_of_time(rest_keys.iter().copied()),
                };
                for (&i, r) in rest.iter().zip(results) {
                    local[i] = Some(self.whole_deadline(r));
                }
            }
            return local
                .into_iter()
                .map(|r| r.expect("every key answered"))
                .collect();
        }
        self.get_batch_into_remote(keys, bufs).await
    }

    /// [`Client::get_batch_into`] over RDMA or TCP.
    async fn get_batch_into_remote<K: AsRef<[u8]>, B: AsMut<[u8]>>(
        &self,
        keys: &[K],
        bufs: &mut [B],
    ) -> Vec<Result<Option<usize>>> {
        let started = Instant::now();
        if self.rdma().is_some() {
            // The RDMA path lands values in registered staging first; copy from there.
            let values = self.get_batch(keys).await;
            return values
                .into_iter()
                .zip(bufs.iter_mut())
                .map(|(r, buf)| r.and_then(|v| v.map(|v| copy_into(&v, buf.as_mut())).transpose()))
                .collect();
        }
        let mut out: Vec<Option<Result<Option<usize>>>> = (0..keys.len()).map(|_| None).collect();
        // The buffers bound the answer's size: plan frames by it, so large values spread
        // over the connections instead of filling one frame.
        let mut planned = Vec::with_capacity(keys.len());
        for (index, (key, buf)) in keys.iter().zip(bufs.iter_mut()).enumerate() {
            let key = key.as_ref();
            match self.check_key(key) {
                Ok(()) => planned.push(Planned {
                    index,
                    server: self.owner_index(key),
                    size: GET_ITEM_ANSWER_HEADER + key.len() + buf.as_mut().len(),
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        let (singles, framed): (Vec<Planned>, Vec<Planned>) = planned
            .into_iter()
            .partition(|p| bufs[p.index].as_mut().len() >= SINGLE_VALUE_MIN);
        let chunks = self.tcp_chunks(&framed);
        let (answers, single_values) = tokio::join!(
            join_all(chunks.iter().map(|c| self.fetch_chunk(c, keys))),
            join_all(singles.iter().map(|p| self.get(keys[p.index].as_ref())))
        );
        for (p, r) in singles.iter().zip(single_values) {
            let buf = bufs[p.index].as_mut();
            out[p.index] = Some(r.and_then(|v| v.map(|v| copy_into(&v, buf)).transpose()));
        }
        let outcomes = chunks
            .iter()
            .zip(answers)
            .map(|(chunk, answer)| {
                let payload = answer?;
                self.decode_chunk(chunk, &payload, |i, value, checksum| {
                    copy_verified_into(value, checksum, bufs[i].as_mut())
                })
            })
            .collect();
        scatter(&chunks, outcomes, &mut out);
        let retry: Vec<usize> = (0..keys.len())
            .filter(|&i| {
                matches!(
                    out[i],
                    Some(Err(Error::Server {
                        status: Status::TooLarge,
                        ..
                    }))
                )
            })
            .collect();
        for (&i, one) in retry.iter().zip(self.refetch(started, &retry, keys).await) {
            out[i] = Some(one.and_then(|v| v.map(|v| copy_into(&v, bufs[i].as_mut())).transpose()));
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// The values of `keys[i]` for each `i` in `which` that did not fit a batch answer, each
    /// fetched on its own, all at once, within what is left of the batch's deadline (begun at
    /// `started`).
    async fn refetch<K: AsRef<[u8]>>(
        &self,
        started: Instant,
        which: &[usize],
        keys: &[K],
    ) -> Vec<Result<Option<Vec<u8>>>> {
        if which.is_empty() {
            return Vec::new();
        }
        let Some(rest) = self.for_the_rest(started) else {
            return self.gets_out_of_time(which.iter().map(|&i| keys[i].as_ref()));
        };
        let rest = &rest;
        join_all(
            which
                .iter()
                .map(|&i| async move { self.whole_deadline(rest.get(keys[i].as_ref()).await) }),
        )
        .await
    }

    async fn get_chunk<K: AsRef<[u8]>>(
        &self,
        chunk: &Chunk,
        keys: &[K],
    ) -> Result<Vec<Result<Option<Vec<u8>>>>> {
        let payload = self.fetch_chunk(chunk, keys).await?;
        self.decode_chunk(chunk, &payload, |_, value, checksum| {
            memkv_proto::checksum::verify(value, checksum).map_err(Found::Corrupt)?;
            Ok(value.to_vec())
        })
    }

    /// Sends one BatchGet and returns its verified answer payload.
    async fn fetch_chunk<K: AsRef<[u8]>>(&self, chunk: &Chunk, keys: &[K]) -> Result<Vec<u8>> {
        let payload = encode_chunk_keys(chunk, keys);
        let r = self
            .exchange(
                chunk.server,
                "get_batch",
                Opcode::BatchGet,
                &[],
                &[&payload],
                None,
                Vec::new(),
            )
            .await?;
        if r.status != Status::Ok {
            let server = self.server_name(chunk.server);
            return Err(Error::from_status(server, r.status, &r.payload));
        }
        Ok(r.payload)
    }

    /// Decodes a BatchGet answer and hands each found value to `found` with the caller's
    /// index of its key and the value's checksum, which `found` checks (while it copies the
    /// value out, where it does).
    fn decode_chunk<T>(
        &self,
        chunk: &Chunk,
        payload: &[u8],
        mut found: impl FnMut(usize, &[u8], u64) -> std::result::Result<T, Found>,
    ) -> Result<Vec<Result<Option<T>>>> {
        let server = self.server_name(chunk.server);
        let protocol = |source| Error::Protocol {
            server: server.to_owned(),
            source,
        };
        let items = batch::decode_get_response(payload, &self.inner.limits).map_err(protocol)?;
        if items.len() != chunk.items.len() {
            return Err(protocol(count_mismatch(items.len(), chunk.items.len())));
        }
        Ok(items
            .into_iter()
            .zip(&chunk.items)
            .map(|(item, &index)| match item.status {
                Status::Ok => match found(index, item.value, item.checksum) {
                    Ok(value) => Ok(Some(value)),
                    Err(Found::Corrupt(e)) => Err(protocol(e)),
                    Err(Found::Refused(e)) => Err(e),
                },
                Status::NotFound => Ok(None),
                s => Err(item_error(self, chunk.server, s)),
            })
            .collect())
    }
}

fn encode_chunk_keys<K: AsRef<[u8]>>(chunk: &Chunk, keys: &[K]) -> Vec<u8> {
    let chosen: Vec<&[u8]> = chunk.items.iter().map(|&i| keys[i].as_ref()).collect();
    batch::encode_keys(&chosen)
}

fn count_mismatch(got: usize, sent: usize) -> ProtoError {
    ProtoError::BadRequest(format!(
        "batch answer has {got} items for a request of {sent}"
    ))
}
