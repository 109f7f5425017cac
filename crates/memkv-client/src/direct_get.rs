//! Gets whose values are read from the socket straight into caller-owned memory
//! ([`ReadDestination`]), for bindings whose buffers can travel with their requests.

use memkv_proto::{Opcode, Status};

use crate::by_server::{deal, gather};
use crate::client::Request;
use crate::conn::Sink;
use crate::destination::copy_into;
use crate::destination::{ReadDestination, unbox};
use crate::local::routes::ItemDest;
use crate::plan::SINGLE_VALUE_MIN;
use crate::{Client, Result};

/// Lends a destination's bytes to the borrowing batch path.
struct Lent<'a, D>(&'a mut D);

impl<D: ReadDestination> AsMut<[u8]> for Lent<'_, D> {
    fn as_mut(&mut self) -> &mut [u8] {
        self.0.as_mut_bytes()
    }
}

impl Client {
    /// Reads the value under `key` into the front of `dest`: its length, `None` when the key is
    /// absent, or [`Error::BufferTooSmall`](crate::Error::BufferTooSmall). Over TCP the value is
    /// read from the socket into `dest` with no copy. `dest` comes back, except when the call
    /// failed after the request was sent (its deadline, a lost connection, or an answer that
    /// failed its checks while being read into it); then it is dropped once no read can write
    /// into it any more, which is at once if its value was arriving ([`ReadDestination`]).
    pub async fn get_into_destination<D: ReadDestination>(
        &self,
        key: &[u8],
        mut dest: D,
    ) -> (Result<Option<usize>>, Option<D>) {
        if let Err(e) = self.check_key(key) {
            return (Err(e), Some(dest));
        }
        if let Some(done) = self
            .get_local(key, ItemDest::Slice(dest.as_mut_bytes()))
            .await
        {
            return (done, Some(dest));
        }
        if self.rdma().is_some() {
            // RDMA lands values in registered staging memory; from there they are copied.
            let result = self.get_into_slice(key, dest.as_mut_bytes()).await;
            return (result, Some(dest));
        }
        let index = self.owner_index(key);
        let request = Request {
            op: "get",
            opcode: Opcode::TcpGet,
            key,
            payload: &[],
            sum: None,
        };
        let (response, back) = self
            .exchange_keeping_sink(index, request, Sink::Direct(Box::new(dest)))
            .await;
        let back = || match back {
            Some(Sink::Direct(boxed)) => Some(unbox::<D>(boxed)),
            _ => None,
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => return (Err(e), back()),
        };
        let Some((boxed, landed)) = response.direct else {
            return (
                Err(crate::Error::Disconnected {
                    server: self.server_name(index).to_owned(),
                    reason: "an answer came back without its destination".into(),
                }),
                back(),
            );
        };
        let mut dest = unbox::<D>(boxed);
        let result = match (response.status, landed) {
            (Status::Ok, Some(len)) => Ok(Some(len)),
            (Status::Ok, None) => copy_into(&response.payload, dest.as_mut_bytes()).map(Some),
            (Status::NotFound, _) => Ok(None),
            _ => Err(crate::Error::from_status(
                self.server_name(index),
                response.status,
                &response.payload,
            )),
        };
        (result, Some(dest))
    }

    /// [`Client::get_batch_into`] over owned destinations: values that travel as single requests
    /// (destinations of at least 64 KiB) are read from the socket straight into them; smaller
    /// ones are copied out of their batch answers. Returns one result per key and the
    /// destinations (each `None` only if its deadline passed while the reader held it).
    pub async fn get_batch_into_destinations<K: AsRef<[u8]>, D: ReadDestination>(
        &self,
        keys: &[K],
        dests: Vec<D>,
    ) -> (Vec<Result<Option<usize>>>, Vec<Option<D>>) {
        assert_eq!(keys.len(), dests.len(), "one destination per key");
        let Some(groups) = self.server_groups(keys.iter().map(AsRef::as_ref)) else {
            return self.get_batch_into_destinations_two_step(keys, dests).await;
        };
        let by_group = deal(dests, &groups);
        let done = futures::future::join_all(groups.iter().zip(by_group).map(
            |(group, sub_dests)| async move {
                let sub_keys: Vec<&[u8]> = group.iter().map(|&i| keys[i].as_ref()).collect();
                let (results, back) = self
                    .get_batch_into_destinations_two_step(&sub_keys, sub_dests)
                    .await;
                results.into_iter().zip(back).collect::<Vec<_>>()
            },
        ))
        .await;
        gather(keys.len(), &groups, done).into_iter().unzip()
    }

