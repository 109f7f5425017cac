//! Single-key operations: through shared memory for servers on this host, over RDMA when the
//! client has it (falling back to TCP as `auto` says), else one TCP request each; plus ping
//! and stats.

use std::time::Duration;

use memkv_proto::messages::StatsResponse;
use memkv_proto::{Opcode, ProtoError, Status};

use crate::client::Client;
use crate::conn::Response;
use crate::destination::copy_into;
use crate::local::routes::ItemDest;
use crate::{Error, Result};
use tokio::time::Instant;

impl Client {
    fn refused(&self, index: usize, response: &Response) -> Error {
        Error::from_status(self.server_name(index), response.status, &response.payload)
    }

    /// Stores `value` under `key`, replacing any value.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let started = Instant::now();
        self.check_key(key)?;
        self.check_value(value)?;
        if let Some(done) = self.put_local(key, value).await {
            return done;
        }
        let index = self.owner_index(key);
        if let Some(rdma) = self.rdma() {
            match self.put_rdma(rdma, index, key, value).await {
                Err(e @ Error::Rdma { .. }) if rdma.failed(&e) => {}
                Err(e) if rdma.busy_to_tcp(&e) => {}
                done => return done,
            }
        }
        self.in_the_rest(started, "put", key, async |c| {
            c.put_tcp(index, key, value).await
        })
        .await
    }

    /// A put over TCP.
    async fn put_tcp(&self, index: usize, key: &[u8], value: &[u8]) -> Result<()> {
        let r = self
            .exchange(
                index,
                "put",
                Opcode::TcpPut,
                key,
                &[value],
                None,
                Vec::new(),
            )
            .await?;
        match r.status {
            Status::Ok => Ok(()),
            _ => Err(self.refused(index, &r)),
        }
    }

    /// The value under `key`, or `None`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        Ok(self.get_into(key, &mut buf).await?.then_some(buf))
    }

    /// Reads the value under `key` into `buf` (replacing its contents and reusing its
    /// capacity); returns whether the key exists. On error `buf` is left empty.
    pub async fn get_into(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        let started = Instant::now();
        self.check_key(key)?;
        if let Some(done) = self.get_local(key, ItemDest::Vec(buf)).await {
            return done.map(|len| len.is_some());
        }
        self.get_into_remote(key, buf, started).await
    }

    /// [`Client::get_into`] over RDMA or TCP, for an operation begun at `started`.
    async fn get_into_remote(
        &self,
        key: &[u8],
        buf: &mut Vec<u8>,
        started: Instant,
    ) -> Result<bool> {
        let index = self.owner_index(key);
        if let Some(rdma) = self.rdma() {
            match self.get_rdma(rdma, index, key, buf).await {
                Err(e @ Error::Rdma { .. }) if rdma.failed(&e) => {}
                Err(e) if rdma.busy_to_tcp(&e) => {}
                done => return done,
            }
        }
        self.in_the_rest(started, "get", key, async |c| {
            c.get_tcp(index, key, buf).await
        })
        .await
    }

    /// A get over TCP into `buf`.
    async fn get_tcp(&self, index: usize, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        let mut r = self
            .exchange(
                index,
                "get",
                Opcode::TcpGet,
                key,
                &[],
                None,
                std::mem::take(buf),
            )
            .await?;
        match r.status {
            Status::Ok => {
                *buf = r.payload;
                Ok(true)
            }
            Status::NotFound => {
                r.payload.clear();
                *buf = r.payload;
                Ok(false)
            }
            _ => Err(self.refused(index, &r)),
        }
    }

    /// Reads the value under `key` into the front of `buf`; returns its length, `None` when
    /// the key is absent, or [`Error::BufferTooSmall`] when it does not fit.
    pub async fn get_into_slice(&self, key: &[u8], buf: &mut [u8]) -> Result<Option<usize>> {
        let started = Instant::now();
        self.check_key(key)?;
        if let Some(done) = self.get_local(key, ItemDest::Slice(&mut *buf)).await {
            return done;
        }
        // Not through shared memory: a get into a small buffer goes over TCP under `auto`.
        let mut value = Vec::new();
        if !self.get_into_remote(key, &mut value, started).await? {
            return Ok(None);
        }
        copy_into(&value, buf).map(Some)
    }

    /// Removes `key`; returns whether it existed.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        self.key_status(key, "delete", Opcode::TcpDelete).await
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &[u8]) -> Result<bool> {
        self.key_status(key, "exists", Opcode::Exists).await
    }

    async fn key_status(&self, key: &[u8], op: &'static str, opcode: Opcode) -> Result<bool> {
        self.check_key(key)?;
        let index = self.owner_index(key);
        let r = self
            .exchange(index, op, opcode, key, &[], None, Vec::new())
            .await?;
        match r.status {
            Status::Ok => Ok(true),
            Status::NotFound => Ok(false),
            _ => Err(self.refused(index, &r)),
        }
    }

    /// Round trip to `server` (as listed); returns the time it took.
    pub async fn ping(&self, server: &str) -> Result<Duration> {
        let index = self.server_index(server)?;
        let probe = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        let started = tokio::time::Instant::now();
        let r = self
            .exchange(
                index,
                "ping",
                Opcode::Ping,
                &[],
                &[&probe],
                None,
                Vec::new(),
            )
            .await?;
        if r.status != Status::Ok {
            return Err(self.refused(index, &r));
        }
        if r.payload != probe {
            return Err(Error::Protocol {
                server: server.to_owned(),
                source: ProtoError::BadRequest("ping answer differs from the probe".into()),
            });
        }
        Ok(started.elapsed())
    }

    /// Storage counters of `server` (as listed).
    pub async fn stats(&self, server: &str) -> Result<StatsResponse> {
        let index = self.server_index(server)?;
        let r = self
            .exchange(index, "stats", Opcode::Stats, &[], &[], None, Vec::new())
            .await?;
        if r.status != Status::Ok {
            return Err(self.refused(index, &r));
        }
        StatsResponse::decode(&r.payload).map_err(|source| Error::Protocol {
            server: server.to_owned(),
            source,
        })
    }
}
