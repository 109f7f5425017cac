//! Batches in two steps, server by server. A batch first moves what it can through shared
//! memory (servers on this host), then sends the rest over RDMA or TCP. Run over the whole
//! batch, the second step waited for the first on every server: one hung same-host server
//! held the healthy servers' TCP items back for its whole deadline, and its own TCP items
//! then waited out a second one. Each server's items now take both steps on their own, all
//! servers at once, and the second step gets what is left of the deadline. So does the way
//! around RDMA (to TCP, under `auto`), for batches and single operations alike.

use std::time::Duration;

use tokio::time::Instant;

use crate::{Client, Error, Result};

impl Client {
    /// The batch's item positions grouped by owning server (each group in the caller's order;
    /// items with an invalid key join the first group, whose path reports them), or `None`
    /// when the batch goes in one piece: no shared-memory step, or one server named.
    pub(crate) fn server_groups<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Vec<Vec<usize>>> {
        self.inner.local.as_ref()?;
        let mut by_server: Vec<Vec<usize>> = vec![Vec::new(); self.inner.pools.len()];
        let mut unowned = Vec::new();
        for (i, key) in keys.enumerate() {
            match self.check_key(key) {
                Ok(()) => by_server[self.owner_index(key)].push(i),
                Err(_) => unowned.push(i),
            }
        }
        let mut groups: Vec<Vec<usize>> = by_server.into_iter().filter(|g| !g.is_empty()).collect();
        if groups.len() < 2 {
            return None;
        }
        groups[0].extend(unowned);
        groups[0].sort_unstable();
        Some(groups)
    }

    /// The client for a batch's second step, begun at `started`, with what is left of the
    /// deadline; `None` once nothing is.
    pub(crate) fn for_the_rest(&self, started: Instant) -> Option<Client> {
        let left = self.timeout.checked_sub(started.elapsed())?;
        (left > Duration::ZERO).then(|| self.with_timeout(left))
    }

    /// The way around for an operation begun at `started` whose first path fell through (RDMA
    /// under `auto`, a failed copy through shared memory): `then` on a client with what is left
    /// of the deadline, a timeout naming the whole deadline; when nothing is left, `key`'s
    /// timeout without sending. The way around used to get a whole deadline of its own, so an
    /// RDMA failure after a wait cost the caller up to two.
    pub(crate) async fn in_the_rest<T>(
        &self,
        started: Instant,
        op: &'static str,
        key: &[u8],
        then: impl AsyncFnOnce(&Client) -> Result<T>,
    ) -> Result<T> {
        match self.for_the_rest(started) {
            Some(rest) => self.whole_deadline(then(&rest).await),
            None => self.out_of_time(op, key),
        }
    }

    /// [`Self::whole_deadline`] for the results of `planned`'s items in `out`.
    pub(crate) fn name_the_whole_deadline<T>(
        &self,
        planned: &[crate::plan::Planned],
        out: &mut [Option<Result<T>>],
    ) {
        for p in planned {
            out[p.index] = out[p.index].take().map(|r| self.whole_deadline(r));
        }
    }

    /// A second step's result, its timeout named after the operation's whole deadline.
    pub(crate) fn whole_deadline<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| match e {
            Error::Timeout { server, op, .. } => Error::Timeout {
                server,
                op,
                after: self.timeout,
            },
            other => other,
        })
    }

    /// [`Self::out_of_time`] for each key of a batch get.
    pub(crate) fn gets_out_of_time<'a, T>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<Result<T>> {
        keys.into_iter()
            .map(|k| self.out_of_time("get_batch", k))
            .collect()
    }

    /// The result of an item whose second step had no time left: its key's own error, or a
    /// timeout naming its server. Nothing is sent.
    pub(crate) fn out_of_time<T>(&self, op: &'static str, key: &[u8]) -> Result<T> {
        self.check_key(key)?;
        Err(Error::Timeout {
            server: self.owner(key).to_owned(),
            op,
            after: self.timeout,
        })
    }
}

/// `items` (one per item of the batch) dealt into `groups`.
pub(crate) fn deal<T>(items: impl IntoIterator<Item = T>, groups: &[Vec<usize>]) -> Vec<Vec<T>> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    groups
        .iter()
        .map(|group| {
            group
                .iter()
                .map(|&i| slots[i].take().expect("each item is in one group"))
                .collect()
        })
        .collect()
}

/// One result per item of the whole batch, from each group's results (in group order).
pub(crate) fn gather<T>(len: usize, groups: &[Vec<usize>], done: Vec<Vec<T>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = (0..len).map(|_| None).collect();
    for (group, results) in groups.iter().zip(done) {
        for (&i, r) in group.iter().zip(results) {
            out[i] = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.expect("every item is in one group"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn client(timeout: Duration) -> Client {
        let mut config =
            crate::ClientConfig::new(["127.0.0.1:1"], memkv_proto::AuthKey::from_bytes([7; 32]));
        config.transport = crate::Transport::Tcp;
        config.timeout = timeout;
        Client::connect(config).await.unwrap()
    }

    /// The way around gets what is left of the deadline, and its timeout names the whole one.
    #[tokio::test]
    async fn the_way_around_gets_what_is_left_of_the_deadline() {
        let deadline = Duration::from_millis(100);
        let c = client(deadline).await;
        let started = Instant::now() - Duration::from_millis(40);
        let r: Result<()> = c
            .in_the_rest(started, "put", b"k", async |rest| {
                assert!(
                    rest.timeout() <= Duration::from_millis(60),
                    "{:?}",
                    rest.timeout()
                );
                Err(Error::Timeout {
                    server: "s".into(),
                    op: "put",
                    after: rest.timeout(),
                })
            })
            .await;
        assert!(
            matches!(r, Err(Error::Timeout { after, .. }) if after == deadline),
            "{r:?}"
        );
        let spent = Instant::now() - deadline;
        let r: Result<()> = c
            .in_the_rest(spent, "put", b"k", async |_| {
                panic!("sent with no time left")
            })
            .await;
        assert!(
            matches!(r, Err(Error::Timeout { after, op: "put", .. }) if after == deadline),
            "{r:?}"
        );
        let r: Result<()> = c.in_the_rest(spent, "put", b"", async |_| Ok(())).await;
        assert!(matches!(r, Err(Error::TooLarge { len: 0, .. })), "{r:?}");
    }
}
