//! The completion thread of a DCI pool: one CQ for every initiator. Like the RC pair's thread
//! (spin briefly while completions come, then sleep on the completion channel), but each
//! completion is credited to its own DCI and peer, deadlines break only the late request's DCI,
//! and drained broken DCIs are reset and returned to service.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{ibv_cq, ibv_poll_cq, ibv_req_notify_cq, ibv_wc};
use sideway::ibverbs::completion::CompletionQueue as _;

use crate::core::FLUSH_GRACE;
use crate::dc::pool::PoolCore;
use crate::dc::table::DcRequest;
use crate::inflight::{outcome, timeout_error};
use crate::metrics_names::{STATUS_LABEL, WC_ERRORS_TOTAL};
use crate::status::WcStatus;

const SPIN: Duration = Duration::from_micros(50);
const BATCH: usize = 16;
const DEADLINE_CHECK: Duration = Duration::from_millis(5);

pub(crate) fn spawn(core: Arc<PoolCore>) -> Result<std::thread::JoinHandle<()>, std::io::Error> {
    std::thread::Builder::new()
        .name(format!("rdma-dci-{}", core.dci_nums[0]))
        .spawn(move || run(&core))
}

fn run(core: &PoolCore) {
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
            next_deadline = check_deadlines(core, now);
            last_check = now;
        }
        core.repair_drained();
        if core.shutdown.load(Ordering::Acquire) && in_flight(core) == 0 {
            return;
        }
        if now.duration_since(last_completion) < SPIN {
            std::hint::spin_loop();
            continue;
        }
        // SAFETY: `cq` is alive (see above).
        unsafe { ibv_req_notify_cq(cq, 0) };
        if drain(core, cq, &mut wcs) {
            last_completion = Instant::now();
            continue;
        }
        let next_deadline = next_deadline.or_else(|| check_deadlines(core, Instant::now()));
        crate::completion::sleep_until_event(
            core.channel_fd(),
            core.wake_fd(),
            channel,
            next_deadline,
        );
        last_check = Instant::now() - DEADLINE_CHECK;
    }
}

fn in_flight(core: &PoolCore) -> usize {
    core.table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len()
}

fn drain(core: &PoolCore, cq: *mut ibv_cq, wcs: &mut [ibv_wc; BATCH]) -> bool {
    let mut any = false;
    loop {
        // SAFETY: `cq` is alive; `wcs` has room for BATCH entries.
        let n = unsafe { ibv_poll_cq(cq, BATCH as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            for dci in 0..core.dcis.len() {
                core.break_dci(dci, &format!("ibv_poll_cq failed (errno {})", -n));
            }
            std::thread::sleep(Duration::from_millis(10));
            return any;
        }
        if n == 0 {
            return any;
        }
        any = true;
        for wc in &wcs[..n as usize] {
            on_completion(core, wc);
        }
        if (n as usize) < BATCH {
            return any;
        }
    }
}

/// Credits the request's window and DCI, settles its operation, and breaks its DCI on error.
fn on_completion(core: &PoolCore, wc: &ibv_wc) {
    let taken = core
        .table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take(wc.wr_id);
    let Some(request) = taken else {
        tracing::warn!(
            qp_num = wc.qp_num,
            wr_id = wc.wr_id,
            "completion for an unknown DC work request"
        );
        return;
    };
    let status = WcStatus(wc.status);
    let qp_num = core.dci_nums[request.dci];
    let result = outcome(
        &request.base,
        status,
        wc.vendor_err,
        qp_num,
        core.options.op_deadline,
    );
    if !status.is_success() {
        metrics::counter!(WC_ERRORS_TOTAL, STATUS_LABEL => status.metric_label()).increment(1);
        let reason = if status == WcStatus::WR_FLUSH_ERR {
            "work requests were flushed".to_owned()
        } else {
            format!("{} completed with {status}", request.base.op.name())
        };
        core.break_dci(request.dci, &reason);
    }
    finish(core, request, status, result);
}

fn finish(
    core: &PoolCore,
    request: DcRequest,
    status: WcStatus,
    result: Result<(), crate::error::RdmaError>,
) {
    request.window.complete(status);
    core.selector
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .release(request.dci, request.peer, 1);
    core.sq_freed.notify_waiters();
    request.base.slot.settle_one(result);
}

/// Breaks DCIs with late requests and ends requests the NIC never flushed.
fn check_deadlines(core: &PoolCore, now: Instant) -> Option<Instant> {
    let deadline = core.options.op_deadline;
    let expiry = core
        .table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .expire(now, deadline, FLUSH_GRACE);
    for (dci, op) in expiry.newly_late {
        core.break_dci(
            dci,
            &format!(
                "{} got no completion within {} ms",
                op.name(),
                deadline.as_millis()
            ),
        );
    }
    for request in expiry.abandoned {
        let error = timeout_error(core.dci_nums[request.dci], request.base.op, deadline);
        finish(core, request, WcStatus::WR_FLUSH_ERR, Err(error));
    }
    expiry.next
}

impl PoolCore {
    pub fn wake_thread(&self) {
        crate::completion::wake(self.wake_fd());
    }
}
