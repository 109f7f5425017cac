//! One-sided operations on a connected queue pair: RDMA WRITE and READ, single and batched,
//! awaiting their completions under the peer's congestion window.

use std::sync::Arc;

use crate::completion;
use crate::core::{FLUSH_GRACE, QpCore};
use crate::error::RdmaError;
use crate::memory::LocalMemory;
use crate::op::Op;
use crate::qp::RcQueuePair;
use crate::slot::Slot;
use crate::transfer::{Transfer, plan_chunks};

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

    async fn execute<L: LocalMemory + ?Sized>(
        &self,
        op: Op,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        let core = &self.core;
        let max_msg = core.device.limits().max_msg_size;
        let chunks = plan_chunks(local.addr(), local.len(), local.lkey(), transfers, max_msg)?;
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
                completion::spawn(core.clone()).map(drop).map_err(|e| {
                    RdmaError::verbs("spawn completion thread", core.device.name(), &e)
                })
            })
            .clone()?;
        let slot = Arc::new(Slot::default());
        let mut guard = InFlightGuard {
            core,
            slot: &slot,
            armed: true,
        };
        let mut posted = 0usize;
        let mut failure = None;
        while posted < chunks.len() {
            let wanted = u32::try_from(chunks.len() - posted).unwrap_or(u32::MAX);
            let granted = window.acquire(wanted).await as usize;
            if let Err(e) = core.check_usable() {
                window.release_unused(granted as u32);
                failure = Some(e);
                break;
            }
            match core.post(op, &chunks[posted..posted + granted], &slot) {
                Ok(()) => posted += granted,
                Err((done, e)) => {
                    window.release_unused((granted - done) as u32);
                    core.break_pair(&e.to_string());
                    failure = Some(e);
                    break;
                }
            }
        }
        let completed = slot.settled().await;
        guard.armed = false;
        // A completion error says more than "broken" or a refused post.
        match (completed, failure) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }
}

/// Keeps memory safe when an operation's future is dropped before its completions arrived:
/// the NIC may still be reading or writing the borrowed memory, so the pair is broken (which
/// flushes every outstanding request) and the drop waits for the flush.
struct InFlightGuard<'a> {
    core: &'a QpCore,
    slot: &'a Slot,
    armed: bool,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if !self.armed || self.slot.outstanding() == 0 {
            return;
        }
        self.core
            .break_pair("an operation was dropped while in flight");
        let limit = self.core.options.op_deadline + FLUSH_GRACE * 2;
        if !self.slot.wait_blocking(limit) {
            tracing::error!(
                qp_num = self.core.qp_num,
                "work requests of a dropped operation did not complete in {limit:?}"
            );
        }
    }
}
