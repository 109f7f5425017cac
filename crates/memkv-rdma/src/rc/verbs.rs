//! The verbs calls of an RC queue pair: creating it in INIT, moving it to RTR and RTS towards
//! a peer or to the error state, asking for its state, and posting a chain of RDMA WRITEs or
//! READs with one `ibv_post_send` (one doorbell).

use std::sync::{Arc, Mutex, PoisonError};

use memkv_fabric::AddressPlan;
use rdma_mummy_sys::{ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::Mtu as VerbsMtu;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, ModifyQueuePairError, QueuePair, QueuePairAttribute, QueuePairAttributeMask,
    QueuePairState, QueuePairType,
};

use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::op::Op;
use crate::options::QpOptions;
use crate::transfer::Chunk;

/// Creates an RC queue pair of `depth` send queue entries completing on `cq`, and moves it
/// RESET -> INIT with this port's P_Key index and remote READ/WRITE access.
pub(crate) fn create_in_init(
    device: &RdmaDevice,
    depth: u32,
    cq: &Arc<BasicCompletionQueue>,
) -> Result<BasicQueuePair, RdmaError> {
    let mut qp = device
        .pd()
        .create_qp_builder()
        .setup_qp_type(QueuePairType::ReliableConnection)
        .setup_max_send_wr(depth)
        .setup_max_recv_wr(1)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .build()
        .map_err(|e| RdmaError::Verbs {
            call: "ibv_create_qp",
            device: device.name().to_owned(),
            errno: 0,
            reason: e.to_string(),
        })?;
    let pkey_index = device.plan().pkey.as_ref().map(|p| p.index).unwrap_or(0);
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(pkey_index)
        .setup_port(device.port())
        .setup_access_flags(
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
        );
    qp.modify(&init)
        .map_err(|e| modify_error("ibv_modify_qp(RESET->INIT)", device.name(), &e))?;
    Ok(qp)
}

/// INIT -> RTR -> RTS towards the peer's queue pair `peer_qp_num` (first PSN `peer_psn`) along
/// `plan`, sending from PSN `psn`.
pub(crate) fn connect_to(
    qp: &mut BasicQueuePair,
    device: &RdmaDevice,
    plan: &AddressPlan,
    (peer_qp_num, peer_psn): (u32, u32),
    psn: u32,
    options: &QpOptions,
) -> Result<(), RdmaError> {
    let mut path = AddressHandleAttribute::new();
    path.setup_port(plan.port)
        .setup_dest_lid(plan.dest_lid)
        .setup_service_level(plan.service_level);
    if let Some(grh) = plan.grh {
        let sgid_index = u8::try_from(grh.sgid_index).map_err(|_| RdmaError::InvalidArgument {
            name: "gid_index",
            value: grh.sgid_index.to_string(),
            limit: "verbs address handles take a GID index of 0..=255",
        })?;
        path.setup_grh(
            &Gid { raw: grh.dgid.0 },
            grh.flow_label,
            sgid_index,
            grh.hop_limit,
            grh.traffic_class,
        );
    }
    let rd_atomic = device.limits().max_rd_atomic;
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(VerbsMtu::from(plan.path_mtu.verbs_code()))
        .setup_dest_qp_num(peer_qp_num)
        .setup_rq_psn(peer_psn & 0x00ff_ffff)
        .setup_max_dest_read_atomic(rd_atomic)
        .setup_min_rnr_timer(options.min_rnr_timer)
        .setup_address_vector(&path);
    let mut rts = QueuePairAttribute::new();
    rts.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(psn)
        .setup_timeout(options.ack_timeout)
        .setup_retry_cnt(options.retry_count.min(7))
        .setup_rnr_retry(options.rnr_retry.min(7))
        .setup_max_read_atomic(rd_atomic);
    qp.modify(&rtr)
        .map_err(|e| modify_error("ibv_modify_qp(INIT->RTR)", device.name(), &e))?;
    qp.modify(&rts)
        .map_err(|e| modify_error("ibv_modify_qp(RTR->RTS)", device.name(), &e))
}

/// Moves the queue pair to the error state, which makes the NIC flush every outstanding
/// request (each completes with IBV_WC_WR_FLUSH_ERR).
pub(crate) fn to_error(qp: &mut BasicQueuePair) -> Result<(), ModifyQueuePairError> {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Error);
    qp.modify(&attr)
}

/// Whether the device reports the queue pair in the error state (`ibv_query_qp`).
pub(crate) fn in_error_state(qp: &BasicQueuePair) -> bool {
    matches!(
        qp.query(QueuePairAttributeMask::State),
        Ok((attr, _)) if attr.state() == QueuePairState::Error
    )
}

/// Posts `chunks` as one chain of signaled work requests with ids `first_id..` (one
/// doorbell). On failure returns how many were posted before the one the provider refused.
pub(crate) fn post_chain(
    qp: &Mutex<BasicQueuePair>,
    device: &str,
    op: Op,
    chunks: &[Chunk],
    first_id: u64,
) -> Result<(), (usize, RdmaError)> {
    let n = chunks.len();
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
        // SAFETY: `i` and `i + 1` index inside `sges` / `wrs`, which are not resized while
        // these pointers are used.
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
        let qp = qp.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the queue pair is alive (we hold it); the chain and its scatter/gather
        // entries live until the call returns (the provider copies them into the send queue);
        // each entry names memory the caller's `LocalMemory` promises is registered under its
        // lkey and stays valid until the request's completion or flush: the operation awaits
        // it (or, if dropped, breaks the pair and blocks until it), and the completion thread
        // ends a request without one only once the pair is verifiably in the error state
        // (`QueuePairs::is_stopped`), when the NIC no longer touches that memory.
        unsafe { rdma_mummy_sys::ibv_post_send(qp.qp().as_ptr(), wr_base, &mut bad) }
    };
    if rc == 0 {
        return Ok(());
    }
    let posted = if bad.is_null() {
        0
    } else {
        // SAFETY: the provider sets `bad` to an element of the chain we passed.
        (unsafe { bad.offset_from(wr_base) }).clamp(0, n as isize) as usize
    };
    let errno = if rc > 0 {
        rc
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    };
    Err((
        posted,
        RdmaError::verbs_errno("ibv_post_send", device, errno),
    ))
}

fn opcode(op: Op) -> u32 {
    match op {
        Op::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        Op::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
    }
}

fn modify_error(call: &'static str, device: &str, e: &ModifyQueuePairError) -> RdmaError {
    use std::error::Error as _;
    let errno = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(0);
    let mut reason = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        reason = format!("{reason}: {s}");
        source = s.source();
    }
    RdmaError::Verbs {
        call,
        device: device.to_owned(),
        errno,
        reason,
    }
}
