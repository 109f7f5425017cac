//! The client's operations, served through shared memory for the servers attached. Each
//! returns, per item, `Some(result)` when it was served here (or, under `transport: shm`,
//! failed here) and `None` for items the caller sends on to RDMA or TCP: other servers',
//! invalid ones (whose errors the usual path names), and those a failed mapping hit under
//! `auto` (the server is detached first).

use std::sync::Arc;

use super::attach::Attached;
use super::values::LocalDest;
use crate::client::Client;
use crate::{Error, Result};
use futures::future::join_all;

/// Under `auto`, the smallest value a put sends through shared memory. A shared-memory put is
/// two round trips (Allocate, Commit) around a `memcpy`, a TCP put one round trip and two kernel
/// copies: below this the second round trip costs more than the copies save (on loopback, 2
/// cores: 64 KiB puts 47 us against TCP's 38 us at p50, 128 KiB 50 against 55; docs/benchmarks.md).
const LOCAL_PUT_MIN: usize = 128 << 10;
/// Under `auto`, the smallest caller buffer a get reads into through shared memory. A get's
/// value size is not known before it is looked up; a buffer of the engine's block size says
/// it, and so does a reused vector's capacity (what it last held). Lookup and Release cost a
/// get more than Allocate and Commit a put (256 KiB gets 89 us against TCP's 68, 512 KiB 115
/// against 114, 1 MiB 138 against 202). A new vector says nothing: its get goes through
/// shared memory, the faster way for the blocks of megabytes engines usually move.
const LOCAL_GET_MIN: usize = 512 << 10;

