//! One-sided operations through a DCI pool: RDMA WRITE and READ towards one DC target, single
//! and batched, with the signatures and errors of [`crate::RcQueuePair`]'s, under the peer's
//! congestion window and the pool's DCI selection.

use crate::dc::initiators::{PoolCore, lock};
use crate::dc::pool::{DcPeer, DciPool};
use crate::dc::selector::Assignment;
use crate::error::RdmaError;
use crate::lent::{LentPieces, SharedPieces};
use crate::memory::LocalMemory;
use crate::op::Op;
use crate::ops::{Sender, execute};
use crate::transfer::{Chunk, Transfer, plan_chunks};

impl DciPool {
    /// RDMA WRITE of `local[local_offset..+len]` to `remote_addr` in `peer`'s region `rkey`.
    pub async fn write<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        local: &L,
        local_offset: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), RdmaError> {
        let t = Transfer {
            local_offset,
            len,
            remote_addr,
            rkey,
        };
        self.execute(peer, Op::Write, local, &[t]).await
    }

    /// RDMA READ of `len` bytes at `remote_addr` (region `rkey`) of `peer` into
    /// `local[local_offset..]`.
    pub async fn read<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        local: &mut L,
        local_offset: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), RdmaError> {
        let t = Transfer {
            local_offset,
            len,
            remote_addr,
            rkey,
        };
        self.execute(peer, Op::Read, &*local, &[t]).await
    }

    /// Several WRITEs from one local region to `peer`, as few batches (doorbells) as the
    /// window and the DCI's send queue allow.
    pub async fn write_batch<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.execute(peer, Op::Write, local, transfers).await
    }

    /// Several READs from `peer` into one local region, batched like [`DciPool::write_batch`].
    pub async fn read_batch<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        local: &mut L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.execute(peer, Op::Read, &*local, transfers).await
    }

    /// READs `transfers[i]` from `peer` into piece `i` of `lent`, batched like
    /// [`DciPool::read_batch`]; other groups lent from the same buffer may be read into meanwhile.
    pub async fn read_lent(
        &self,
        peer: &DcPeer,
        lent: &mut LentPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.check_peer(peer)?;
        let chunks = lent.plan(transfers, self.max_msg())?;
        self.run(peer, Op::Read, chunks).await
    }

    /// WRITEs piece `i` of `shared` to `peer` as `transfers[i]` says, batched like
    /// [`DciPool::write_batch`].
    pub async fn write_shared(
        &self,
        peer: &DcPeer,
        shared: &SharedPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.check_peer(peer)?;
        let chunks = shared.plan(transfers, self.max_msg())?;
        self.run(peer, Op::Write, chunks).await
    }

    async fn execute<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        op: Op,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.check_peer(peer)?;
        let max_msg = self.max_msg();
        let chunks = plan_chunks(local.addr(), local.len(), local.lkey(), transfers, max_msg)?;
        self.run(peer, op, chunks).await
    }

    fn check_peer(&self, peer: &DcPeer) -> Result<(), RdmaError> {
        if peer.pool_id != self.core.id {
            return Err(RdmaError::InvalidArgument {
                name: "peer",
                value: format!("DC target {:#x}", peer.dct_num),
                limit: "a peer is used with the pool whose add_peer made it",
            });
        }
        Ok(())
    }

    fn max_msg(&self) -> u32 {
        crate::transfer::message_limit(self.core.device.limits().max_msg_size)
    }

    async fn run(&self, peer: &DcPeer, op: Op, chunks: Vec<Chunk>) -> Result<(), RdmaError> {
        if chunks.is_empty() {
            return Ok(());
        }
        let sender = DcSender {
            core: &self.core,
            peer,
        };
        execute(&sender, op, &chunks, &peer.window).await
    }
}

/// An operation's way to one peer through the pool: the DCI the selector gives the peer, and
/// that peer's DC target, address handle and access key on every request.
struct DcSender<'a> {
    core: &'a PoolCore,
    peer: &'a DcPeer,
}

impl Sender for DcSender<'_> {
    type Pairs = PoolCore;

    fn pairs(&self) -> &PoolCore {
        self.core
    }

    fn tag(&self) -> u64 {
        self.peer.id
    }

    /// Waits until the selector places up to `wanted` requests of the peer on a DCI.
    async fn place(&self, wanted: u32) -> Result<(usize, u32), RdmaError> {
        let core = self.core;
        loop {
            let freed = core.sq_freed.notified();
            tokio::pin!(freed);
            // Registered before asking, so that a completion in between is not missed.
            freed.as_mut().enable();
            let assignment = lock(&core.selector).assign(self.peer.id, wanted);
            match assignment {
                Assignment::Use { dci, count } => return Ok((dci, count)),
                Assignment::Broken { dci } => return Err(core.broken_error(Some(dci))),
                Assignment::NoneUsable => return Err(core.broken_error(None)),
                Assignment::Wait => freed.await,
            }
        }
    }

    fn unplace(&self, dci: usize, count: u32) {
        self.core.release_places(dci, self.peer.id, count);
    }

    /// All or nothing: on failure none of the batch is in flight.
    fn ring(
        &self,
        dci: usize,
        op: Op,
        chunks: &[Chunk],
        first_id: u64,
    ) -> Result<(), (usize, RdmaError)> {
        let peer = self.peer;
        let rc = lock(&self.core.dcis[dci]).post_batch(
            op,
            chunks,
            first_id,
            (&peer.ah, peer.dct_num, peer.dc_key),
        );
        if rc == 0 {
            return Ok(());
        }
        let device = self.core.device.name();
        Err((0, RdmaError::verbs_errno("ibv_wr_complete", device, rc)))
    }
}
