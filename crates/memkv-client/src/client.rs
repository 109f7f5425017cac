//! The async client: placement, per-operation deadlines and the single-key operations.

use std::sync::Arc;
use std::time::Duration;

use memkv_proto::placement::Placement;
use memkv_proto::{Limits, Opcode};

use crate::config::ClientConfig;
use crate::conn::{CLIENT_LIMITS, CallError, Response, Sink};
use crate::local::LocalPath;
use crate::pool::ServerPool;
use crate::rdma::RdmaPath;
use crate::{Error, Result};

/// What one request sends.
pub(crate) struct Request<'a> {
    /// The operation's name in errors and metrics.
    pub op: &'static str,
    pub opcode: Opcode,
    pub key: &'a [u8],
    pub payload: &'a [&'a [u8]],
    /// The payload's checksum, when the caller has it.
    pub sum: Option<u64>,
}

pub(crate) struct Inner {
    /// Declared first: queue pairs go before the connections that keep their server ends.
    pub rdma: Option<RdmaPath>,
    /// Why there is no RDMA path (`transport tcp`, or the `auto` start-up fallback).
    pub rdma_unavailable: Option<String>,
    /// Servers on this host, reached through their shared arena (`auto` and `shm`).
    pub local: Option<LocalPath>,
    pub placement: Placement,
    pub pools: Vec<ServerPool>,
    pub limits: Limits,
}

