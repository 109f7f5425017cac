//! `AsyncClient`'s operations as asyncio futures: each runs as a task on the package's runtime,
//! and completes its future through the loop's `call_soon_threadsafe`. The completion runs
//! attached on a runtime thread, so it holds a pass through the exit gate (`crate::shutdown`)
//! from the moment the operation finishes until the loop has been told.

use std::future::Future;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::task::AbortHandle;

use crate::runtime::runtime;
use crate::shutdown;

/// A future of the running event loop, completed with `fut`'s outcome; cancelling it drops
/// `fut`, which ends the operation.
pub fn future_into_py<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    shutdown::reopen_for_late_hook(py)?;
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let (event_loop, waiter) = (event_loop.unbind(), future.clone().unbind());
    let task = runtime().spawn(async move {
        let (out, pass) = shutdown::gated(fut).await;
        // Off the I/O threads: attaching may wait for the GIL.
        let _ = tokio::task::spawn_blocking(move || {
            let _pass = pass;
            // The references go while attached.
            Python::try_attach(move |py| complete(py, event_loop, waiter, out));
        })
        .await;
    });
    future.call_method1("add_done_callback", (CancelOnDone(task.abort_handle()),))?;
    Ok(future)
}

/// Hands `out` to the loop, to be set on `future` in the loop's thread.
fn complete<T>(py: Python<'_>, event_loop: Py<PyAny>, future: Py<PyAny>, out: PyResult<T>)
where
    T: for<'a> IntoPyObject<'a>,
{
    let (setter, value) = match out.and_then(|v| v.into_bound_py_any(py)) {
        Ok(v) => ("set_result", v),
        Err(e) => ("set_exception", e.into_value(py).into_bound(py).into_any()),
    };
    let handed = (|| -> PyResult<()> {
        let setter = future.bind(py).getattr(setter)?;
        let set = wrap_pyfunction!(set_unless_done, py)?;
        event_loop
            .bind(py)
            .call_method1("call_soon_threadsafe", (set, future, setter, value))?;
        Ok(())
    })();
    // A closed loop: whoever awaited the future is gone, and nobody is left to tell.
    drop(handed);
}

/// Sets the outcome unless the future was cancelled meanwhile.
#[pyfunction]
fn set_unless_done(
    future: &Bound<'_, PyAny>,
    setter: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if !future.call_method0("done")?.is_truthy()? {
        setter.call1((value,))?;
    }
    Ok(())
}

/// The future's done callback: a cancelled future ends its task (the operation is dropped).
#[pyclass(frozen)]
struct CancelOnDone(AbortHandle);

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()? {
            self.0.abort();
        }
        Ok(())
    }
}
