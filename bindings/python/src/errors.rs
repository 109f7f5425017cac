//! The exception hierarchy: `memkv.Error` and one subclass per kind of failure a caller acts
//! on differently. Messages are the client's own (they name the server and the limit).

use memkv_client::{Error as ClientError, Result as ClientResult};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};

pyo3::create_exception!(memkv, Error, PyException, "Any memkv failure.");
pyo3::create_exception!(
    memkv,
    TimeoutError,
    Error,
    "An operation missed its deadline."
);
pyo3::create_exception!(
    memkv,
    AuthenticationError,
    Error,
    "A server refused our key, or could not prove it holds it."
);
pyo3::create_exception!(
    memkv,
    TooLargeError,
    Error,
    "A key, value or batch exceeds a limit, or a value does not fit the caller's buffer."
);
pyo3::create_exception!(
    memkv,
    ServerUnavailableError,
    Error,
    "A server could not be reached, or the connection to it was lost."
);
pyo3::create_exception!(
    memkv,
    RdmaUnavailableError,
    Error,
    "RDMA was required (transport 'rdma') but no rail could be used, or a transfer failed."
);

/// `memkv.ConfigError`: bad client configuration. Also a `ValueError`, as bad argument values
/// (an empty server list, a short raw key) are in Python, and were before they were
/// `ConfigError`s: `except ValueError` keeps catching them.
pub struct ConfigError;

static CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

impl ConfigError {
    pub fn new_err(message: impl Into<String>) -> PyErr {
        let message = message.into();
        Python::attach(|py| match ConfigError::class(py) {
            Ok(class) => PyErr::from_type(class.clone(), message),
            Err(e) => e,
        })
    }

    fn class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
        CONFIG_ERROR
            .get_or_try_init(py, || {
                // Two bases: `create_exception!` takes one.
                let bases = (py.get_type::<Error>(), py.get_type::<PyValueError>());
                let namespace = PyDict::new(py);
                namespace.set_item("__module__", "memkv")?;
                namespace.set_item("__doc__", "Bad client configuration.")?;
                py.get_type::<PyType>()
                    .call1(("ConfigError", bases, namespace))?
                    .cast_into::<PyType>()
                    .map(Bound::unbind)
                    .map_err(PyErr::from)
            })
            .map(|class| class.bind(py))
    }
}

/// The exception class for one client error.
fn class(err: &ClientError) -> fn(String) -> PyErr {
    match err {
        ClientError::Timeout { .. } => TimeoutError::new_err,
        ClientError::Unauthorized { .. } => AuthenticationError::new_err,
        ClientError::TooLarge { .. } | ClientError::BufferTooSmall { .. } => TooLargeError::new_err,
        ClientError::Server { status, .. } if *status == memkv_client::Status::TooLarge => {
            TooLargeError::new_err
        }
        ClientError::Unreachable { .. } | ClientError::Disconnected { .. } => {
            ServerUnavailableError::new_err
        }
        ClientError::RdmaUnavailable { .. } | ClientError::Rdma { .. } => {
            RdmaUnavailableError::new_err
        }
        ClientError::Config(_) => |message| ConfigError::new_err(message),
        _ => Error::new_err,
    }
}

pub fn to_py(err: ClientError) -> PyErr {
    class(&err)(err.to_string())
}

/// One exception for a batch in which some items failed: it names every failed key with its
/// reason, and carries the keys as `.keys` (in the caller's order).
pub fn batch_error(op: &str, total: usize, failed: &[(Vec<u8>, ClientError)]) -> PyErr {
    let same_class = failed
        .windows(2)
        .all(|w| class(&w[0].1) as usize == class(&w[1].1) as usize);
    let make = if same_class {
        class(&failed[0].1)
    } else {
        Error::new_err
    };
    let err = make(describe(op, total, failed));
    Python::attach(|py| {
        let keys: Vec<&[u8]> = failed.iter().map(|(k, _)| k.as_slice()).collect();
        if let Ok(list) = PyList::new(py, keys) {
            // Best effort: the message already names the keys.
            let _ = err.value(py).setattr("keys", list);
        }
    });
    err
}

/// "op: 2 of 5 keys failed: "a": why; "b": why".
pub fn describe(op: &str, total: usize, failed: &[(Vec<u8>, ClientError)]) -> String {
    let reasons: Vec<String> = failed
        .iter()
        .map(|(key, e)| format!("{}: {e}", crate::keys::shown(key)))
        .collect();
    format!(
        "{op}: {} of {total} keys failed: {}",
        failed.len(),
        reasons.join("; ")
    )
}

/// Converts a batch's results for Python; when any item failed, raises one exception (see
/// `batch_error`) whose `.results` holds every item's outcome: its value, or the exception of
/// the item that failed, so callers keep what succeeded.
pub fn collect<T>(
    op: &str,
    keys: &[Vec<u8>],
    results: Vec<ClientResult<T>>,
    convert: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
) -> PyResult<Vec<Py<PyAny>>> {
    Python::attach(|py| {
        let total = results.len();
        let mut outcomes: Vec<Result<Py<PyAny>, ClientError>> = Vec::with_capacity(total);
        let mut failed = Vec::new();
        for (key, r) in keys.iter().zip(results) {
            match r {
                Ok(v) => outcomes.push(Ok(convert(py, v)?)),
                Err(e) => {
                    failed.push((key.clone(), e.clone()));
                    outcomes.push(Err(e));
                }
            }
        }
        if failed.is_empty() {
            return Ok(outcomes.into_iter().flatten().collect());
        }
        let err = batch_error(op, total, &failed);
        let per_item: Vec<Py<PyAny>> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|e| to_py(e).into_value(py).into_any()))
            .collect();
        err.value(py)
            .setattr("results", PyList::new(py, per_item)?)?;
        Err(err)
    })
}

/// `convert` for operations that return nothing (puts): `None`.
pub fn none(py: Python<'_>, _done: ()) -> PyResult<Py<PyAny>> {
    Ok(py.None())
}

/// `convert` for values that convert as they are (bool, int, None).
pub fn plain<T>(py: Python<'_>, v: T) -> PyResult<Py<PyAny>>
where
    T: for<'py> pyo3::IntoPyObject<'py>,
{
    use pyo3::IntoPyObjectExt;
    v.into_py_any(py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let error = py.get_type::<Error>();
    // Only a failed batch sets these; every other error reads them as None, not as missing.
    error.setattr("keys", py.None())?;
    error.setattr("results", py.None())?;
    m.add("Error", error)?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("AuthenticationError", py.get_type::<AuthenticationError>())?;
    m.add("TooLargeError", py.get_type::<TooLargeError>())?;
    m.add(
        "ServerUnavailableError",
        py.get_type::<ServerUnavailableError>(),
    )?;
    m.add(
        "RdmaUnavailableError",
        py.get_type::<RdmaUnavailableError>(),
    )?;
    m.add("ConfigError", ConfigError::class(py)?)?;
    Ok(())
}