/// A memkv client. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.servers())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client over `config.servers`. Connections open on first use, so a server that is down
    /// now only fails the operations on its keys. With feature `prometheus`, the first client
    /// in the process serves `/metrics` on `MEMKV_PROMETHEUS_BIND` when that is set.
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        if config.servers.is_empty() {
            return Err(Error::Config("the server list is empty".into()));
        }
        let rdma_config = config.clone();
        let rdma = tokio::task::spawn_blocking(move || RdmaPath::start(&rdma_config))
            .await
            .map_err(|e| Error::Config(format!("RDMA start-up panicked: {e}")))??;
        let (rdma, rdma_unavailable) = match rdma {
            Ok(path) => (Some(path), None),
            Err(reason) => (None, Some(reason)),
        };
        #[cfg(feature = "prometheus")]
        crate::metrics::serve_from_env_once().await;
        let pools = config
            .servers
            .iter()
            .map(|s| {
                ServerPool::new(
                    s.clone(),
                    config.auth_key.clone(),
                    config.payload_mac,
                    config.num_connections,
                )
            })
            .collect();
        Ok(Client {
            inner: Arc::new(Inner {
                rdma,
                rdma_unavailable,
                local: LocalPath::new(&config),
                placement: Placement::new(&config.servers),
                pools,
                limits: CLIENT_LIMITS,
            }),
            timeout: config.timeout,
        })
    }

    /// A client from `MEMKV_CONFIG` and the `MEMKV_*` environment.
    pub async fn from_env() -> Result<Client> {
        Client::connect(ClientConfig::from_env()?).await
    }

    /// The same client with another per-operation deadline.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            inner: Arc::clone(&self.inner),
            timeout,
        }
    }

    /// The per-operation deadline.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The servers, as configured.
    pub fn servers(&self) -> Vec<&str> {
        self.inner.pools.iter().map(|p| p.server()).collect()
    }

    /// The server that owns `key`.
    pub fn owner(&self, key: &[u8]) -> &str {
        self.inner.pools[self.owner_index(key)].server()
    }

    pub(crate) fn owner_index(&self, key: &[u8]) -> usize {
        self.inner
            .placement
            .owner(key)
            .expect("a client always has at least one server")
    }

    pub(crate) fn server_index(&self, server: &str) -> Result<usize> {
        self.inner
            .pools
            .iter()
            .position(|p| p.server() == server)
            .ok_or_else(|| {
                Error::Config(format!(
                    "server {server:?} is not in the client's server list"
                ))
            })
    }

    pub(crate) fn check_key(&self, key: &[u8]) -> Result<()> {
        let limit = self.inner.limits.max_key_len;
        // An empty key is refused here too: a server refuses it (BadRequest), but one that
        // cannot be reached would be reported instead, and a batch's answer says less.
        if key.is_empty() || key.len() > limit {
            return Err(Error::TooLarge {
                what: "key",
                len: key.len() as u64,
                limit: limit as u64,
            });
        }
        Ok(())
    }

    pub(crate) fn check_value(&self, value: &[u8]) -> Result<()> {
        let limit = self.inner.limits.max_value_len;
        if value.len() as u64 > limit {
            return Err(Error::TooLarge {
                what: "value",
                len: value.len() as u64,
                limit,
            });
        }
        Ok(())
    }

    /// One request to server `index` within the deadline. A request that never reached the
    /// server (its pooled connection had just closed) is retried once on a fresh connection.
    /// `buf` is reused for the response payload.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exchange(
        &self,
        index: usize,
        op: &'static str,
        opcode: Opcode,
        key: &[u8],
        payload: &[&[u8]],
        sum: Option<u64>,
        buf: Vec<u8>,
    ) -> Result<Response> {
        let request = Request {
            op,
            opcode,
            key,
            payload,
            sum,
        };
        self.exchange_to(index, request, Sink::Buffer(buf)).await
    }

    /// Like [`Client::exchange`], with the response payload going to `sink`.
    pub(crate) async fn exchange_to(
        &self,
        index: usize,
        request: Request<'_>,
        sink: Sink,
    ) -> Result<Response> {
        self.exchange_keeping_sink(index, request, sink).await.0
    }

    /// [`Self::exchange_to`], giving `sink` back when the call failed before the request
    /// handed it to a connection's reader (no connection, or the request was never sent).
    /// A request not sent is retried once on a fresh connection, with the same sink.
    pub(crate) async fn exchange_keeping_sink(
        &self,
        index: usize,
        request: Request<'_>,
        sink: Sink,
    ) -> (Result<Response>, Option<Sink>) {
        let Request {
            op,
            opcode,
            key,
            payload,
            sum,
        } = request;
        let pool = &self.inner.pools[index];
        let started = tokio::time::Instant::now();
        let mut slot = Some(sink);
        // Whether the deadline found the request on a connection (not still dialling).
        let on_a_connection = std::sync::atomic::AtomicBool::new(false);
        let attempt = async {
            let mut retried = false;
            loop {
                let conn = pool.connection().await?;
                on_a_connection.store(true, std::sync::atomic::Ordering::Relaxed);
                let sink = slot.take().expect("the sink is back for every try");
                match conn.call(opcode, key, payload, sum, sink).await {
                    Ok(response) => return Ok(response),
                    Err(CallError::NotSent(e, back)) => {
                        slot = back;
                        if retried || slot.is_none() {
                            return Err(e);
                        }
                        retried = true;
                    }
                    Err(e) => return Err(e.into_error()),
                }
            }
        };
        let result = tokio::time::timeout(self.timeout, attempt)
            .await
            .map_err(|_| {
                if on_a_connection.load(std::sync::atomic::Ordering::Relaxed) {
                    pool.request_unanswered(self.timeout);
                }
                Error::Timeout {
                    server: pool.server().to_owned(),
                    op,
                    after: self.timeout,
                }
            })
            .and_then(|r| r);
        crate::metrics::request(op, result.as_ref().map(drop), started.elapsed());
        if let Ok(r) = &result {
            let sent: usize = payload.iter().map(|p| p.len()).sum();
            let landed = r.direct.as_ref().and_then(|(_, len)| *len).unwrap_or(0);
            crate::metrics::bytes(sent, r.payload.len() + landed);
        }
        (result, slot)
    }

    /// `work` under the per-operation deadline.
    pub(crate) async fn within<T>(
        &self,
        server: &str,
        op: &'static str,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                server: server.to_owned(),
                op,
                after: self.timeout,
            })?
    }

    /// The RDMA path while it carries values.
    pub(crate) fn rdma(&self) -> Option<&RdmaPath> {
        self.inner.rdma.as_ref().filter(|r| r.active())
    }

    pub(crate) fn server_name(&self, index: usize) -> &str {
        self.inner.pools[index].server()
    }
}
