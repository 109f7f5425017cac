//! Batches over RDMA: each server's share (cut into chunks within the batch limits, as over
//! TCP) goes through `rdma_flow`, so its values move in a few chains of work requests instead
//! of one operation per value. Under `auto` the items an RDMA failure hit are retried over TCP
//! (which then carries values for a while, [`super::fallback`]); under `rdma` their errors are
//! the caller's.

use std::ops::Range;

use super::buffer::RdmaBuffer;
use super::path::RdmaPath;
use super::values::Dest;
use crate::plan::{Chunk, PUT_ITEM_HEADER, Planned};
use crate::superseded::Superseded;
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

    /// Stores each `(key, range)` with the value `buf[range]`, moved straight from `buf` by
    /// RDMA WRITE (no copy) to servers its rail reaches; one result per item, in order.
    /// Without RDMA (or after `auto` fell back) the values go over TCP. A key named twice
    /// keeps its later value, as in [`Client::put_batch`].
    pub async fn put_batch_from<K: AsRef<[u8]>>(
        &self,
        buf: &RdmaBuffer,
        items: &[(K, Range<usize>)],
    ) -> Vec<Result<()>> {
        let keys = items.iter().map(|(key, range)| {
            let key = key.as_ref();
            let valid = in_buffer(range, buf.len()).is_ok()
                && self.check_key(key).is_ok()
                && self.check_value(&buf.as_slice()[range.clone()]).is_ok();
            valid.then_some(key)
        });
        match Superseded::find(keys) {
            None => self.put_batch_from_distinct(buf, items).await,
            Some(s) => {
                let kept: Vec<(&[u8], Range<usize>)> = s
                    .kept()
                    .map(|i| (items[i].0.as_ref(), items[i].1.clone()))
                    .collect();
                s.spread(self.put_batch_from_distinct(buf, &kept).await)
            }
        }
    }

    /// [`Client::put_batch_from`] of items whose valid keys are all different.
    async fn put_batch_from_distinct<K: AsRef<[u8]>>(
        &self,
        buf: &RdmaBuffer,
        items: &[(K, Range<usize>)],
    ) -> Vec<Result<()>> {
        let started = tokio::time::Instant::now();
        let mut out: Vec<Option<Result<()>>> = items.iter().map(|_| None).collect();
        let mut planned = Vec::with_capacity(items.len());
        for (index, (key, range)) in items.iter().enumerate() {
            let key = key.as_ref();
            let checked = in_buffer(range, buf.len())
                .and_then(|()| self.check_key(key))
                .and_then(|()| self.check_value(&buf.as_slice()[range.clone()]));
            match checked {
                Ok(()) => planned.push(Planned {
                    index,
                    server: self.owner_index(key),
                    size: PUT_ITEM_HEADER + key.len() + range.len(),
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        if let Some(rdma) = self.rdma() {
            let chunks = self.chunks(&planned);
            let outcomes = join_all(chunks.iter().map(|chunk| async move {
                let keys: Vec<&[u8]> = chunk.items.iter().map(|&i| items[i].0.as_ref()).collect();
                let values: Vec<&[u8]> = chunk
                    .items
                    .iter()
                    .map(|&i| &buf.as_slice()[items[i].1.clone()])
                    .collect();
                let bases: Vec<usize> = chunk.items.iter().map(|&i| items[i].1.start).collect();
                let direct = Some((buf, &bases[..]));
                self.put_values_rdma(rdma, chunk.server, "put_batch", &keys, &values, direct)
                    .await
            }))
            .await;
            for (chunk, results) in chunks.iter().zip(outcomes) {
                for (&i, r) in chunk.items.iter().zip(results) {
                    out[i] = Some(r);
                }
            }
            let retry = fallen_back(rdma, &out);
            planned.retain(|p| retry[p.index]);
        }
        if !planned.is_empty() {
            let pairs: Vec<(&[u8], &[u8])> = planned
                .iter()
                .map(|p| {
                    let (key, range) = &items[p.index];
                    (key.as_ref(), &buf.as_slice()[range.clone()])
                })
                .collect();
            // Over TCP: all of them without RDMA, those it failed for within what is left.
            let results = match self.for_the_rest(started) {
                Some(rest) => rest.put_batch_distinct(&pairs).await,
                None => pairs
                    .iter()
                    .map(|(k, _)| self.out_of_time("put_batch", k))
                    .collect(),
            };
            for (p, r) in planned.iter().zip(results) {
                out[p.index] = Some(self.whole_deadline(r));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// Reads each key's value into `buf[range]` (from its start) by RDMA READ straight into
    /// `buf` on its rail; per item the value's length, or `None` when the key does not exist.
    /// Ranges must lie inside `buf` and not overlap; a value longer than its range is
    /// `TooLarge`. All servers are read at once, each into its own pieces of `buf`; without
    /// RDMA the values come over TCP and are copied in.
    pub async fn get_batch_into_buffer<K: AsRef<[u8]>>(
        &self,
        buf: &mut RdmaBuffer,
        items: &[(K, Range<usize>)],
    ) -> Vec<Result<Option<usize>>> {
        let started = tokio::time::Instant::now();
        let mut out: Vec<Option<Result<Option<usize>>>> = items.iter().map(|_| None).collect();
        let mut planned = Vec::with_capacity(items.len());
        let bases: Vec<usize> = items.iter().map(|(_, r)| r.start).collect();
        let caps: Vec<usize> = items.iter().map(|(_, r)| r.len()).collect();
        let inside: Vec<Result<()>> = items
            .iter()
            .map(|(_, range)| in_buffer(range, buf.len()))
            .collect();
        let valid_caps: Vec<usize> = caps
            .iter()
            .zip(&inside)
            .map(|(&cap, ok)| if ok.is_ok() { cap } else { 0 })
            .collect();
        let valid: Vec<Range<usize>> = bases
            .iter()
            .zip(&valid_caps)
            .map(|(&b, &c)| b..b + c)
            .collect();
        let disjoint = buf.buf.lend(&[valid]).is_ok();
        for ((index, (key, _)), inside) in items.iter().enumerate().zip(inside) {
            let key = key.as_ref();
            let checked = inside.and_then(|()| self.check_key(key));
            let checked = checked.and_then(|()| {
                if disjoint {
                    Ok(())
                } else {
                    Err(Error::Config(
                        "get_batch_into_buffer: the items' ranges overlap".into(),
                    ))
                }
            });
            match checked {
                Ok(()) => planned.push(Planned {
                    index,
                    server: self.owner_index(key),
                    size: key.len(),
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        if let Some(rdma) = self.rdma() {
            let chunks = self.chunks(&planned);
            let groups: Vec<Vec<Range<usize>>> = chunks
                .iter()
                .map(|c| {
                    c.items
                        .iter()
                        .map(|&i| bases[i]..bases[i] + caps[i])
                        .collect()
                })
                .collect();
            let rail = buf.rail;
            let lent = buf
                .buf
                .lend(&groups)
                .expect("ranges checked disjoint and inside");
            // Each server's values land in pieces of their own: all servers are read at once.
            let outcomes = join_all(chunks.iter().zip(lent).map(|(chunk, lent)| async move {
                let keys: Vec<&[u8]> = chunk.items.iter().map(|&i| items[i].0.as_ref()).collect();
                let dest = Dest::Registered { lent, rail };
                self.get_values_rdma(rdma, chunk.server, "get_batch", &keys, dest)
                    .await
            }))
            .await;
            for (chunk, results) in chunks.iter().zip(outcomes) {
                for (&i, r) in chunk.items.iter().zip(results) {
                    out[i] = Some(r);
                }
            }
            let retry = fallen_back(rdma, &out);
            planned.retain(|p| retry[p.index]);
        }
        if !planned.is_empty() {
            let keys: Vec<&[u8]> = planned.iter().map(|p| items[p.index].0.as_ref()).collect();
            // Over TCP: all of them without RDMA, those it failed for within what is left.
            let values = match self.for_the_rest(started) {
                Some(rest) => rest.get_batch(&keys).await,
                None => self.gets_out_of_time(keys.iter().copied()),
            };
            for (p, r) in planned.iter().zip(values) {
                out[p.index] = Some(self.whole_deadline(r).and_then(|v| match v {
                    None => Ok(None),
                    Some(v) if v.len() > caps[p.index] => Err(Error::TooLarge {
                        what: "value for the registered buffer",
                        len: v.len() as u64,
                        limit: caps[p.index] as u64,
                    }),
                    Some(v) => {
                        buf.as_mut_slice()[bases[p.index]..][..v.len()].copy_from_slice(&v);
                        Ok(Some(v.len()))
                    }
                }));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }
}

fn in_buffer(range: &Range<usize>, len: usize) -> Result<()> {
    if range.start > range.end || range.end > len {
        return Err(Error::TooLarge {
            what: "range end in the registered buffer",
            len: range.end.max(range.start) as u64,
            limit: len as u64,
        });
    }
    Ok(())
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
