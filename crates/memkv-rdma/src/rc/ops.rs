//! One-sided operations on a connected RC queue pair: RDMA WRITE and READ, single and batched,
//! and through staging buffers for unregistered memory. The pair's one queue pair takes every
//! chain the peer's congestion window admits, as long as the pair is not broken.

use std::sync::Arc;

use crate::completion::{self, QueuePairs as _};
use crate::error::RdmaError;
use crate::lent::{LentPieces, SharedPieces};
use crate::memory::LocalMemory;
use crate::op::Op;
use crate::ops::{Sender, execute};
use crate::qp::RcQueuePair;
use crate::rc::pair::QpCore;
use crate::rc::verbs;
use crate::staging::StagingPool;
use crate::transfer::{Chunk, Transfer, plan_chunks};

impl RcQueuePair {
    /// RDMA WRITE of `local[local_offset..+len]` to `remote_addr` in the peer's region `rkey`.
    /// Larger than the port's maximum message size, it goes as several work requests.
    pub async fn write<L: LocalMemory + ?Sized>(
        &self,
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
        self.execute(Op::Write, local, &[t]).await
    }

    /// RDMA READ of `len` bytes at `remote_addr` (region `rkey`) into `local[local_offset..]`.
    pub async fn read<L: LocalMemory + ?Sized>(
        &self,
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
        self.execute(Op::Read, &*local, &[t]).await
    }

    /// Several WRITEs from one local region, posted as one chain of work requests per
    /// doorbell (as many as the window allows at a time).
    pub async fn write_batch<L: LocalMemory + ?Sized>(
        &self,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.execute(Op::Write, local, transfers).await
    }

    /// Several READs into one local region, chained like [`RcQueuePair::write_batch`].
    pub async fn read_batch<L: LocalMemory + ?Sized>(
        &self,
        local: &mut L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        self.execute(Op::Read, &*local, transfers).await
    }

    /// READs `transfers[i]` into piece `i` of `lent`, chained like [`RcQueuePair::read_batch`];
    /// other groups lent from the same buffer may be read into meanwhile.
    pub async fn read_lent(
        &self,
        lent: &mut LentPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        let chunks = lent.plan(transfers, self.max_msg())?;
        self.run(Op::Read, chunks).await
    }

    /// WRITEs piece `i` of `shared` (from `transfers[i].local_offset`) as `transfers[i]` says,
    /// chained like [`RcQueuePair::write_batch`].
    pub async fn write_shared(
        &self,
        shared: &SharedPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        let chunks = shared.plan(transfers, self.max_msg())?;
        self.run(Op::Write, chunks).await
    }

    fn max_msg(&self) -> u32 {
        crate::transfer::message_limit(self.core.device.limits().max_msg_size)
    }

    async fn execute<L: LocalMemory + ?Sized>(
        &self,
        op: Op,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        let max_msg = self.max_msg();
        let chunks = plan_chunks(local.addr(), local.len(), local.lkey(), transfers, max_msg)?;
        self.run(op, chunks).await
    }

    async fn run(&self, op: Op, chunks: Vec<Chunk>) -> Result<(), RdmaError> {
        let core = &self.core;
        let window =
            core.connection
                .get()
                .map(|c| c.window.clone())
                .ok_or(RdmaError::NotConnected {
                    qp_num: core.qp_num,
                })?;
        core.check_usable()?;
        if chunks.is_empty() {
            return Ok(());
        }
        self.completion_thread
            .get_or_init(|| {
                let name = format!("rdma-cq-{}", core.qp_num);
                completion::spawn(core.clone(), name)
                    .map(drop)
                    .map_err(|e| {
                        RdmaError::verbs("spawn completion thread", core.device.name(), &e)
                    })
            })
            .clone()?;
        execute(&**core, op, &chunks, &window).await
    }

    /// WRITEs unregistered `data` to `remote_addr` by way of staging buffers from `pool`, one
    /// buffer-sized piece at a time.
    pub async fn write_from_slice(
        &self,
        pool: &Arc<StagingPool>,
        data: &[u8],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), RdmaError> {
        let mut staging = pool.acquire().await;
        for (i, piece) in data.chunks(pool.buf_size()).enumerate() {
            staging.as_mut_slice()[..piece.len()].copy_from_slice(piece);
            let at = remote_addr + (i * pool.buf_size()) as u64;
            self.write(&staging, 0, piece.len(), at, rkey).await?;
        }
        Ok(())
    }

    /// READs `out.len()` bytes at `remote_addr` into unregistered `out` by way of staging
    /// buffers from `pool`.
    pub async fn read_into_slice(
        &self,
        pool: &Arc<StagingPool>,
        out: &mut [u8],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), RdmaError> {
        let mut staging = pool.acquire().await;
        let size = pool.buf_size();
        for (i, piece) in out.chunks_mut(size).enumerate() {
            let at = remote_addr + (i * size) as u64;
            self.read(&mut staging, 0, piece.len(), at, rkey).await?;
            piece.copy_from_slice(&staging.as_slice()[..piece.len()]);
        }
        Ok(())
    }
}

impl Sender for QpCore {
    type Pairs = QpCore;

    fn pairs(&self) -> &QpCore {
        self
    }

    fn tag(&self) {}

    /// The pair's one queue pair, unless it broke meanwhile.
    async fn place(&self, wanted: u32) -> Result<(usize, u32), RdmaError> {
        self.check_usable()?;
        Ok((0, wanted))
    }

    fn ring(
        &self,
        _queue: usize,
        op: Op,
        chunks: &[Chunk],
        first_id: u64,
    ) -> Result<(), (usize, RdmaError)> {
        verbs::post_chain(&self.qp, self.device_name(), op, chunks, first_id)
    }
}
