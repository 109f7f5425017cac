//! `memkv.MemkvConnector`: the submit / complete contract of LMCache's native connectors
//! (`native_plugin` L2 adapters, `ConnectorClientBase`). Submits return a future id at once;
//! each batch runs on the package's runtime holding its buffers; when it is done the buffers
//! are released, its completion is queued and the one eventfd is written.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memkv_client::{Client as RustClient, Error as ClientError, Result as ClientResult};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rustix::event::{EventfdFlags, eventfd};
use tokio::task::JoinHandle;

use crate::buffer::ByteBuffer;
use crate::client::{Shared, check_counts, readable_all, writable_all};
use crate::config::Args;
use crate::errors::describe;
use crate::keys;
use crate::regions;
use crate::runtime::{block_on, on_runtime_thread, runtime};

/// `(future id, ok, error message, per-key results)`, as `drain_completions` returns them.
type Completion = (u64, bool, String, Option<Vec<bool>>);

/// What a finished batch reports.
struct Outcome {
    ok: bool,
    error: String,
    per_key: Option<Vec<bool>>,
}

impl Outcome {
    /// From per-item results: `hit` says whether a successful item counts as a hit; `ok`
    /// needs every item to succeed and, when `all_must_hit`, to hit.
    fn of<T>(
        op: &str,
        keys: &[Vec<u8>],
        results: Vec<ClientResult<T>>,
        hit: impl Fn(&T) -> bool,
        all_must_hit: bool,
        report_per_key: bool,
    ) -> Outcome {
        let total = results.len();
        let mut per_key = Vec::with_capacity(total);
        let mut failed: Vec<(Vec<u8>, ClientError)> = Vec::new();
        let mut misses = Vec::new();
        for (key, r) in keys.iter().zip(results) {
            match r {
                Ok(v) => {
                    let h = hit(&v);
                    if !h {
                        misses.push(keys::shown(key));
                    }
                    per_key.push(h);
                }
                Err(e) => {
                    per_key.push(false);
                    failed.push((key.clone(), e));
                }
            }
        }
        let mut error = String::new();
        if !failed.is_empty() {
            error = describe(op, total, &failed);
        }
        if all_must_hit && !misses.is_empty() {
            if !error.is_empty() {
                error.push_str("; ");
            }
            let missed = if op == "get" {
                "not found, or shorter than their buffers"
            } else {
                "not found"
            };
            error.push_str(&format!(
                "{op}: {} of {total} keys {missed}: {}",
                misses.len(),
                misses.join(", ")
            ));
        }
        Outcome {
            ok: error.is_empty(),
            error,
            per_key: report_per_key.then_some(per_key),
        }
    }
}

/// The completion queue and its eventfd, shared with running batches.
struct Completions(Mutex<Queue>);

struct Queue {
    /// `None` once the connector is closed.
    fd: Option<OwnedFd>,
    done: Vec<Completion>,
}

impl Completions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, id: u64, outcome: Outcome) {
        let mut q = self.lock();
        // A batch submitted while `close` ran ends after it: nobody can drain it any more.
        let Some(fd) = &q.fd else { return };
        // Adds 1 to the counter; fails only if it would overflow, when readers are woken anyway.
        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        q.done
            .push((id, outcome.ok, outcome.error, outcome.per_key));
    }

    /// LMCache's consumers poll the eventfd and call `drain_completions` without reading it, so
    /// the counter is cleared here (or it stays readable and they spin).
    fn drain(&self) -> PyResult<Vec<Completion>> {
        let mut q = self.lock();
        let fd = q.fd.as_ref().ok_or_else(closed)?;
        let mut counter = [0u8; 8];
        // EAGAIN (already zero) is the only expected failure on a non-blocking eventfd.
        let _ = rustix::io::read(fd, &mut counter);
        Ok(std::mem::take(&mut q.done))
    }

    fn raw_fd(&self) -> PyResult<i32> {
        self.lock()
            .fd
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(closed)
    }

    /// Closes the eventfd (a process polling it sees it go) and drops what was not drained.
    fn close(&self) {
        let mut q = self.lock();
        q.fd = None;
        q.done.clear();
    }
}