    /// [`Client::get_batch_into_destinations`] through shared memory, then the rest over RDMA
    /// or TCP within what is left of the deadline.
    async fn get_batch_into_destinations_two_step<K: AsRef<[u8]>, D: ReadDestination>(
        &self,
        keys: &[K],
        dests: Vec<D>,
    ) -> (Vec<Result<Option<usize>>>, Vec<Option<D>>) {
        let started = tokio::time::Instant::now();
        let mut dests: Vec<D> = dests;
        let mut out = self
            .get_batch_local(
                "get_batch",
                keys,
                dests
                    .iter_mut()
                    .map(|d| ItemDest::Slice(d.as_mut_bytes()))
                    .collect(),
            )
            .await;
        let mut dests: Vec<Option<D>> = dests.into_iter().map(Some).collect();
        let rest: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        if !rest.is_empty() {
            let rest_keys: Vec<&[u8]> = rest.iter().map(|&i| keys[i].as_ref()).collect();
            let rest_dests: Vec<D> = rest
                .iter()
                .map(|&i| dests[i].take().expect("each destination is taken once"))
                .collect();
            let (results, back) = match self.for_the_rest(started) {
                Some(c) => c.get_batch_into_owned(&rest_keys, rest_dests).await,
                None => (
                    self.gets_out_of_time(rest_keys.iter().copied()),
                    rest_dests.into_iter().map(Some).collect(),
                ),
            };
            for ((&i, r), d) in rest.iter().zip(results).zip(back) {
                out[i] = Some(self.whole_deadline(r));
                dests[i] = d;
            }
        }
        let results = out
            .into_iter()
            .map(|r| r.expect("every key answered"))
            .collect();
        (results, dests)
    }

    /// [`Client::get_batch_into_destinations`] over RDMA or TCP.
    async fn get_batch_into_owned<K: AsRef<[u8]>, D: ReadDestination>(
        &self,
        keys: &[K],
        dests: Vec<D>,
    ) -> (Vec<Result<Option<usize>>>, Vec<Option<D>>) {
        let mut dests: Vec<Option<D>> = dests.into_iter().map(Some).collect();
        if self.rdma().is_some() {
            let mut lent: Vec<Lent<'_, D>> = dests.iter_mut().flatten().map(Lent).collect();
            let results = self.get_batch_into(keys, &mut lent).await;
            return (results, dests);
        }
        let (single, framed): (Vec<usize>, Vec<usize>) = (0..keys.len()).partition(|&i| {
            dests[i]
                .as_mut()
                .is_some_and(|d| d.as_mut_bytes().len() >= SINGLE_VALUE_MIN)
        });
        let single_dests: Vec<D> = single
            .iter()
            .map(|&i| dests[i].take().expect("each destination is taken once"))
            .collect();
        let framed_keys: Vec<&[u8]> = framed.iter().map(|&i| keys[i].as_ref()).collect();
        let mut lent: Vec<Lent<'_, D>> = dests.iter_mut().flatten().map(Lent).collect();
        let (framed_results, single_outcomes) = tokio::join!(
            self.get_batch_into(&framed_keys, &mut lent),
            futures::future::join_all(
                single
                    .iter()
                    .zip(single_dests)
                    .map(|(&i, d)| self.get_into_destination(keys[i].as_ref(), d))
            )
        );
        let mut results: Vec<Option<Result<Option<usize>>>> =
            (0..keys.len()).map(|_| None).collect();
        for (&i, r) in framed.iter().zip(framed_results) {
            results[i] = Some(r);
        }
        for (&i, (r, d)) in single.iter().zip(single_outcomes) {
            results[i] = Some(r);
            dests[i] = d;
        }
        let results = results
            .into_iter()
            .map(|r| r.expect("every key answered"))
            .collect();
        (results, dests)
    }
}
