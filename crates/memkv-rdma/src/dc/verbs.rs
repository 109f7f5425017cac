//! The mlx5dv and verbs calls behind DC: querying DC resources, creating DC targets and
//! initiators, moving them through their states, and posting a batch on an initiator (SRQs
//! and address handles are in `handles`). Every object is owned by a value that destroys it
//! when dropped.

use std::ptr::NonNull;

use memkv_fabric::Mtu;
use rdma_mummy_sys::{
    MLX5DV_DCTYPE_DCI, MLX5DV_DCTYPE_DCT, ibv_access_flags, ibv_ah_attr, ibv_cq, ibv_qp,
    ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_create_send_ops_flags, ibv_qp_ex, ibv_qp_init_attr_ex,
    ibv_qp_init_attr_mask, ibv_qp_state, ibv_qp_type, mlx5dv_context, mlx5dv_context_comp_mask,
    mlx5dv_qp_ex, mlx5dv_qp_init_attr, mlx5dv_qp_init_attr_mask,
};
use rdma_mummy_sys::{
    ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_set_sge,
    ibv_wr_start, mlx5dv_wr_set_dc_addr,
};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue as _};

use crate::dc::ffi::{av, blank_attr, context_ptr, pd_ptr, sgid_index};
use crate::dc::handles::{RawAh, RawSrq};
use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::op::Op;
use crate::options::QpOptions;
use crate::transfer::Chunk;

/// DC resources as `mlx5dv_query_device` reports them; `None` when the library does not know
/// the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mlx5DcAttrs {
    pub max_dc_rd_atom: Option<u64>,
    pub max_dc_init_rd_atom: Option<u64>,
}

/// Asks mlx5dv for the device's DC resources. Only call it on an mlx5 device. Err: errno.
pub(crate) fn query_dc_attrs(device: &RdmaDevice) -> Result<Mlx5DcAttrs, i32> {
    let bit = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM.0;
    // SAFETY: mlx5dv_context is plain C data (integers and a pointer the library may set);
    // all-zero is a valid value.
    let mut attrs: mlx5dv_context = unsafe { std::mem::zeroed() };
    attrs.comp_mask = u64::from(bit);
    // SAFETY: the context is open for as long as `device` lives; `attrs` is a writable
    // mlx5dv_context of the size these headers declare, and the library writes only fields
    // whose comp_mask bits it knows. The caller checked that the device is mlx5.
    let rc = unsafe { rdma_mummy_sys::mlx5dv_query_device(context_ptr(device), &mut attrs) };
    if rc != 0 {
        return Err(rc);
    }
    let reported = attrs.comp_mask & u64::from(bit) != 0;
    Ok(Mlx5DcAttrs {
        max_dc_rd_atom: reported.then_some(attrs.max_dc_rd_atom),
        max_dc_init_rd_atom: reported.then_some(attrs.max_dc_init_rd_atom),
    })
}

/// Creates one DC initiator and destroys it again. Err: errno.
pub(crate) fn probe_dci(device: &RdmaDevice) -> Result<(), i32> {
    let cq = device
        .context()
        .create_cq_builder()
        .setup_cqe(1)
        .build()
        .map_err(|_| libc::ENOMEM)?;
    let qp = RawQp::create(device, &cq, DcRole::Initiator { depth: 1 }).map_err(|e| match e {
        RdmaError::Verbs { errno, .. } => errno,
        _ => libc::EINVAL,
    })?;
    drop(qp);
    Ok(())
}

/// What a DC queue pair is for.
pub(crate) enum DcRole<'a> {
    /// A DC target answering one-sided operations presenting `key`, with `srq` as its (never
    /// used) receive queue.
    Target { srq: &'a RawSrq, key: u64 },
    /// A DC initiator with `depth` send queue entries.
    Initiator { depth: u32 },
}

/// A queue pair made by `mlx5dv_create_qp`. Destroyed when dropped; drop it before its CQ.
pub(crate) struct RawQp {
    qp: NonNull<ibv_qp>,
    device: String,
}

