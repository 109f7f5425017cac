//! A reliable-connected queue pair end with one registered buffer, built through sideway, for
//! tests that move bytes over real verbs (Soft-RoCE in the test VM).

use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, PollCompletionQueueError, WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, QueuePairType,
    SetScatterGatherEntry, WorkRequestFlags,
};

const PORT: u8 = 1;
/// Soft-RoCE under an emulated CPU moves a few MB/s; a 1 MiB transfer takes well under this.
const COMPLETION_DEADLINE: Duration = Duration::from_secs(60);

/// What a peer needs to connect to an end and to reach its buffer.
#[derive(Debug, Clone, Copy)]
pub struct EndAddress {
    pub qp_number: u32,
    pub gid: Gid,
    pub packet_sequence: u32,
    pub buffer_addr: u64,
    pub rkey: u32,
}

/// One side of an RC connection. Fields drop in order: the queue pair before the memory
/// region, the region before the mapping it covers.
pub struct RcEnd {
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    mr: Arc<MemoryRegion>,
    buffer: MmapMut,
    gid_index: u8,
    gid: Gid,
    path_mtu: Mtu,
    packet_sequence: u32,
    next_wr_id: u64,
    _context: Arc<DeviceContext>,
}

pub fn open_device(name: &str) -> Arc<DeviceContext> {
    let list = DeviceList::new().expect("ibv_get_device_list");
    let device = list
        .iter()
        .find(|device| device.name() == name)
        .unwrap_or_else(|| panic!("RDMA device {name} not found"));
    device
        .open()
        .unwrap_or_else(|e| panic!("opening {name}: {e}"))
}

impl RcEnd {
    /// Opens `device`, registers an anonymous mapping of `len` bytes and creates an RC queue
    /// pair in RESET. `packet_sequence` is this end's first send PSN.
    pub fn new(device: &str, gid_index: u8, len: usize, packet_sequence: u32) -> Self {
        let context = open_device(device);
        let port = context.query_port(PORT).expect("ibv_query_port");
        assert_eq!(
            port.port_state(),
            PortState::Active,
            "{device} port {PORT} is not ACTIVE"
        );
        let gid = context
            .query_gid(PORT, gid_index.into())
            .expect("ibv_query_gid");
        let pd = context.alloc_pd().expect("ibv_alloc_pd");
        let cq = context
            .create_cq_builder()
            .setup_cqe(16)
            .build()
            .expect("ibv_create_cq");
        let buffer = MmapMut::map_anon(len).expect("mmap of the test buffer");
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
        // SAFETY: the mapping is valid for `len` bytes and outlives the region: `RcEnd` owns
        // both and drops `mr` before `buffer` (field order).
        let mr = unsafe { pd.reg_mr(buffer.as_ptr() as usize, len, access) }
            .unwrap_or_else(|e| panic!("ibv_reg_mr of {len} bytes on {device}: {e}"));
        let qp = pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(4)
            .setup_max_recv_wr(4)
            .setup_send_cq(Arc::clone(&cq))
            .setup_recv_cq(Arc::clone(&cq))
            .build()
            .expect("ibv_create_qp");
        RcEnd {
            qp,
            cq,
            mr,
            buffer,
            gid_index,
            gid,
            path_mtu: port.active_mtu(),
            packet_sequence: packet_sequence & 0x00ff_ffff,
            next_wr_id: 1,
            _context: context,
        }
    }

    pub fn address(&self) -> EndAddress {
        EndAddress {
            qp_number: self.qp.qp_number(),
            gid: self.gid,
            packet_sequence: self.packet_sequence,
            buffer_addr: self.buffer.as_ptr() as u64,
            rkey: self.mr.rkey(),
        }
    }

