//! `memkv.AsyncClient`: `Client`'s operations as asyncio coroutines, run on the package's
//! tokio runtime (the event loop never blocks on memkv I/O).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::asyncio::future_into_py;
use crate::buffer::ByteBuffer;
use crate::client::{Shared, bytes_or_none, check_counts, items, writable_all};
use crate::config::Args;
use crate::errors::{collect, none, plain, to_py};
use crate::keys;
use crate::regions;

/// `bytes` made once the interpreter is attached again.
fn to_bytes(value: Option<Vec<u8>>) -> Option<Py<PyBytes>> {
    value.map(|v| Python::attach(|py| PyBytes::new(py, &v).unbind()))
}

/// An asyncio memkv client. Subclassed by `memkv.AsyncClient` (python/memkv/__init__.py),
/// which keeps a cancelled read's buffers until the read lets go of them.
#[pyclass(module = "memkv._memkv", frozen, subclass)]
pub struct AsyncClient {
    shared: Arc<Shared>,
}

#[pymethods]
impl AsyncClient {
    #[new]
    #[pyo3(signature = (servers=None, auth_key=None, transport=None, timeout_ms=None, config=None))]
    fn new(
        py: Python<'_>,
        servers: Option<&Bound<'_, PyAny>>,
        auth_key: Option<&Bound<'_, PyAny>>,
        transport: Option<String>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        config: Option<std::path::PathBuf>,
    ) -> PyResult<AsyncClient> {
        crate::runtime::install_for_asyncio()?;
        let args = Args::from_py(servers, auth_key, transport, timeout_ms, config)?;
        Ok(AsyncClient {
            shared: Arc::new(Shared::connect(py, args)?),
        })
    }

    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        let value = ByteBuffer::readable(value, "value")?;
        future_into_py(py, async move {
            c.put(&key, value.as_slice()).await.map_err(to_py)
        })
    }

    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        future_into_py(py, async move {
            Ok(to_bytes(c.get(&key).await.map_err(to_py)?))
        })
    }

    fn get_into<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        buffer: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        let mut buf = ByteBuffer::writable(buffer, "buffer")?;
        let lent = ByteBuffer::watch(std::slice::from_mut(&mut buf));
        future_into_py(py, async move {
            let (result, _buffer) = regions::get_into(&c, &key, buf, lent).await;
            result.map_err(to_py)
        })
    }

    fn delete<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        future_into_py(py, async move { c.delete(&key).await.map_err(to_py) })
    }

    fn exists<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        future_into_py(py, async move { c.exists(&key).await.map_err(to_py) })
    }

    fn put_many<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (keys, values) = self::items(items)?;
        let put = self.shared.put_many(keys, values)?;
        future_into_py(py, async move {
            let done = put.await;
            collect("put_many", &done.keys, done.results, none).map(drop)
        })
    }

    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        future_into_py(py, async move {
            let results = c.get_batch(&keys).await;
            collect("get_many", &keys, results, bytes_or_none)
        })
    }

    fn get_many_into<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        buffers: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        let mut bufs = writable_all(buffers, "buffers")?;
        check_counts(keys.len(), bufs.len())?;
        let routed = self.shared.regions.route(&bufs);
        let lent = ByteBuffer::watch(&mut bufs);
        future_into_py(py, async move {
            let (results, _buffers) = regions::get_many_into(&c, routed, &keys, bufs, lent).await;
            collect("get_many_into", &keys, results, plain)
        })
    }

    fn exists_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        future_into_py(py, async move {
            let results = c.exists_batch(&keys).await;
            collect("exists_many", &keys, results, plain)
        })
    }

    fn delete_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        future_into_py(py, async move {
            let results = c.delete_batch(&keys).await;
            collect("delete_many", &keys, results, plain)
        })
    }

    fn register(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let buffer = ByteBuffer::writable(buffer, "buffer")?;
        self.shared.register(py, buffer)
    }

    #[getter]
    fn transport(&self) -> PyResult<String> {
        self.shared.transport()
    }

    #[getter]
    fn servers(&self) -> PyResult<Vec<String>> {
        Ok(self
            .shared
            .get()?
            .servers()
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    fn close(&self) {
        self.shared.close();
    }
}
