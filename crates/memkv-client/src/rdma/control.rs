//! The TCP control messages around one-sided transfers (RDMA, or copies through the same-host
//! shared arena): Allocate / Commit / Abort for puts, Lookup / Release for gets, each one
//! request on the server's multiplexed connection.

use memkv_proto::messages::{
    AbortRequest, AllocateRequest, AllocateResponse, CommitRequest, LookupRequest, LookupResponse,
    ReleaseRequest, SharedCommitRequest,
};
use memkv_proto::{Opcode, Status};

use super::path::rdma_err;
use crate::client::Client;
use crate::{Error, Result};
use futures::future::join_all;

impl Client {
    pub(crate) async fn lookup_pin(
        &self,
        index: usize,
        key: &[u8],
    ) -> Result<Option<LookupResponse>> {
        let server = self.server_name(index);
        let request = LookupRequest { lease_ms: 0 }.encode();
        let r = self
            .exchange(
                index,
                "lookup",
                Opcode::Lookup,
                key,
                &[&request],
                None,
                Vec::new(),
            )
            .await?;
        match r.status {
            Status::Ok => LookupResponse::decode(&r.payload)
                .map(Some)
                .map_err(|e| rdma_err(server, e)),
            Status::NotFound => Ok(None),
            _ => Err(Error::from_status(server, r.status, &r.payload)),
        }
    }

    pub(crate) async fn release_pin(&self, index: usize, pin: u64) {
        let release = ReleaseRequest { pin }.encode();
        let _ = self
            .exchange(
                index,
                "release",
                Opcode::Release,
                &[],
                &[&release],
                None,
                Vec::new(),
            )
            .await;
    }

    pub(crate) async fn allocate(
        &self,
        index: usize,
        key: &[u8],
        len: usize,
    ) -> Result<AllocateResponse> {
        let alloc = self.reserve(index, key, len).await?;
        if alloc.rkey == 0 && len > 0 {
            return Err(rdma_err(
                self.server_name(index),
                "the server gave no remote address (RDMA inactive there)",
            ));
        }
        Ok(alloc)
    }

    /// Allocate: a reservation of `len` bytes for `key`, and where it lies in the arena.
    pub(crate) async fn reserve(
        &self,
        index: usize,
        key: &[u8],
        len: usize,
    ) -> Result<AllocateResponse> {
        let server = self.server_name(index);
        let request = AllocateRequest {
            len: len as u64,
            lease_ms: 0,
        }
        .encode();
        let r = self
            .exchange(
                index,
                "allocate",
                Opcode::Allocate,
                key,
                &[&request],
                None,
                Vec::new(),
            )
            .await?;
        if r.status != Status::Ok {
            return Err(Error::from_status(server, r.status, &r.payload));
        }
        AllocateResponse::decode(&r.payload).map_err(|e| Error::Protocol {
            server: server.to_owned(),
            source: e,
        })
    }

    pub(crate) async fn commit(&self, index: usize, reservation: u64, sum: u64) -> Result<()> {
        let commit = CommitRequest {
            reservation,
            checksum: sum,
        }
        .encode();
        self.send_commit(index, &commit).await
    }

    /// Commit of bytes this client copied into server `index`'s arena through its mapping of
    /// arena `arena_id`, hashing them in the same pass: the server takes `sum` without
    /// reading the value again (protocol.md, SharedCommitRequest).
    pub(crate) async fn commit_copied(
        &self,
        index: usize,
        reservation: u64,
        sum: u64,
        arena_id: u64,
    ) -> Result<()> {
        let commit = SharedCommitRequest {
            reservation,
            checksum: sum,
            arena_id,
        }
        .encode();
        self.send_commit(index, &commit).await
    }

    async fn send_commit(&self, index: usize, payload: &[u8]) -> Result<()> {
        let r = self
            .exchange(
                index,
                "commit",
                Opcode::Commit,
                &[],
                &[payload],
                None,
                Vec::new(),
            )
            .await?;
        match r.status {
            Status::Ok => Ok(()),
            _ => Err(Error::from_status(
                self.server_name(index),
                r.status,
                &r.payload,
            )),
        }
    }

    /// Gives a reservation back; a lost Abort only lets the lease run out.
    pub(crate) async fn abort(&self, index: usize, reservation: u64) {
        let abort = AbortRequest { reservation }.encode();
        let _ = self
            .exchange(
                index,
                "abort",
                Opcode::Abort,
                &[],
                &[&abort],
                None,
                Vec::new(),
            )
            .await;
    }

    /// Sends the Releases without waiting for them: the values are read by now, and waiting
    /// would add a round trip to every get. A Release that never arrives (the process exits)
    /// only leaves the pin to its lease.
    pub(crate) fn release_pins(&self, index: usize, pins: &[Result<Option<LookupResponse>>]) {
        let pins: Vec<u64> = pins
            .iter()
            .filter_map(|p| p.as_ref().ok().and_then(Option::as_ref))
            .map(|p| p.pin)
            .collect();
        if pins.is_empty() {
            return;
        }
        let client = self.clone();
        tokio::spawn(async move {
            join_all(pins.iter().map(|&pin| client.release_pin(index, pin))).await;
        });
    }
}
