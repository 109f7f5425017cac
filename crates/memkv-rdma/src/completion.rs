//! The completion thread of a queue pair: takes completions off its CQ and settles the
//! operations waiting for them. Adaptive: while completions keep coming it polls the CQ
//! (spinning for at most `SPIN`), then arms the CQ and sleeps in poll(2) on the completion
//! channel, so an idle pair costs no CPU. It also enforces operation deadlines.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{
    ibv_ack_cq_events, ibv_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq, ibv_wc,
};
use sideway::ibverbs::completion::CompletionQueue as _;

use crate::core::QpCore;

/// Busy-poll this long after the last completion before sleeping on the channel.
const SPIN: Duration = Duration::from_micros(50);
/// Completions taken per ibv_poll_cq call (basic CQ: rdma-core 44's extended poller breaks
/// rxe when drained in a loop).
const BATCH: usize = 16;
/// Deadlines are checked this often while the thread is busy.
const DEADLINE_CHECK: Duration = Duration::from_millis(5);

pub(crate) fn spawn(core: Arc<QpCore>) -> Result<std::thread::JoinHandle<()>, std::io::Error> {
    std::thread::Builder::new()
        .name(format!("rdma-cq-{}", core.qp_num))
        .spawn(move || run(&core))
}

fn run(core: &QpCore) {
    // SAFETY: the CQ and channel live as long as `core`, which this thread holds.
    let cq = unsafe { core.cq.cq() }.as_ptr();
    // SAFETY: as above.
    let channel = unsafe { core.channel.comp_channel() }.as_ptr();
    // SAFETY: ibv_wc is plain C data; all-zero is valid.
    let mut wcs: [ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
    let mut last_completion = Instant::now();
    let mut last_check = Instant::now();
    loop {
        if drain(core, cq, &mut wcs) {
            last_completion = Instant::now();
        }
        let now = Instant::now();
        let mut next_deadline = None;
        if now.duration_since(last_check) >= DEADLINE_CHECK {
            next_deadline = core.check_deadlines(now);
            last_check = now;
        }
        if core.shutdown.load(Ordering::Acquire) && core.in_flight_count() == 0 {
            return;
        }
        if now.duration_since(last_completion) < SPIN {
            std::hint::spin_loop();
            continue;
        }
        // Arm, then look once more: a completion that arrived before arming raises no event.
        // SAFETY: `cq` is alive (see above).
        unsafe { ibv_req_notify_cq(cq, 0) };
        if drain(core, cq, &mut wcs) {
            last_completion = Instant::now();
            continue;
        }
        let next_deadline = next_deadline.or_else(|| core.check_deadlines(Instant::now()));
        sleep_until_event(core.channel_fd(), core.wake_fd(), channel, next_deadline);
        last_check = Instant::now() - DEADLINE_CHECK;
    }
}

/// Takes every available completion; true when there was at least one.
fn drain(core: &QpCore, cq: *mut ibv_cq, wcs: &mut [ibv_wc; BATCH]) -> bool {
    let mut any = false;
    loop {
        // SAFETY: `cq` is alive; `wcs` has room for BATCH entries.
        let n = unsafe { ibv_poll_cq(cq, BATCH as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            core.break_pair(&format!("ibv_poll_cq failed (errno {})", -n));
            std::thread::sleep(Duration::from_millis(10));
            return any;
        }
        if n == 0 {
            return any;
        }
        any = true;
        for wc in &wcs[..n as usize] {
            core.on_completion(wc);
        }
        if (n as usize) < BATCH {
            return any;
        }
    }
}

/// A completion queue of `depth` entries whose events arrive on its own non-blocking
/// completion channel, for a completion thread to sleep on ([`sleep_until_event`]).
pub(crate) fn notified_cq(
    device: &crate::device::RdmaDevice,
    depth: u32,
) -> Result<
    (
        std::sync::Arc<sideway::ibverbs::completion::CompletionChannel>,
        std::sync::Arc<sideway::ibverbs::completion::BasicCompletionQueue>,
    ),
    crate::error::RdmaError,
> {
    let fail = |call, e: &dyn std::fmt::Display| crate::error::RdmaError::Verbs {
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
        .map_err(|e| crate::error::RdmaError::verbs("fcntl(O_NONBLOCK)", device.name(), &e))?;
    let cq = device
        .context()
        .create_cq_builder()
        .setup_cqe(depth)
        .setup_comp_channel(&channel, 0)
        .build()
        .map_err(|e| fail("ibv_create_cq", &e))?;
    Ok((channel, cq))
}

/// Wakes a completion thread sleeping in [`sleep_until_event`] on `wake_fd` (its eventfd).
pub(crate) fn wake(wake_fd: std::os::fd::RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to the caller's eventfd; a full counter (EAGAIN)
    // still leaves the fd readable, which is all that matters.
    unsafe { libc::write(wake_fd, (&raw const one).cast(), 8) };
}

/// Blocks until the completion channel `channel` (readable on `channel_fd`) has an event, the
/// thread's eventfd `wake_fd` is signalled, or `deadline` passes; takes and acknowledges the
/// event so the caller can poll the queue. Shared by RC pairs and the DC initiator pool.
pub(crate) fn sleep_until_event(
    channel_fd: std::os::fd::RawFd,
    wake_fd: std::os::fd::RawFd,
    channel: *mut rdma_mummy_sys::ibv_comp_channel,
    deadline: Option<Instant>,
) {
    let timeout_ms = deadline.map_or(-1, |d| {
        let left = d.saturating_duration_since(Instant::now());
        // Round up so that the deadline has passed when poll returns.
        i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX)
    });
    let mut fds = [
        libc::pollfd {
            fd: channel_fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake_fd,
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
        // SAFETY: the channel is alive and non-blocking; both out-pointers are valid.
        let got = unsafe { ibv_get_cq_event(channel, &mut event_cq, &mut context) };
        if got == 0 && !event_cq.is_null() {
            // SAFETY: `event_cq` is the CQ the event was for (the caller's; one CQ per
            // channel), and this acknowledges exactly the one event just taken.
            unsafe { ibv_ack_cq_events(event_cq, 1) };
        }
    }
    if fds[1].revents != 0 {
        let mut counter = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        unsafe { libc::read(wake_fd, (&raw mut counter).cast(), 8) };
    }
}