    pub fn buffer(&self) -> &[u8] {
        &self.buffer
    }

    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buffer
    }

    /// Moves the queue pair RESET -> INIT -> RTR -> RTS towards `peer`. INIT -> RTR resolves
    /// the peer's address and may block for about a second.
    pub fn connect(&mut self, peer: &EndAddress) {
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(PORT)
            .setup_access_flags(access);
        self.qp.modify(&init).expect("RESET -> INIT");

        let mut path = AddressHandleAttribute::new();
        path.setup_port(PORT)
            .setup_dest_lid(0)
            .setup_service_level(0)
            .setup_grh(&peer.gid, 0, self.gid_index, 64, 0);
        let mut rtr = QueuePairAttribute::new();
        // rxe refuses RTR without max_dest_rd_atomic and min_rnr_timer.
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.path_mtu)
            .setup_dest_qp_num(peer.qp_number)
            .setup_rq_psn(peer.packet_sequence)
            .setup_max_dest_read_atomic(1)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&path);
        self.qp.modify(&rtr).expect("INIT -> RTR");

        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.packet_sequence)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        self.qp.modify(&rts).expect("RTR -> RTS");
    }

    /// RDMA WRITE of this end's first `len` buffer bytes to the peer's buffer; waits for it.
    pub fn write_to(&mut self, peer: &EndAddress, len: usize) -> Result<(), String> {
        self.one_sided(peer, len, OneSided::Write)
    }

    /// RDMA READ of the peer's first `len` buffer bytes into this end's buffer; waits for it.
    pub fn read_from(&mut self, peer: &EndAddress, len: usize) -> Result<(), String> {
        self.one_sided(peer, len, OneSided::Read)
    }

    fn one_sided(&mut self, peer: &EndAddress, len: usize, op: OneSided) -> Result<(), String> {
        assert!(
            len <= self.buffer.len(),
            "{len} bytes do not fit the {}-byte buffer",
            self.buffer.len()
        );
        let length =
            u32::try_from(len).map_err(|_| format!("{len} bytes exceed one work request"))?;
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let mut guard = self.qp.start_post_send();
        let request = guard.construct_wr(wr_id, WorkRequestFlags::Signaled);
        let local = match op {
            OneSided::Write => request.setup_write(peer.rkey, peer.buffer_addr),
            OneSided::Read => request.setup_read(peer.rkey, peer.buffer_addr),
        };
        // SAFETY: the range lies inside `buffer`, which `mr` (key `lkey`) registers; both live as
        // long as `self`, and the caller cannot touch the buffer until `wait_for` returns,
        // because this method holds `&mut self` until the completion arrives.
        unsafe { local.setup_sge(self.mr.lkey(), self.buffer.as_ptr() as u64, length) };
        guard.post().map_err(|e| format!("ibv_post_send: {e}"))?;
        self.wait_for(wr_id)
    }

    /// Waits for the completion of `wr_id`, taking completions one poll at a time and reading
    /// every polled one (a dropped poller loses the rest of its batch).
    fn wait_for(&self, wr_id: u64) -> Result<(), String> {
        let deadline = Instant::now() + COMPLETION_DEADLINE;
        loop {
            match self.cq.start_poll() {
                Ok(poller) => {
                    // Read the raw status: converting an unknown value to sideway's enum panics.
                    let completions: Vec<(u64, u32, u32)> = poller
                        .map(|wc| (wc.wr_id(), wc.status(), wc.vendor_err()))
                        .collect();
                    for (id, status, vendor_err) in completions {
                        if status != WorkCompletionStatus::Success as u32 {
                            return Err(format!(
                                "work request {id} completed with status {status} \
                                 (vendor error {vendor_err:#x})"
                            ));
                        }
                        if id == wr_id {
                            return Ok(());
                        }
                    }
                }
                Err(PollCompletionQueueError::CompletionQueueEmpty) => {}
                Err(e) => return Err(format!("ibv_poll_cq: {e}")),
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no completion for work request {wr_id} in {COMPLETION_DEADLINE:?}"
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[derive(Clone, Copy)]
enum OneSided {
    Write,
    Read,
}

/// Deterministic bytes that differ per `seed`, so that a stale buffer never matches by chance.
pub fn fill_pattern(buffer: &mut [u8], seed: u64) {
    // An odd multiplier maps distinct seeds to distinct, non-zero (for seed != u64::MAX) states.
    let mut state = seed
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .max(1);
    for chunk in buffer.chunks_mut(8) {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}