// SAFETY: libibverbs objects may be used from any thread; posting on a DCI is serialised by
// its owner's mutex, and modify/destroy are thread-safe in the provider.
unsafe impl Send for RawQp {}
// SAFETY: as above.
unsafe impl Sync for RawQp {}

impl RawQp {
    pub fn create(
        device: &RdmaDevice,
        cq: &BasicCompletionQueue,
        role: DcRole<'_>,
    ) -> Result<Self, RdmaError> {
        // SAFETY: the CQ outlives the queue pair (callers drop the pair first).
        let cq_ptr: *mut ibv_cq = unsafe { cq.cq() }.as_ptr();
        // SAFETY: both are plain C data; all-zero is a valid value of each.
        let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut dv: mlx5dv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
        attr.send_cq = cq_ptr;
        attr.recv_cq = cq_ptr;
        attr.pd = pd_ptr(device);
        attr.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        dv.comp_mask = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC
            .0
            .into();
        match role {
            DcRole::Target { srq, key } => {
                attr.srq = srq.as_ptr();
                dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
                // SAFETY: writes the union member a DCT uses.
                unsafe { *dv.dc_init_attr.__bindgen_anon_1.dct_access_key.as_mut() = key };
            }
            DcRole::Initiator { depth } => {
                attr.cap.max_send_wr = depth;
                attr.cap.max_send_sge = 1;
                attr.comp_mask |= ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
                attr.send_ops_flags = u64::from(
                    (ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE
                        | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ)
                        .0,
                );
                dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
            }
        }
        // SAFETY: the context, PD, CQ and SRQ named in `attr` are alive; both attribute
        // structs are fully initialised and outlive the call. On a provider other than mlx5
        // the call fails with EOPNOTSUPP (rdma-core checks the provider; the mummy wrapper
        // does the same when libmlx5 is missing).
        let qp =
            unsafe { rdma_mummy_sys::mlx5dv_create_qp(context_ptr(device), &mut attr, &mut dv) };
        match NonNull::new(qp) {
            Some(qp) => Ok(Self {
                qp,
                device: device.name().to_owned(),
            }),
            None => Err(RdmaError::verbs(
                "mlx5dv_create_qp",
                device.name(),
                &std::io::Error::last_os_error(),
            )),
        }
    }

    pub fn qp_num(&self) -> u32 {
        // SAFETY: the queue pair is alive while `self` is; qp_num is set at creation.
        unsafe { self.qp.as_ref().qp_num }
    }

    /// Turns a DCI into an [`Initiator`] with its extended posting interfaces.
    pub fn into_initiator(self) -> Result<Initiator, RdmaError> {
        let (qpx, dv) = self.posting()?;
        Ok(Initiator { qp: self, qpx, dv })
    }

    /// The extended posting interfaces (`ibv_wr_*`, `mlx5dv_wr_set_dc_addr`) of a DCI.
    fn posting(&self) -> Result<(NonNull<ibv_qp_ex>, NonNull<mlx5dv_qp_ex>), RdmaError> {
        let fail = |call| RdmaError::Verbs {
            call,
            device: self.device.clone(),
            errno: 0,
            reason: "the provider returned no extended queue pair".into(),
        };
        // SAFETY: the queue pair is alive and was created with send_ops_flags.
        let qpx = NonNull::new(unsafe { rdma_mummy_sys::ibv_qp_to_qp_ex(self.qp.as_ptr()) })
            .ok_or_else(|| fail("ibv_qp_to_qp_ex"))?;
        // SAFETY: `qpx` belongs to a queue pair made by mlx5dv_create_qp.
        let dv = NonNull::new(unsafe { rdma_mummy_sys::mlx5dv_qp_ex_from_ibv_qp_ex(qpx.as_ptr()) })
            .ok_or_else(|| fail("mlx5dv_qp_ex_from_ibv_qp_ex"))?;
        Ok((qpx, dv))
    }

