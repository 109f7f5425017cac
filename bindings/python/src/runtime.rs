//! One tokio runtime per process: the blocking `Client` waits on it with the GIL released,
//! `AsyncClient` hands its futures to asyncio through it, and `MemkvConnector` runs its
//! batches on it.
//!
//! A process forked after the runtime started (multiprocessing's `fork` start method)
//! inherits it without its threads, so anything waiting on it would wait forever. The child
//! starts a runtime of its own on first use; clients made before the fork (their connections
//! and tasks belong to the parent's runtime) refuse to work in the child, saying why.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;

use crate::buffer::Released;

/// The runtime and the process that started it.
static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);

pub fn runtime() -> &'static tokio::runtime::Runtime {
    let mut current = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    let pid = std::process::id();
    match *current {
        Some((started_by, rt)) if started_by == pid => rt,
        _ => {
            // A parent's runtime is left alone (leaked): dropping it would wait for threads
            // that do not exist in this process.
            let rt: &'static _ = Box::leak(Box::new(start()));
            *current = Some((pid, rt));
            rt
        }
    }
}

fn start() -> tokio::runtime::Runtime {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("memkv-io")
        .enable_all()
        .build()
        .expect("memkv: cannot start the I/O runtime")
}

/// The process a client was made in: used from another (a fork), it refuses.
#[derive(Clone, Copy)]
pub struct MadeIn(u32);

impl MadeIn {
    pub fn here() -> Self {
        MadeIn(std::process::id())
    }

    pub fn is_here(self) -> bool {
        self.0 == std::process::id()
    }

    pub fn check(self, what: &str) -> PyResult<()> {
        let pid = std::process::id();
        if self.0 == pid {
            return Ok(());
        }
        Err(crate::errors::Error::new_err(format!(
            "this {what} was made in process {} and this is process {pid}, a fork of it: its \
             connections belong to that process; make a new {what} here",
            self.0
        )))
    }
}

/// How long a blocking call waits before it looks at pending signals again: the delay
/// before Ctrl-C interrupts it.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `work` to completion with the GIL released. Every [`SIGNAL_CHECK`] it takes the GIL
/// to run Python's signal handlers; when one raises (Ctrl-C's KeyboardInterrupt), `work` is
/// dropped, which cancels the operation, and the exception is returned.
pub fn block_on<F>(py: Python<'_>, work: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut work = std::pin::pin!(work);
    loop {
        let step = py.detach(|| {
            wait(async {
                tokio::select! {
                    biased;
                    out = &mut work => Some(out),
                    () = tokio::time::sleep(SIGNAL_CHECK) => None,
                }
            })
        });
        match step {
            Some(out) => return Ok(out),
            None => py.check_signals()?,
        }
    }
}

/// [`block_on`] for an operation that lent the buffers `lent` watches to the client's
/// readers: interrupted, it returns once they are released, so that no read writes into
/// memory Python has got back (a reader whose caller is gone lets go at once).
pub fn block_on_lending<F>(py: Python<'_>, lent: Released, work: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut work = Box::pin(work);
    block_on(py, work.as_mut()).inspect_err(|_| {
        py.detach(|| {
            // Dropped with the GIL released: releasing a buffer takes it.
            drop(work);
            wait(lent.all());
        });
    })
}

/// Whether this thread is one of a runtime's (a worker, or one running blocking work), where
/// Python code runs only when memkv runs it: a finalizer run as a buffer is released.
pub fn on_runtime_thread() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Runs `work` on the runtime from any thread. Python code can run on the runtime's own
/// threads (a finalizer run when a buffer is released there), where the runtime's
/// `block_on` refuses to nest: there the worker hands its other tasks to a new thread while
/// it waits (`block_in_place`), so nothing it had queued waits on it.
fn wait<F>(work: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Err(_) => runtime().block_on(work),
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| runtime().block_on(work)),
        // Another library's single-threaded runtime: it cannot hand its tasks over, so the
        // wait happens on a thread of its own.
        Ok(_) => std::thread::scope(|s| {
            s.spawn(|| runtime().block_on(work))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }),
    }
}

/// Tells pyo3-async-runtimes to use our runtime for `AsyncClient`'s futures. It takes one
/// runtime for the life of the process, so a fork of a process that had used `AsyncClient`
/// cannot use it (the blocking `Client` works there).
pub fn install_for_asyncio() -> PyResult<()> {
    static INSTALLED_BY: OnceLock<u32> = OnceLock::new();
    let by = *INSTALLED_BY.get_or_init(|| {
        let _ = pyo3_async_runtimes::tokio::init_with_runtime(runtime());
        std::process::id()
    });
    if by == std::process::id() {
        return Ok(());
    }
    Err(crate::errors::Error::new_err(format!(
        "AsyncClient cannot run in this process: it is a fork of process {by}, which had used \
         AsyncClient (asyncio takes one I/O runtime per process); start this process with \
         multiprocessing's 'spawn' or 'forkserver' method, or use the blocking Client here"
    )))
}
