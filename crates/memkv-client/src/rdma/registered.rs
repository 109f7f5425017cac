//! Batches to and from a registered buffer ([`RdmaBuffer`]), given as ranges of it or as
//! slices of its memory. Each server's values move straight between the buffer and the
//! server's arena (no staging copy on the buffer's rail), all servers at once. The slice forms
//! borrow the buffer shared: calls on different parts of one buffer run side by side, as a
//! Python client's calls from several threads do.

use std::ops::Range;

use memkv_rdma::{LentPieces, LocalMemory};

use super::batch::fallen_back;
use super::buffer::RdmaBuffer;
use super::path::RdmaPath;
use super::values::Dest;
use crate::plan::{Chunk, PUT_ITEM_HEADER, Planned};
use crate::superseded::Superseded;
use crate::{Client, Error, Result};
use futures::future::join_all;

type GetResult = Result<Option<usize>>;

impl Client {
    /// Stores each `(key, range)` with the value `buf[range]`, moved straight from `buf` by
    /// RDMA WRITE (no copy) to servers its rail reaches; one result per item, in order.
    /// Without RDMA (or after `auto` fell back) the values go over TCP. A key named twice
    /// keeps its later value, as in [`Client::put_batch`].
    pub async fn put_batch_from<K: AsRef<[u8]>>(
        &self,
        buf: &RdmaBuffer,
        items: &[(K, Range<usize>)],
    ) -> Vec<Result<()>> {
        let values = items
            .iter()
            .map(|(_, range)| in_buffer(range, buf.len()).map(|()| &buf.as_slice()[range.clone()]))
            .collect();
        self.put_registered(buf, keys_of(items), values).await
    }

    /// [`Client::put_batch_from`] with each value given as a slice of `region`'s memory (a
    /// value outside it fails alone). Borrows `region` shared, so puts and gets on other parts
    /// of it may run meanwhile.
    pub async fn put_batch_in<K: AsRef<[u8]>>(
        &self,
        region: &RdmaBuffer,
        items: &[(K, &[u8])],
    ) -> Vec<Result<()>> {
        let values = items
            .iter()
            .map(|&(_, value)| inside(region, value).map(|()| value))
            .collect();
        self.put_registered(region, keys_of(items), values).await
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
    ) -> Vec<GetResult> {
        let started = tokio::time::Instant::now();
        let keys = keys_of(items);
        let inside: Vec<Result<()>> = items
            .iter()
            .map(|(_, range)| in_buffer(range, buf.len()))
            .collect();
        let ranges: Vec<Range<usize>> = items
            .iter()
            .zip(&inside)
            .map(|((_, range), ok)| if ok.is_ok() { range.clone() } else { 0..0 })
            .collect();
        let rail = buf.rail;
        match buf.buf.lend(&[ranges]) {
            Ok(mut whole) => {
                let lent = whole.pop().expect("one group asked for");
                let out = inside.into_iter().map(|r| r.err().map(Err)).collect();
                self.get_lent(&keys, lent, rail, out, started).await
            }
            Err(_) => keys
                .iter()
                .zip(inside)
                .map(|(key, inside)| {
                    inside.and_then(|()| self.check_key(key))?;
                    Err(Error::Config(
                        "get_batch_into_buffer: the items' ranges overlap".into(),
                    ))
                })
                .collect(),
        }
    }

    /// [`Client::get_batch_into_buffer`] into slices of `region`'s memory (one outside it
    /// fails alone). Borrows `region` shared, so gets and puts on other parts of it may run
    /// meanwhile.
    pub async fn get_batch_in<K: AsRef<[u8]>>(
        &self,
        region: &RdmaBuffer,
        items: &mut [(K, &mut [u8])],
    ) -> Vec<GetResult> {
        let started = tokio::time::Instant::now();
        let mut keys = Vec::with_capacity(items.len());
        let mut pieces = Vec::with_capacity(items.len());
        let mut out = Vec::with_capacity(items.len());
        for (key, piece) in items.iter_mut() {
            keys.push(K::as_ref(key));
            match inside(region, piece) {
                Ok(()) => {
                    pieces.push(&mut **piece);
                    out.push(None);
                }
                Err(e) => {
                    pieces.push(&mut []);
                    out.push(Some(Err(e)));
                }
            }
        }
        let lent = region
            .buf
            .lend_pieces(pieces)
            .expect("every piece checked inside the buffer");
        self.get_lent(&keys, lent, region.rail, out, started).await
    }

