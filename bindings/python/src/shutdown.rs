//! memkv's runtime threads and the interpreter's exit.
//!
//! A runtime thread attaches to the interpreter to release a buffer it was lent, or to complete
//! an asyncio future (`crate::asyncio`). One still attached when `Py_FinalizeEx` starts (waiting
//! to take the GIL back mid-call) is ended there by CPython, and unwinding it drops Python
//! objects without the GIL: a segfault or an abort at exit. One that attaches after that start
//! is refused by PyO3 with a panic ("not initialized"), two of which (a batch's buffers) abort.
//!
//! So at exit (an `atexit` hook, which runs before finalization starts), a gate closes: it
//! waits, with the GIL released, for the runtime threads attached through it, and none attaches
//! after. What they would have done is left undone: a buffer keeps its export (its memory is
//! the process's, which is ending), an asyncio future is never completed (its loop is gone or
//! going).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};

use pyo3::prelude::*;

use crate::runtime::on_runtime_thread;

struct Gate {
    closed: bool,
    /// Runtime threads holding a [`Pass`].
    inside: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    closed: false,
    inside: 0,
});
static EMPTIED: Condvar = Condvar::new();

fn gate() -> MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Leave to attach from a runtime thread until dropped; the exit hook waits for it.
pub struct Pass(());

impl Pass {
    /// `None` once Python is exiting.
    fn take() -> Option<Pass> {
        let mut g = gate();
        if g.closed {
            return None;
        }
        g.inside += 1;
        Some(Pass(()))
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut g = gate();
        g.inside -= 1;
        if g.inside == 0 {
            EMPTIED.notify_all();
        }
    }
}

/// Runs `f` attached to the interpreter; `None`, having run nothing, when Python is exiting
/// (on a runtime thread, from the exit hook on) or gone.
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    let _pass = if on_runtime_thread() {
        Some(Pass::take()?)
    } else {
        None
    };
    Python::try_attach(f)
}

/// The exit hook: closes the gate, then waits for the threads inside.
#[pyfunction]
fn close_for_exit(py: Python<'_>) {
    gate().closed = true;
    py.detach(|| {
        let mut g = gate();
        while g.inside > 0 {
            g = EMPTIED.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    });
}

/// Registers the exit hook. Hooks run last registered first: one registered before memkv was
/// imported runs after this one (see [`reopen_for_late_hook`]).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(close_for_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}

/// Called from Python once the gate has closed but before finalization: an exit hook
/// registered before memkv's is running, and its futures must complete or it waits forever.
/// The gate stays open, unguarded as before it existed, for the little that is left.
pub fn reopen_for_late_hook(py: Python<'_>) -> PyResult<()> {
    if !gate().closed {
        return Ok(());
    }
    let finalizing = py
        .import("sys")?
        .getattr("is_finalizing")?
        .call0()?
        .is_truthy()?;
    if !finalizing {
        gate().closed = false;
    }
    Ok(())
}

/// `fut`, polled holding a pass, finishing with the pass that saw it finish (to complete
/// an asyncio future with). Once the gate is closed it is not polled again, and never finishes.
pub fn gated<F: Future>(fut: F) -> impl Future<Output = (F::Output, Pass)> {
    Gated(Box::pin(fut))
}

struct Gated<F>(Pin<Box<F>>);

impl<F: Future> Future for Gated<F> {
    type Output = (F::Output, Pass);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Not woken again: the task waits for the process to end.
        let Some(pass) = Pass::take() else {
            return Poll::Pending;
        };
        self.0.as_mut().poll(cx).map(|out| (out, pass))
    }
}