    fn modify(
        &self,
        call: &'static str,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
    ) -> Result<(), RdmaError> {
        // SAFETY: the queue pair is alive; `attr` is initialised and outlives the call.
        let rc = unsafe { rdma_mummy_sys::ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as i32) };
        if rc == 0 {
            Ok(())
        } else {
            Err(RdmaError::verbs_errno(call, &self.device, rc))
        }
    }

    /// RESET -> INIT -> RTR: a DC target accepting remote READ and WRITE.
    pub fn target_to_rtr(&self, path: &DcPath, options: &QpOptions) -> Result<(), RdmaError> {
        use ibv_qp_attr_mask as m;
        let mut init = blank_attr(ibv_qp_state::IBV_QPS_INIT);
        init.pkey_index = path.pkey_index;
        init.port_num = path.port;
        init.qp_access_flags = (ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ)
            .0;
        self.modify(
            "ibv_modify_qp(DCT RESET->INIT)",
            &mut init,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS,
        )?;
        let mut rtr = blank_attr(ibv_qp_state::IBV_QPS_RTR);
        rtr.path_mtu = path.mtu.verbs_code();
        rtr.min_rnr_timer = options.min_rnr_timer;
        rtr.ah_attr = path.local_av();
        self.modify(
            "ibv_modify_qp(DCT INIT->RTR)",
            &mut rtr,
            m::IBV_QP_STATE | m::IBV_QP_MIN_RNR_TIMER | m::IBV_QP_AV | m::IBV_QP_PATH_MTU,
        )
    }

    /// (RESET ->) INIT -> RTR -> RTS: a DC initiator ready to send to any target.
    pub fn initiator_to_rts(
        &self,
        path: &DcPath,
        options: &QpOptions,
        rd_atomic: u8,
    ) -> Result<(), RdmaError> {
        use ibv_qp_attr_mask as m;
        let mut reset = blank_attr(ibv_qp_state::IBV_QPS_RESET);
        self.modify("ibv_modify_qp(DCI ->RESET)", &mut reset, m::IBV_QP_STATE)?;
        let mut init = blank_attr(ibv_qp_state::IBV_QPS_INIT);
        init.pkey_index = path.pkey_index;
        init.port_num = path.port;
        self.modify(
            "ibv_modify_qp(DCI RESET->INIT)",
            &mut init,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT,
        )?;
        let mut rtr = blank_attr(ibv_qp_state::IBV_QPS_RTR);
        rtr.path_mtu = path.mtu.verbs_code();
        rtr.ah_attr = path.local_av();
        self.modify(
            "ibv_modify_qp(DCI INIT->RTR)",
            &mut rtr,
            m::IBV_QP_STATE | m::IBV_QP_PATH_MTU | m::IBV_QP_AV,
        )?;
        let mut rts = blank_attr(ibv_qp_state::IBV_QPS_RTS);
        rts.timeout = options.ack_timeout;
        rts.retry_cnt = options.retry_count.min(7);
        rts.rnr_retry = options.rnr_retry.min(7);
        rts.max_rd_atomic = rd_atomic;
        self.modify(
            "ibv_modify_qp(DCI RTR->RTS)",
            &mut rts,
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// Moves the queue pair to the error state: the NIC flushes everything outstanding.
    pub fn to_error(&self) -> Result<(), RdmaError> {
        let mut attr = blank_attr(ibv_qp_state::IBV_QPS_ERR);
        self.modify(
            "ibv_modify_qp(->ERR)",
            &mut attr,
            ibv_qp_attr_mask::IBV_QP_STATE,
        )
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        // SAFETY: the queue pair is alive and nothing else destroys it.
        let rc = unsafe { rdma_mummy_sys::ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            tracing::error!(device = %self.device, errno = rc, "ibv_destroy_qp of a DC queue pair failed");
        }
    }
}

/// A DC initiator and the interfaces work requests are built through.
pub(crate) struct Initiator {
    pub qp: RawQp,
    pub qpx: NonNull<ibv_qp_ex>,
    pub dv: NonNull<mlx5dv_qp_ex>,
}

// SAFETY: the pointers belong to `qp` and live as long as it; every use of them is under the
// owner's mutex (one ibv_wr_start..ibv_wr_complete at a time per queue pair).
unsafe impl Send for Initiator {}
// SAFETY: as above.
unsafe impl Sync for Initiator {}

impl Initiator {
    /// Posts `chunks` with ids `first_id..` to the DC target `dct_num` (reached through `ah`,
    /// presenting `dc_key`) as one batch: every work request between one `ibv_wr_start` and
    /// one `ibv_wr_complete` (one doorbell), each addressed with `mlx5dv_wr_set_dc_addr`. All
    /// or nothing: mlx5 rolls back a batch that `ibv_wr_complete` refuses. Returns its result
    /// (0, or an errno).
    ///
    /// `&mut self`: the owner's mutex keeps this the only batch being built on the DCI.
    pub fn post_batch(
        &mut self,
        op: Op,
        chunks: &[Chunk],
        first_id: u64,
        (ah, dct_num, dc_key): (&RawAh, u32, u64),
    ) -> i32 {
        let (qpx, dv) = (self.qpx.as_ptr(), self.dv.as_ptr());
        // SAFETY: `qpx` and `dv` belong to a live DCI created with RDMA WRITE and READ send
        // ops, and `&mut self` (under its owner's mutex) keeps this the only batch being built
        // on it. The address handle lives as long as the caller's peer, which the operation
        // borrows until its completions arrived. Each scatter/gather entry names memory the
        // caller's `LocalMemory` promises is registered under its lkey and stays valid until
        // the request's completion or flush: the operation awaits it (or, if dropped, breaks
        // the DCI and blocks until it), and the completion thread ends a request without one
        // only once the DCI is verifiably in the error state (`QueuePairs::is_stopped`), when
        // the NIC no longer touches that memory.
        unsafe {
            ibv_wr_start(qpx);
            for (i, c) in chunks.iter().enumerate() {
                (*qpx).wr_id = first_id + i as u64;
                (*qpx).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                match op {
                    Op::Write => ibv_wr_rdma_write(qpx, c.rkey, c.remote_addr),
                    Op::Read => ibv_wr_rdma_read(qpx, c.rkey, c.remote_addr),
                }
                mlx5dv_wr_set_dc_addr(dv, ah.as_ptr(), dct_num, dc_key);
                ibv_wr_set_sge(qpx, c.lkey, c.local_addr, c.len);
            }
            ibv_wr_complete(qpx)
        }
    }
}

/// This port's side of every DC path: what DC targets and initiators are moved to RTR with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DcPath {
    pub port: u8,
    pub pkey_index: u16,
    pub service_level: u8,
    /// RoCE (or a routed InfiniBand fabric): source GID index, traffic class, hop limit.
    pub grh: Option<(u8, u8, u8)>,
    /// One path MTU for every peer: an initiator's MTU is set once, not per target.
    pub mtu: Mtu,
}

impl DcPath {
    /// Built from the fabric's address of this port towards itself, which carries the source
    /// GID index, traffic class, service level and MTU the fabric chose.
    pub fn for_device(device: &RdmaDevice) -> Result<Self, RdmaError> {
        let local = device.runtime().local_endpoint(device.plan())?;
        let plan = device.runtime().address_for(device.plan(), &local)?;
        let grh = plan
            .grh
            .map(|g| Ok::<_, RdmaError>((sgid_index(g.sgid_index)?, g.traffic_class, g.hop_limit)))
            .transpose()?;
        Ok(Self {
            port: plan.port,
            pkey_index: plan.pkey_index,
            service_level: plan.service_level,
            grh,
            mtu: plan.path_mtu,
        })
    }

    fn local_av(&self) -> ibv_ah_attr {
        let mut attr = av(self.port, 0, self.service_level);
        if let Some((sgid_index, traffic_class, hop_limit)) = self.grh {
            attr.is_global = 1;
            attr.grh.sgid_index = sgid_index;
            attr.grh.traffic_class = traffic_class;
            attr.grh.hop_limit = hop_limit;
        }
        attr
    }
}
