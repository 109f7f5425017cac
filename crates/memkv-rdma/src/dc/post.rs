//! Posting a chain of RDMA WRITEs or READs on one DCI towards one DC target: every work request
//! between one `ibv_wr_start` and one `ibv_wr_complete` (one doorbell), each addressed with
//! `mlx5dv_wr_set_dc_addr`, registered as in flight before the NIC can complete them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdma_mummy_sys::{
    ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_set_sge,
    ibv_wr_start, mlx5dv_wr_set_dc_addr,
};

use crate::dc::pool::{DcPeer, PoolCore};
use crate::dc::table::Owner;
use crate::error::RdmaError;
use crate::metrics_names::{OP_LABEL, WR_TOTAL};
use crate::op::Op;
use crate::slot::Slot;
use crate::transfer::Chunk;

impl PoolCore {
    /// Posts `chunks` on DCI `dci` as one batch. All or nothing: mlx5 rolls back a batch that
    /// `ibv_wr_complete` refuses, so on failure none of them is in flight.
    pub fn post(
        &self,
        dci: usize,
        op: Op,
        chunks: &[Chunk],
        peer: &DcPeer,
        slot: &Arc<Slot>,
    ) -> Result<(), RdmaError> {
        let n = chunks.len();
        if n == 0 {
            return Ok(());
        }
        let first_id = self.next_wr_id.fetch_add(n as u64, Ordering::Relaxed);
        slot.expect(n);
        let owner = Owner {
            slot,
            op,
            dci,
            peer: peer.id,
            window: &peer.window,
        };
        let was_idle = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert_run(first_id, n, &owner, Instant::now());
        if was_idle {
            self.wake_thread();
        }
        let rc = {
            let initiator = self.dcis[dci]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (qpx, dv) = (initiator.qpx.as_ptr(), initiator.dv.as_ptr());
            // SAFETY: `qpx` and `dv` belong to a live DCI created with RDMA WRITE and READ send
            // ops, and its mutex (held) keeps this the only batch being built on it. The
            // address handle lives as long as `peer`, which the operation borrows until its
            // completions arrived. Each scatter/gather entry names memory the caller's
            // `LocalMemory` promises is registered under its lkey and stays valid until the
            // completion, which the operation awaits (or, if dropped, breaks the DCI and waits
            // for the flush).
            unsafe {
                ibv_wr_start(qpx);
                for (i, c) in chunks.iter().enumerate() {
                    (*qpx).wr_id = first_id + i as u64;
                    (*qpx).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                    match op {
                        Op::Write => ibv_wr_rdma_write(qpx, c.rkey, c.remote_addr),
                        Op::Read => ibv_wr_rdma_read(qpx, c.rkey, c.remote_addr),
                    }
                    mlx5dv_wr_set_dc_addr(dv, peer.ah.as_ptr(), peer.dct_num, peer.dc_key);
                    ibv_wr_set_sge(qpx, c.lkey, c.local_addr, c.len);
                }
                ibv_wr_complete(qpx)
            }
        };
        if rc == 0 {
            self.doorbells.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(WR_TOTAL, OP_LABEL => op.label()).increment(n as u64);
            return Ok(());
        }
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove_run(first_id, 0..n);
        slot.forget(n);
        Err(RdmaError::verbs_errno(
            "ibv_wr_complete",
            self.device.name(),
            rc,
        ))
    }
}
