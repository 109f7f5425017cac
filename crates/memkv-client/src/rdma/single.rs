//! Single puts and gets over RDMA (Allocate, RDMA WRITE, Commit; Lookup, RDMA READ,
//! Release: [`super::values`] with one value), registered buffers, and transport reports.

use super::buffer::RdmaBuffer;
use super::path::RdmaPath;
use super::rails::RailStats;
use super::values::Dest;
use crate::client::Client;
use crate::{Error, Result};

impl Client {
    /// Registers `len` bytes of memory for zero-copy [`Client::put_from`] and
    /// [`Client::get_into_buffer`]. Needs an active RDMA transport.
    pub fn register_buffer(&self, len: usize) -> Result<RdmaBuffer> {
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let (rail, buf) = rdma.register(len).map_err(|e| Error::RdmaUnavailable {
            reason: e.to_string(),
        })?;
        Ok(RdmaBuffer { rail, buf })
    }

    /// Registers memory the caller owns (an engine's host KV pool, say) as it is, for the same
    /// zero-copy [`Client::put_batch_from`] and [`Client::get_batch_into_buffer`] as
    /// [`Client::register_buffer`]'s buffers. Needs an active RDMA transport.
    pub fn register_memory(&self, memory: Box<dyn memkv_rdma::CallerMemory>) -> Result<RdmaBuffer> {
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let (rail, buf) = rdma
            .register_caller(memory)
            .map_err(|e| Error::RdmaUnavailable {
                reason: e.to_string(),
            })?;
        Ok(RdmaBuffer { rail, buf })
    }

    /// Stores `buf[..len]` under `key`, RDMA WRITE straight from the registered buffer (or through
    /// a staging buffer when the key's server uses another rail).
    pub async fn put_from(&self, key: &[u8], buf: &RdmaBuffer, len: usize) -> Result<()> {
        let value = buf.as_slice().get(..len).ok_or(Error::TooLarge {
            what: "put_from length",
            len: len as u64,
            limit: buf.len() as u64,
        })?;
        let started = tokio::time::Instant::now();
        self.check_key(key)?;
        self.check_value(value)?;
        let index = self.owner_index(key);
        let Some(rdma) = self.rdma() else {
            return self.put(key, value).await;
        };
        match self.put_rdma_from(rdma, index, key, value, Some(buf)).await {
            Err(e @ Error::Rdma { .. }) if rdma.failed(&e) => {}
            Err(e) if rdma.busy_to_tcp(&e) => {}
            done => return done,
        }
        self.in_the_rest(started, "put", key, async |c| c.put(key, value).await)
            .await
    }

    /// Reads the value under `key` into `buf` with RDMA READ straight into it; returns its
    /// length, or `None` when the key does not exist. A value longer than `buf` is `TooLarge`.
    pub async fn get_into_buffer(&self, key: &[u8], buf: &mut RdmaBuffer) -> Result<Option<usize>> {
        self.check_key(key)?;
        let index = self.owner_index(key);
        let rdma = self.rdma().ok_or_else(|| Error::RdmaUnavailable {
            reason: self
                .rdma_fallback_reason()
                .unwrap_or_else(|| "no RDMA transport".into()),
        })?;
        let rail = buf.rail;
        let whole = vec![vec![0..buf.len()]];
        let lent = buf.buf.lend(&whole).expect("the whole buffer is one piece");
        let dest = Dest::Registered {
            lent: lent.into_iter().next().expect("one group asked for"),
            rail,
        };
        one(self.get_values_rdma(rdma, index, "get", &[key], dest).await)
    }

    /// A put with the value moved by RDMA WRITE into the server's arena.
    pub(crate) async fn put_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.put_rdma_from(rdma, index, key, value, None).await
    }

    /// `value` is `registered`'s first bytes when given: written with no staging copy.
    async fn put_rdma_from(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        value: &[u8],
        registered: Option<&RdmaBuffer>,
    ) -> Result<()> {
        let shared = registered.map(|b| {
            let pieces = b.buf.share_pieces(vec![value]);
            (
                pieces.expect("the value is the buffer's first bytes"),
                b.rail,
            )
        });
        let direct = shared.as_ref().map(|(pieces, rail)| (pieces, *rail));
        one(self
            .put_values_rdma(rdma, index, "put", &[key], &[value], direct)
            .await)
    }

    /// A get with the value moved by RDMA READ from the server's arena, checked against its
    /// checksum. `Ok(false)`: no such key.
    pub(crate) async fn get_rdma(
        &self,
        rdma: &RdmaPath,
        index: usize,
        key: &[u8],
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let dest = Dest::Vecs(std::slice::from_mut(buf));
        let found = one(self.get_values_rdma(rdma, index, "get", &[key], dest).await);
        found.map(|len| len.is_some())
    }

    /// `"rdma"` while RDMA carries values (to at least one server), else `"tcp"`.
    pub fn transport(&self) -> &'static str {
        if self.rdma().is_some() { "rdma" } else { "tcp" }
    }

    /// Why values move over TCP: `transport tcp`, no usable RDMA rail at start-up, or, for
    /// 30 s after it, an `auto` client's RDMA failure with a server (one reason per server
    /// affected). `None` while RDMA carries every server's values.
    pub fn rdma_fallback_reason(&self) -> Option<String> {
        match &self.inner.rdma {
            Some(path) => path.fallback_reason(),
            None => self.inner.rdma_unavailable.clone(),
        }
    }

    /// The RDMA devices in use (empty on TCP).
    pub fn rdma_rails(&self) -> Vec<String> {
        self.rdma().map(RdmaPath::rail_names).unwrap_or_default()
    }

    /// What each rail has done: doorbells rung, bytes moved, servers it is dropped for. Empty
    /// when the client never had RDMA.
    pub fn rdma_rail_stats(&self) -> Vec<RailStats> {
        match &self.inner.rdma {
            Some(path) => path.rail_stats(&self.servers()),
            None => Vec::new(),
        }
    }
}

/// The only result of a one-value flow.
fn one<T>(results: Vec<Result<T>>) -> Result<T> {
    results
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(Error::Config("an RDMA operation produced no result".into())))
}
