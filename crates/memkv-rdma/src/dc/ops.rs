//! One-sided operations through a DCI pool: RDMA WRITE and READ towards one DC target, single
//! and batched, with the signatures and errors of [`crate::RcQueuePair`]'s, under the peer's
//! congestion window and the pool's DCI selection.

use std::sync::Arc;

use crate::core::FLUSH_GRACE;
use crate::dc::pool::{DcPeer, DciPool, PoolCore};
use crate::dc::selector::Assignment;
use crate::error::RdmaError;
use crate::memory::LocalMemory;
use crate::op::Op;
use crate::slot::Slot;
use crate::transfer::{Transfer, plan_chunks};

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

    async fn execute<L: LocalMemory + ?Sized>(
        &self,
        peer: &DcPeer,
        op: Op,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        let core = &self.core;
        if peer.pool_id != core.id {
            return Err(RdmaError::InvalidArgument {
                name: "peer",
                value: format!("DC target {:#x}", peer.dct_num),
                limit: "a peer is used with the pool whose add_peer made it",
            });
        }
        let max_msg = core.device.limits().max_msg_size;
        let chunks = plan_chunks(local.addr(), local.len(), local.lkey(), transfers, max_msg)?;
        if chunks.is_empty() {
            return Ok(());
        }
        let slot = Arc::new(Slot::default());
        let mut guard = InFlightGuard {
            core,
            slot: &slot,
            dcis: Vec::new(),
            armed: true,
        };
        let window = &peer.window;
        let mut posted = 0usize;
        let mut failure = None;
        while posted < chunks.len() {
            let wanted = u32::try_from(chunks.len() - posted).unwrap_or(u32::MAX);
            let granted = window.acquire(wanted).await;
            let (dci, count) = match assign(core, peer.id, granted).await {
                Ok(assigned) => assigned,
                Err(e) => {
                    window.release_unused(granted);
                    failure = Some(e);
                    break;
                }
            };
            window.release_unused(granted - count);
            if !guard.dcis.contains(&dci) {
                guard.dcis.push(dci);
            }
            let batch = &chunks[posted..posted + count as usize];
            match core.post(dci, op, batch, peer, &slot) {
                Ok(()) => posted += batch.len(),
                Err(e) => {
                    core.selector
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .release(dci, peer.id, count);
                    window.release_unused(count);
                    core.sq_freed.notify_waiters();
                    core.break_dci(dci, &e.to_string());
                    failure = Some(e);
                    break;
                }
            }
        }
        let completed = slot.settled().await;
        guard.armed = false;
        match (completed, failure) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }
}

/// Waits until the selector places up to `wanted` requests of `peer` on a DCI.
async fn assign(core: &PoolCore, peer: u64, wanted: u32) -> Result<(usize, u32), RdmaError> {
    loop {
        let freed = core.sq_freed.notified();
        tokio::pin!(freed);
        // Registered before asking, so that a completion in between is not missed.
        freed.as_mut().enable();
        let assignment = core
            .selector
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .assign(peer, wanted);
        match assignment {
            Assignment::Use { dci, count } => return Ok((dci, count)),
            Assignment::Broken { dci } => return Err(core.broken_error(Some(dci))),
            Assignment::NoneUsable => return Err(core.broken_error(None)),
            Assignment::Wait => freed.await,
        }
    }
}

/// As for RC: an operation dropped while its requests are in flight breaks the DCIs they are
/// on (flushing them) and waits for the flush, since the NIC may still use the memory.
struct InFlightGuard<'a> {
    core: &'a PoolCore,
    slot: &'a Slot,
    dcis: Vec<usize>,
    armed: bool,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if !self.armed || self.slot.outstanding() == 0 {
            return;
        }
        for &dci in &self.dcis {
            self.core
                .break_dci(dci, "an operation was dropped while in flight");
        }
        let limit = self.core.options.op_deadline + FLUSH_GRACE * 2;
        if !self.slot.wait_blocking(limit) {
            tracing::error!(
                device = self.core.device.name(),
                "DC work requests of a dropped operation did not complete in {limit:?}"
            );
        }
    }
}
