//! Posting work requests: a chain of signaled RDMA WRITEs or READs handed to the provider with
//! one `ibv_post_send` (one doorbell), registered as in flight before the NIC can complete them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdma_mummy_sys::{ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode};
use sideway::ibverbs::queue_pair::QueuePair;

use crate::core::QpCore;
use crate::error::RdmaError;
use crate::metrics_names::{OP_LABEL, WR_TOTAL};
use crate::op::Op;
use crate::slot::Slot;
use crate::transfer::Chunk;

impl QpCore {
    /// Posts `chunks` as one chain of signaled work requests (one doorbell). On failure returns
    /// how many were posted before the one the provider refused.
    pub fn post(
        &self,
        op: Op,
        chunks: &[Chunk],
        slot: &Arc<Slot>,
    ) -> Result<(), (usize, RdmaError)> {
        let n = chunks.len();
        if n == 0 {
            return Ok(());
        }
        let first_id = self.next_wr_id.fetch_add(n as u64, Ordering::Relaxed);
        let now = Instant::now();
        slot.expect(n);
        let was_idle = self.lock_in_flight().insert_run(first_id, n, slot, op, now);
        if was_idle {
            // The completion thread may be asleep without a deadline to wake for; a peer that
            // never answers would otherwise leave it (and the operation) asleep for good.
            self.wake_thread();
        }
        let mut sges: Vec<ibv_sge> = chunks
            .iter()
            .map(|c| ibv_sge {
                addr: c.local_addr,
                length: c.len,
                lkey: c.lkey,
            })
            .collect();
        let mut wrs: Vec<ibv_send_wr> = (0..n)
            .map(|i| {
                // SAFETY: ibv_send_wr is plain C data (integers, pointers, unions of those);
                // all-zero is a valid value of it.
                let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
                wr.wr_id = first_id + i as u64;
                wr.num_sge = 1;
                wr.opcode = opcode(op);
                wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                wr.wr.rdma.remote_addr = chunks[i].remote_addr;
                wr.wr.rdma.rkey = chunks[i].rkey;
                wr
            })
            .collect();
        let sge_base = sges.as_mut_ptr();
        let wr_base = wrs.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i` and `i + 1` index inside `sges` / `wrs`, which are not resized
            // while these pointers are used.
            unsafe {
                (*wr_base.add(i)).sg_list = sge_base.add(i);
                (*wr_base.add(i)).next = if i + 1 < n {
                    wr_base.add(i + 1)
                } else {
                    std::ptr::null_mut()
                };
            }
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        let rc = {
            let qp = self.lock_qp();
            // SAFETY: the queue pair is alive (we hold it); the chain and its scatter/gather
            // entries live until the call returns (the provider copies them into the send
            // queue); each entry names memory the caller's `LocalMemory` promises is
            // registered under its lkey and stays valid until the completion, which the
            // operation awaits (or, if dropped, breaks the pair and waits for).
            unsafe { rdma_mummy_sys::ibv_post_send(qp.qp().as_ptr(), wr_base, &mut bad) }
        };
        if rc == 0 {
            self.doorbells.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(WR_TOTAL, OP_LABEL => op.label()).increment(n as u64);
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            // SAFETY: the provider sets `bad` to an element of the chain we passed.
            (unsafe { bad.offset_from(wr_base) }).clamp(0, n as isize) as usize
        };
        self.lock_in_flight().remove_run(first_id, posted..n);
        slot.forget(n - posted);
        if posted > 0 {
            metrics::counter!(WR_TOTAL, OP_LABEL => op.label()).increment(posted as u64);
        }
        let errno = if rc > 0 {
            rc
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        };
        Err((
            posted,
            RdmaError::verbs_errno("ibv_post_send", self.device.name(), errno),
        ))
    }
}

fn opcode(op: Op) -> u32 {
    match op {
        Op::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        Op::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
    }
}
