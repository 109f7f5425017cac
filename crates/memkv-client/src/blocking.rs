//! A blocking wrapper for callers without an async runtime: the same client, driven by a
//! small runtime of its own.

use std::time::Duration;

use memkv_proto::messages::StatsResponse;

use crate::{Client, ClientConfig, Error, Result};

/// Worker threads of the wrapper's runtime (connection readers run there between calls).
const WORKER_THREADS: usize = 2;

/// A [`Client`] with blocking methods. Do not call these from inside an async runtime.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl std::fmt::Debug for BlockingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingClient")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl BlockingClient {
    /// A client over `config`; see [`Client::connect`].
    pub fn connect(config: ClientConfig) -> Result<BlockingClient> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("memkv-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Io {
                context: "cannot start the client runtime".into(),
                source: std::sync::Arc::new(e),
            })?;
        let client = runtime.block_on(Client::connect(config))?;
        Ok(BlockingClient { runtime, client })
    }

    /// A client from `MEMKV_CONFIG` and the `MEMKV_*` environment.
    pub fn from_env() -> Result<BlockingClient> {
        BlockingClient::connect(ClientConfig::from_env()?)
    }

    /// The async client inside (shares connections).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Changes the per-operation deadline.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.client = self.client.with_timeout(timeout);
    }

    /// The server that owns `key`.
    pub fn owner(&self, key: &[u8]) -> &str {
        self.client.owner(key)
    }

    /// See [`Client::put`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.runtime.block_on(self.client.put(key, value))
    }

    /// See [`Client::get`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.runtime.block_on(self.client.get(key))
    }

    /// See [`Client::get_into`].
    pub fn get_into(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        self.runtime.block_on(self.client.get_into(key, buf))
    }

    /// See [`Client::delete`].
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.runtime.block_on(self.client.delete(key))
    }

    /// See [`Client::exists`].
    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        self.runtime.block_on(self.client.exists(key))
    }

    /// See [`Client::put_batch`].
    pub fn put_batch<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, items: &[(K, V)]) -> Vec<Result<()>> {
        self.runtime.block_on(self.client.put_batch(items))
    }

    /// See [`Client::get_batch`].
    pub fn get_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.runtime.block_on(self.client.get_batch(keys))
    }

    /// See [`Client::exists_batch`].
    pub fn exists_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<bool>> {
        self.runtime.block_on(self.client.exists_batch(keys))
    }

    /// See [`Client::delete_batch`].
    pub fn delete_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<bool>> {
        self.runtime.block_on(self.client.delete_batch(keys))
    }

    /// See [`Client::ping`].
    pub fn ping(&self, server: &str) -> Result<Duration> {
        self.runtime.block_on(self.client.ping(server))
    }

    /// See [`Client::stats`].
    pub fn stats(&self, server: &str) -> Result<StatsResponse> {
        self.runtime.block_on(self.client.stats(server))
    }
}