/// One item's destination in a batch get.
pub(crate) enum ItemDest<'a> {
    Vec(&'a mut Vec<u8>),
    Slice(&'a mut [u8]),
}

impl Client {
    /// Keeps `result`, unless a failed mapping under `auto` sends the item elsewhere.
    fn settle<T>(&self, index: usize, at: &Arc<Attached>, result: Result<T>) -> Option<Result<T>> {
        let local = self.inner.local.as_ref()?;
        match &result {
            // A failed mapping (a restarted server's old arena, most likely) is let go either
            // way; under `shm` the item fails, and the next operation attaches afresh.
            Err(Error::SharedMemory { reason, .. }) => {
                local.detach(index, at, reason);
                local.strict().then_some(result)
            }
            // The server is gone (stopped, restarting): its arena is let go, not kept mapped
            // for as long as this client lives; a server back on its feet is attached anew.
            Err(e @ (Error::Unreachable { .. } | Error::Disconnected { .. })) => {
                local.detach(index, at, &e.to_string());
                Some(result)
            }
            _ => Some(result),
        }
    }

    /// Groups `owners` (per item, its server when the item is valid) by attached server;
    /// items of servers that cannot be attached under `shm` get the error in `out`. Under
    /// `auto`, items that `worth_it` turns down are left for TCP or RDMA, and do not make
    /// their server attach: a hung server then costs them one deadline, not an attach's too.
    async fn attached_groups<T>(
        &self,
        op: &'static str,
        owners: &[Option<usize>],
        worth_it: impl Fn(usize) -> bool,
        out: &mut [Option<Result<T>>],
    ) -> Vec<(usize, Arc<Attached>, Vec<usize>)> {
        let Some(local) = self.inner.local.as_ref() else {
            return Vec::new();
        };
        let strict = local.strict();
        let owners: Vec<Option<usize>> = owners
            .iter()
            .enumerate()
            .map(|(item, &owner)| owner.filter(|_| strict || worth_it(item)))
            .collect();
        if owners.iter().all(Option::is_none) {
            return Vec::new();
        }
        let arenas = self.local_arenas(owners.iter().flatten().copied()).await;
        let mut groups: Vec<Option<(Arc<Attached>, Vec<usize>)>> =
            (0..arenas.len()).map(|_| None).collect();
        for (item, owner) in owners.iter().enumerate() {
            let Some(server) = *owner else { continue };
            match &arenas[server] {
                Some(Ok(Some(at))) => groups[server]
                    .get_or_insert_with(|| (Arc::clone(at), Vec::new()))
                    .1
                    .push(item),
                // A timeout while attaching is the caller's operation's.
                Some(Err(e)) => out[item] = Some(Err(super::values::named(e.clone(), op))),
                _ => {}
            }
        }
        groups
            .into_iter()
            .enumerate()
            .filter_map(|(server, g)| g.map(|(at, items)| (server, at, items)))
            .collect()
    }

    /// Stores the items whose servers are attached.
    pub(crate) async fn put_batch_local<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        op: &'static str,
        items: &[(K, V)],
    ) -> Vec<Option<Result<()>>> {
        let mut out: Vec<Option<Result<()>>> = items.iter().map(|_| None).collect();
        let owners: Vec<Option<usize>> = items
            .iter()
            .map(|(k, v)| {
                let (k, v) = (k.as_ref(), v.as_ref());
                (self.check_key(k).is_ok() && self.check_value(v).is_ok())
                    .then(|| self.owner_index(k))
            })
            .collect();
        let worth_it = |i: usize| items[i].1.as_ref().len() >= LOCAL_PUT_MIN;
        let groups = self.attached_groups(op, &owners, worth_it, &mut out).await;
        let done = join_all(groups.iter().map(|(server, at, chosen)| async move {
            let keys: Vec<&[u8]> = chosen.iter().map(|&i| items[i].0.as_ref()).collect();
            let values: Vec<&[u8]> = chosen.iter().map(|&i| items[i].1.as_ref()).collect();
            self.put_values_local(at, *server, op, &keys, &values).await
        }))
        .await;
        for ((server, at, chosen), results) in groups.iter().zip(done) {
            for (&i, r) in chosen.iter().zip(results) {
                out[i] = self.settle(*server, at, r);
            }
        }
        out
    }

    /// Reads the values of the keys whose servers are attached into their destinations.
    pub(crate) async fn get_batch_local<K: AsRef<[u8]>>(
        &self,
        op: &'static str,
        keys: &[K],
        dests: Vec<ItemDest<'_>>,
    ) -> Vec<Option<Result<Option<usize>>>> {
        let mut out: Vec<Option<Result<Option<usize>>>> = keys.iter().map(|_| None).collect();
        let owners: Vec<Option<usize>> = keys
            .iter()
            .map(|k| {
                let k = k.as_ref();
                self.check_key(k).is_ok().then(|| self.owner_index(k))
            })
            .collect();
        let worth_it = |i: usize| match &dests[i] {
            ItemDest::Vec(v) => v.capacity() == 0 || v.capacity() >= LOCAL_GET_MIN,
            ItemDest::Slice(s) => s.len() >= LOCAL_GET_MIN,
        };
        let groups = self.attached_groups(op, &owners, worth_it, &mut out).await;
        if groups.is_empty() {
            return out;
        }
        let mut dests: Vec<Option<ItemDest<'_>>> = dests.into_iter().map(Some).collect();
        let work: Vec<_> = groups
            .iter()
            .map(|(server, at, chosen)| {
                let taken: Vec<ItemDest<'_>> = chosen
                    .iter()
                    .map(|&i| dests[i].take().expect("an item is in one group"))
                    .collect();
                let dest = if taken.iter().all(|d| matches!(d, ItemDest::Vec(_))) {
                    LocalDest::Vecs(
                        taken
                            .into_iter()
                            .filter_map(|d| match d {
                                ItemDest::Vec(v) => Some(v),
                                ItemDest::Slice(_) => None,
                            })
                            .collect(),
                    )
                } else {
                    LocalDest::Slices(
                        taken
                            .into_iter()
                            .map(|d| match d {
                                ItemDest::Vec(v) => v.as_mut_slice(),
                                ItemDest::Slice(s) => s,
                            })
                            .collect(),
                    )
                };
                let chosen_keys: Vec<&[u8]> = chosen.iter().map(|&i| keys[i].as_ref()).collect();
                async move {
                    self.get_values_local(at, *server, op, &chosen_keys, dest)
                        .await
                }
            })
            .collect();
        let done = join_all(work).await;
        for ((server, at, chosen), results) in groups.iter().zip(done) {
            for (&i, r) in chosen.iter().zip(results) {
                out[i] = self.settle(*server, at, r);
            }
        }
        out
    }

    /// A single put through shared memory, or `None` to serve it another way.
    pub(crate) async fn put_local(&self, key: &[u8], value: &[u8]) -> Option<Result<()>> {
        self.inner.local.as_ref()?;
        self.put_batch_local("put", &[(key, value)])
            .await
            .pop()
            .flatten()
    }

    /// A single get through shared memory, or `None` to serve it another way.
    pub(crate) async fn get_local(
        &self,
        key: &[u8],
        dest: ItemDest<'_>,
    ) -> Option<Result<Option<usize>>> {
        self.inner.local.as_ref()?;
        self.get_batch_local("get", &[key], vec![dest])
            .await
            .pop()
            .flatten()
    }

    /// The servers values move to and from through shared memory now.
    pub fn shared_memory_servers(&self) -> Vec<String> {
        match &self.inner.local {
            Some(local) => local
                .attached(&self.servers())
                .into_iter()
                .map(str::to_owned)
                .collect(),
            None => Vec::new(),
        }
    }
}
