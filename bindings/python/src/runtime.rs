//! One tokio runtime for the whole process: the blocking `Client` waits on it with the GIL
//! released, `AsyncClient` hands its futures to asyncio through it, and `MemkvConnector` runs
//! its batches on it.

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

pub fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("memkv-io")
            .enable_all()
            .build()
            .expect("memkv: cannot start the I/O runtime")
    })
}

/// Runs `work` to completion with the GIL released.
pub fn block_on<F>(py: Python<'_>, work: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    py.detach(|| runtime().block_on(work))
}

/// Tells pyo3-async-runtimes to use our runtime for `AsyncClient`'s futures.
pub fn install_for_asyncio() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED
        .get_or_init(|| pyo3_async_runtimes::tokio::init_with_runtime(runtime()).unwrap_or(()));
}