    /// Reads `keys[i]` into piece `i` of `lent` (a buffer registered on rail `rail`), except
    /// the items `out` already answers.
    async fn get_lent(
        &self,
        keys: &[&[u8]],
        mut lent: LentPieces<'_>,
        rail: usize,
        mut out: Vec<Option<GetResult>>,
        started: tokio::time::Instant,
    ) -> Vec<GetResult> {
        let mut planned = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            if out[index].is_some() {
                continue;
            }
            match self.check_key(key) {
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
            let groups: Vec<Vec<usize>> = chunks.iter().map(|c| c.items.clone()).collect();
            // Each server's values land in pieces of their own: all servers are read at once.
            let outcomes = join_all(chunks.iter().zip(lent.regroup(&groups)).map(
                |(chunk, lent)| async move {
                    let keys: Vec<&[u8]> = chunk.items.iter().map(|&i| keys[i]).collect();
                    let dest = Dest::Registered { lent, rail };
                    self.get_values_rdma(rdma, chunk.server, "get_batch", &keys, dest)
                        .await
                },
            ))
            .await;
            settle(rdma, &chunks, outcomes, &mut out, &mut planned);
        }
        if !planned.is_empty() {
            let left: Vec<&[u8]> = planned.iter().map(|p| keys[p.index]).collect();
            // Over TCP: all of them without RDMA, those it failed for within what is left.
            let values = match self.for_the_rest(started) {
                Some(rest) => rest.get_batch(&left).await,
                None => self.gets_out_of_time(left.iter().copied()),
            };
            let pieces = lent.pieces_mut();
            for (p, r) in planned.iter().zip(values) {
                let piece = &mut *pieces[p.index];
                out[p.index] = Some(self.whole_deadline(r).and_then(|v| match v {
                    None => Ok(None),
                    Some(v) if v.len() > piece.len() => Err(Error::TooLarge {
                        what: "value for the registered buffer",
                        len: v.len() as u64,
                        limit: piece.len() as u64,
                    }),
                    Some(v) => {
                        piece[..v.len()].copy_from_slice(&v);
                        Ok(Some(v.len()))
                    }
                }));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// Stores `values[i]` (slices of `region`'s memory, or why not) under `keys[i]`; a key
    /// named twice keeps its later value.
    async fn put_registered(
        &self,
        region: &RdmaBuffer,
        keys: Vec<&[u8]>,
        values: Vec<Result<&[u8]>>,
    ) -> Vec<Result<()>> {
        let valid = keys.iter().zip(&values).map(|(&key, value)| {
            let valid = value
                .as_ref()
                .is_ok_and(|v| self.check_key(key).is_ok() && self.check_value(v).is_ok());
            valid.then_some(key)
        });
        match Superseded::find(valid) {
            None => self.put_registered_distinct(region, &keys, values).await,
            Some(s) => {
                let mut values: Vec<Option<Result<&[u8]>>> = values.into_iter().map(Some).collect();
                let kept_keys = s.kept().map(|i| keys[i]).collect::<Vec<_>>();
                let kept_values = s
                    .kept()
                    .map(|i| values[i].take().expect("each item kept once"))
                    .collect();
                s.spread(
                    self.put_registered_distinct(region, &kept_keys, kept_values)
                        .await,
                )
            }
        }
    }

    /// [`Client::put_registered`] of items whose valid keys are all different.
    async fn put_registered_distinct(
        &self,
        region: &RdmaBuffer,
        keys: &[&[u8]],
        values: Vec<Result<&[u8]>>,
    ) -> Vec<Result<()>> {
        let started = tokio::time::Instant::now();
        let mut out: Vec<Option<Result<()>>> = keys.iter().map(|_| None).collect();
        let mut planned = Vec::with_capacity(keys.len());
        let mut valid: Vec<&[u8]> = Vec::with_capacity(keys.len());
        for (index, (&key, value)) in keys.iter().zip(values).enumerate() {
            let checked = value.and_then(|v| {
                self.check_key(key)?;
                self.check_value(v)?;
                Ok(v)
            });
            match checked {
                Ok(v) => {
                    planned.push(Planned {
                        index,
                        server: self.owner_index(key),
                        size: PUT_ITEM_HEADER + key.len() + v.len(),
                    });
                    valid.push(v);
                }
                Err(e) => {
                    out[index] = Some(Err(e));
                    valid.push(&[]);
                }
            }
        }
        if let Some(rdma) = self.rdma() {
            let chunks = self.chunks(&planned);
            let valid = &valid;
            let outcomes = join_all(chunks.iter().map(|chunk| async move {
                let keys: Vec<&[u8]> = chunk.items.iter().map(|&i| keys[i]).collect();
                let values: Vec<&[u8]> = chunk.items.iter().map(|&i| valid[i]).collect();
                let shared = region
                    .buf
                    .share_pieces(values.clone())
                    .expect("every value checked inside the buffer");
                let direct = Some((&shared, region.rail));
                self.put_values_rdma(rdma, chunk.server, "put_batch", &keys, &values, direct)
                    .await
            }))
            .await;
            settle(rdma, &chunks, outcomes, &mut out, &mut planned);
        }
        if !planned.is_empty() {
            let pairs: Vec<(&[u8], &[u8])> = planned
                .iter()
                .map(|p| (keys[p.index], valid[p.index]))
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
}

/// Puts each chunk's results in their items' places in `out`, then keeps in `planned` only the
/// items an RDMA failure sends over TCP.
fn settle<T>(
    rdma: &RdmaPath,
    chunks: &[Chunk],
    outcomes: Vec<Vec<Result<T>>>,
    out: &mut [Option<Result<T>>],
    planned: &mut Vec<Planned>,
) {
    for (chunk, results) in chunks.iter().zip(outcomes) {
        for (&i, r) in chunk.items.iter().zip(results) {
            out[i] = Some(r);
        }
    }
    let retry = fallen_back(rdma, out);
    planned.retain(|p| retry[p.index]);
}

fn keys_of<K: AsRef<[u8]>, V>(items: &[(K, V)]) -> Vec<&[u8]> {
    items.iter().map(|(k, _)| k.as_ref()).collect()
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

fn inside(region: &RdmaBuffer, bytes: &[u8]) -> Result<()> {
    if region.buf.holds(bytes) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{} bytes at {:#x} are not inside the registered buffer ({} bytes at {:#x})",
        bytes.len(),
        bytes.as_ptr() as usize,
        region.len(),
        LocalMemory::addr(&region.buf),
    )))
}
