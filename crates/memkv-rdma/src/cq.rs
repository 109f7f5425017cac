//! A completion queue whose events arrive on its own non-blocking completion channel, and the
//! eventfd that wakes the thread sleeping on it: what a completion thread polls and sleeps on.
//! An RC pair has one; a DC initiator pool shares one between its initiators.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use rdma_mummy_sys::{
    ibv_ack_cq_events, ibv_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq, ibv_wc,
};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue as _};

use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::status::WcStatus;

/// Completions taken per ibv_poll_cq call (basic CQ: rdma-core 44's extended poller breaks
/// rxe when drained in a loop).
pub(crate) const POLL_BATCH: usize = 16;

/// Room for the completions of one poll.
pub(crate) struct WcBatch([ibv_wc; POLL_BATCH]);

impl WcBatch {
    pub fn new() -> Self {
        // SAFETY: ibv_wc is plain C data; all-zero is valid.
        Self(unsafe { std::mem::zeroed() })
    }
}

/// What a completion thread needs of one work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub vendor_err: u32,
    /// The queue pair the request was posted on.
    pub qp_num: u32,
}

impl From<&ibv_wc> for WorkCompletion {
    fn from(wc: &ibv_wc) -> Self {
        Self {
            wr_id: wc.wr_id,
            status: WcStatus(wc.status),
            vendor_err: wc.vendor_err,
            qp_num: wc.qp_num,
        }
    }
}

pub(crate) struct NotifiedCq {
    // Field order is drop order: the queue before its channel.
    pub cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
}

impl NotifiedCq {
    /// A queue of `depth` entries on a fresh non-blocking completion channel.
    pub fn new(device: &RdmaDevice, depth: u32) -> Result<Self, RdmaError> {
        let fail = |call, e: &dyn std::fmt::Display| RdmaError::Verbs {
            call,
            device: device.name().to_owned(),
            errno: 0,
            reason: e.to_string(),
        };
        let channel = device
            .context()
            .create_comp_channel()
            .map_err(|e| fail("ibv_create_comp_channel", &e))?;
        channel
            .set_nonblocking(true)
            .map_err(|e| RdmaError::verbs("fcntl(O_NONBLOCK)", device.name(), &e))?;
        let cq = device
            .context()
            .create_cq_builder()
            .setup_cqe(depth)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| fail("ibv_create_cq", &e))?;
        Ok(Self { cq, channel })
    }

    /// Takes up to [`POLL_BATCH`] completions into `batch`; Err: the negative return of
    /// `ibv_poll_cq`.
    pub fn poll<'a>(&self, batch: &'a mut WcBatch) -> Result<&'a [ibv_wc], i32> {
        // SAFETY: the CQ is alive while `self` is; the batch has room for POLL_BATCH entries.
        let n = unsafe { ibv_poll_cq(self.cq_ptr(), POLL_BATCH as i32, batch.0.as_mut_ptr()) };
        if n < 0 {
            return Err(n);
        }
        Ok(&batch.0[..(n as usize).min(POLL_BATCH)])
    }

    /// Asks for an event on the channel at the next completion. A completion that arrived
    /// before arming raises none: poll once more after arming.
    pub fn arm(&self) {
        // SAFETY: the CQ is alive while `self` is.
        unsafe { ibv_req_notify_cq(self.cq_ptr(), 0) };
    }

    fn cq_ptr(&self) -> *mut ibv_cq {
        // SAFETY: the pointer is only used while `self`, which holds the CQ, is alive.
        unsafe { self.cq.cq() }.as_ptr()
    }

    /// Blocks until the channel has an event, `wake` is signalled, or `deadline` passes; takes
    /// and acknowledges the event so the caller can poll the queue.
    pub fn sleep_until_event(&self, wake: &WakeFd, deadline: Option<Instant>) {
        let timeout_ms = deadline.map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now());
            // Round up so that the deadline has passed when poll returns.
            i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX)
        });
        let mut fds = [
            libc::pollfd {
                fd: self.channel.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if rc <= 0 {
            return;
        }
        if fds[0].revents != 0 {
            let mut event_cq: *mut ibv_cq = std::ptr::null_mut();
            let mut context: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the pointer is only used while `self`, which holds the channel, is alive.
            let channel = unsafe { self.channel.comp_channel() }.as_ptr();
            // SAFETY: the channel is alive and non-blocking; both out-pointers are valid.
            let got = unsafe { ibv_get_cq_event(channel, &mut event_cq, &mut context) };
            if got == 0 && !event_cq.is_null() {
                // SAFETY: `event_cq` is the CQ the event was for (ours; one CQ per channel),
                // and this acknowledges exactly the one event just taken.
                unsafe { ibv_ack_cq_events(event_cq, 1) };
            }
        }
        if fds[1].revents != 0 {
            wake.drain();
        }
    }
}

/// A non-blocking eventfd that wakes a completion thread sleeping in
/// [`NotifiedCq::sleep_until_event`] (new work after an idle spell, a broken queue pair,
/// shutdown).
pub(crate) struct WakeFd(OwnedFd);

impl WakeFd {
    pub fn new(device: &str) -> Result<Self, RdmaError> {
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(RdmaError::verbs(
                "eventfd",
                device,
                &std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` is a freshly created descriptor nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd; a full counter (EAGAIN)
        // still leaves the fd readable, which is all that matters.
        unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    fn drain(&self) {
        let mut counter = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&raw mut counter).cast(), 8) };
    }
}