fn closed() -> PyErr {
    crate::errors::Error::new_err("the connector is closed")
}

/// LMCache's native connector contract over a memkv client.
#[pyclass(module = "memkv._memkv", frozen)]
pub struct MemkvConnector {
    shared: Shared,
    completions: Arc<Completions>,
    next_id: AtomicU64,
    running: Mutex<Running>,
}

/// The batches in flight, and whether `close` has ended them.
#[derive(Default)]
struct Running {
    batches: Vec<JoinHandle<()>>,
    /// Set by `close` once no batch is left to wait for: a later submit is refused. `close`
    /// waits with the GIL released, and a batch another thread submitted meanwhile that it
    /// did not wait for went on writing into its buffers after `close` returned, its
    /// completion (the only word that the memory is free) dropped with the eventfd.
    closed: bool,
}

impl MemkvConnector {
    /// Runs `work` (which owns the batch's buffers) and completes future `id` with its outcome,
    /// releasing the buffers first: a completion tells the caller its memory is free again.
    /// Refused once `close` has run.
    fn spawn<B, F>(&self, work: F) -> PyResult<u64>
    where
        B: Send + 'static,
        F: Future<Output = (Outcome, B)> + Send + 'static,
    {
        let mut running = self.running();
        if running.closed {
            drop(running);
            // Releasing the buffers may run Python code (a finalizer), which may use `self`.
            drop(work);
            return Err(crate::errors::Error::new_err("the client is closed"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let completions = Arc::clone(&self.completions);
        let handle = runtime().spawn(async move {
            let (outcome, buffers) = work.await;
            // Releasing Python buffers takes the GIL: not on an I/O thread.
            let release = tokio::task::spawn_blocking(move || {
                drop(buffers);
                completions.push(id, outcome);
            });
            let _ = release.await;
        });
        running.batches.retain(|h| !h.is_finished());
        running.batches.push(handle);
        Ok(id)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn client(&self) -> PyResult<RustClient> {
        self.shared.get()
    }
}

#[pymethods]
impl MemkvConnector {
    #[new]
    #[pyo3(signature = (servers=None, auth_key=None, transport=None, timeout_ms=None, config=None))]
    fn new(
        py: Python<'_>,
        servers: Option<&Bound<'_, PyAny>>,
        auth_key: Option<&Bound<'_, PyAny>>,
        transport: Option<String>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        config: Option<std::path::PathBuf>,
    ) -> PyResult<MemkvConnector> {
        let args = Args::from_py(servers, auth_key, transport, timeout_ms, config)?;
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| {
            crate::errors::Error::new_err(format!("cannot create the completion eventfd: {e}"))
        })?;
        Ok(MemkvConnector {
            shared: Shared::connect(py, args)?,
            completions: Arc::new(Completions(Mutex::new(Queue {
                fd: Some(fd),
                done: Vec::new(),
            }))),
            next_id: AtomicU64::new(1),
            running: Mutex::default(),
        })
    }

    /// The eventfd written once per completed batch (read it, then `drain_completions`).
    fn event_fd(&self) -> PyResult<i32> {
        self.shared.made_in.check("connector")?;
        self.completions.raw_fd()
    }

    /// Reads each key's value into its buffer. `ok` only when every key was found and fit;
    /// the per-key list says which were.
    fn submit_batch_get(
        &self,
        keys: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let c = self.client()?;
        let keys = keys::keys(keys)?;
        let mut bufs = writable_all(buffers, "buffers")?;
        check_counts(keys.len(), bufs.len())?;
        let routed = self.shared.regions.route(&bufs);
        let lent = ByteBuffer::watch(&mut bufs);
        // A value shorter than its buffer leaves the rest of it stale: not loaded (LMCache's own
        // adapters count a short read as a failure too).
        let sizes: Vec<usize> = bufs.iter().map(ByteBuffer::len).collect();
        self.spawn(async move {
            let (results, bufs) = regions::get_many_into(&c, routed, &keys, bufs, lent).await;
            let whole = results
                .into_iter()
                .zip(sizes)
                .map(|(r, size)| r.map(|found| found == Some(size)))
                .collect();
            let outcome = Outcome::of("get", &keys, whole, |&whole: &bool| whole, true, true);
            (outcome, bufs)
        })
    }

    /// Stores each buffer under its key.
    fn submit_batch_set(
        &self,
        keys: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let keys = keys::keys(keys)?;
        let values = readable_all(buffers, "buffers")?;
        check_counts(keys.len(), values.len())?;
        let put = self.shared.put_many(keys, values)?;
        self.spawn(async move {
            let done = put.await;
            let outcome = Outcome::of("set", &done.keys, done.results, |_| true, false, false);
            (outcome, done.values)
        })
    }

    /// Whether each key exists (the per-key list).
    fn submit_batch_exists(&self, keys: &Bound<'_, PyAny>) -> PyResult<u64> {
        let c = self.client()?;
        let keys = keys::keys(keys)?;
        self.spawn(async move {
            let results = c.exists_batch(&keys).await;
            (
                Outcome::of("exists", &keys, results, |h| *h, false, true),
                (),
            )
        })
    }

    /// Removes each key (the per-key list says which existed).
    fn submit_batch_delete(&self, keys: &Bound<'_, PyAny>) -> PyResult<u64> {
        let c = self.client()?;
        let keys = keys::keys(keys)?;
        self.spawn(async move {
            let results = c.delete_batch(&keys).await;
            (
                Outcome::of("delete", &keys, results, |h| *h, false, true),
                (),
            )
        })
    }

    /// The batches completed since the last call, oldest first; resets the eventfd.
    fn drain_completions(&self) -> PyResult<Vec<Completion>> {
        // In a fork the eventfd is the parent's own (one counter across the fork): draining it
        // here would take the parent's wake-ups.
        self.shared.made_in.check("connector")?;
        self.completions.drain()
    }

    fn register(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let buffer = ByteBuffer::writable(buffer, "buffer")?;
        self.shared.register(py, buffer)
    }

    #[getter]
    fn transport(&self) -> PyResult<String> {
        self.shared.transport()
    }

    /// Waits for the batches in flight (each ends within the client's deadline), those other
    /// threads submit while it waits as well, then closes the client and the eventfd; every
    /// method but `close` raises `memkv.Error` after it.
    /// Interrupted (Ctrl-C), it raises with nothing closed; a later `close` waits again.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Called by a finalizer that a batch's buffer release ran on a memkv thread, it waits
        // for nothing: that batch cannot end before the finalizer does (each batch ends within
        // its deadline and releases its buffers then). In a fork, the batches are tasks of the
        // parent's runtime, whose threads are not in this process, so they never end here;
        // they are the parent's to finish.
        let waits = self.shared.made_in.is_here() && !on_runtime_thread();
        let left = loop {
            let batches = {
                let mut running = self.running();
                let batches = std::mem::take(&mut running.batches);
                if batches.is_empty() || !waits {
                    running.closed = true;
                    break batches;
                }
                batches
            };
            // Batches submitted while these are waited for are the next round's.
            let mut left = batches.into_iter();
            while let Some(mut handle) = left.next() {
                if let Err(interrupted) = block_on(py, &mut handle) {
                    // Still running: a later close waits for them again.
                    let mut running = self.running();
                    running.batches.push(handle);
                    running.batches.extend(left);
                    return Err(interrupted);
                }
            }
        };
        if !self.shared.made_in.is_here() {
            std::mem::forget(left);
        }
        self.shared.close();
        self.completions.close();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
