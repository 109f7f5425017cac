//! `memkv.Client`: the blocking client. Every call releases the GIL while it waits, so one
//! client serves many Python threads at once.

use std::sync::Mutex;

use memkv_client::{Client as RustClient, Transport};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::buffer::ByteBuffer;
use crate::config::Args;
use crate::errors::{collect, none, plain, to_py};
use crate::keys;
use crate::regions::{self, Regions};
use crate::runtime::{MadeIn, block_on, block_on_lending};

/// The Rust client behind a Python object, until `close()`.
pub struct Shared {
    client: Mutex<Option<RustClient>>,
    pub made_in: MadeIn,
    /// As configured: what the client does once connected does not say it (see `transport`).
    configured: Transport,
    /// Buffers handed to `register`, kept alive (and exported) as long as the client.
    pub regions: Regions,
}

impl Shared {
    pub fn connect(py: Python<'_>, args: Args) -> PyResult<Shared> {
        let config = args.resolve()?;
        let configured = config.transport;
        let client = block_on(py, RustClient::connect(config))?.map_err(to_py)?;
        Ok(Shared {
            client: Mutex::new(Some(client)),
            made_in: MadeIn::here(),
            configured,
            regions: Regions::default(),
        })
    }

    /// A handle to the client (cheap: clones share connections), or why there is none.
    pub fn get(&self) -> PyResult<RustClient> {
        self.made_in.check("client")?;
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| crate::errors::Error::new_err("the client is closed"))
    }

    pub fn close(&self) {
        let client = self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
        if !self.made_in.is_here() {
            // In a fork, the client's sockets are still registered with the parent's event
            // loop (one epoll instance, shared across the fork): dropping them here would
            // deregister them there too. The parent's objects are left as they are.
            std::mem::forget(client);
            self.regions.forget();
            return;
        }
        drop(client);
        self.regions.clear();
    }

    pub fn transport(&self) -> PyResult<String> {
        let c = self.get()?;
        let local = c.shared_memory_servers();
        if self.configured == Transport::Shm {
            // Nothing else moves values under `shm` (a server that cannot be attached fails
            // the operation), and servers attach on first use, not at connect: the client's
            // own `tcp (transport shm)` would describe neither.
            let rest: Vec<&str> = c
                .servers()
                .into_iter()
                .filter(|s| !local.iter().any(|l| l == s))
                .collect();
            return Ok(match (local.is_empty(), rest.is_empty()) {
                (_, true) => format!("shm with {}", local.join(",")),
                (true, false) => format!("shm, not attached: {}", rest.join(",")),
                (false, false) => format!(
                    "shm with {}; not attached: {}",
                    local.join(","),
                    rest.join(",")
                ),
            });
        }
        let remote = match (c.transport(), c.rdma_fallback_reason()) {
            ("rdma", _) => format!("rdma over {}", c.rdma_rails().join(",")),
            // Chosen, not fallen back to: "tcp (transport tcp)" would only repeat it.
            (other, _) if self.configured == Transport::Tcp => other.to_owned(),
            (other, Some(why)) => format!("{other} ({why})"),
            (other, None) => other.to_owned(),
        };
        Ok(if local.is_empty() {
            remote
        } else {
            format!("shm with {}; others {remote}", local.join(","))
        })
    }

    /// A batch put as every class makes it: written one-sided from registered memory when all
    /// the values lie in one region, else through the client's ordinary batch path. The future
    /// owns the keys and buffers and hands them back, to be released where the caller likes.
    pub fn put_many(
        &self,
        keys: Vec<Vec<u8>>,
        values: Vec<ByteBuffer>,
    ) -> PyResult<impl Future<Output = PutMany> + Send + 'static> {
        let client = self.get()?;
        let routed = self.regions.route(&values);
        Ok(async move {
            let results = regions::put_many(&client, routed, &keys, &values).await;
            PutMany {
                keys,
                results,
                values,
            }
        })
    }

    /// Registers `buffer` with the NIC (RDMA), or keeps it exported (TCP, where any buffer
    /// moves without registration). Registration pins the pages: the GIL is released for it.
    pub fn register(&self, py: Python<'_>, buffer: ByteBuffer) -> PyResult<()> {
        let client = self.get()?;
        py.detach(|| self.regions.register(&client, buffer))
            .map_err(to_py)
    }
}

/// What [`Shared::put_many`] did, with what it was given.
pub struct PutMany {
    pub keys: Vec<Vec<u8>>,
    pub results: Vec<memkv_client::Result<()>>,
    pub values: Vec<ByteBuffer>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !self.made_in.is_here() {
            self.close();
        }
    }
}

/// Exports one readable buffer per value.
pub fn readable_all(values: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<ByteBuffer>> {
    values
        .try_iter()?
        .enumerate()
        .map(|(i, v)| ByteBuffer::readable(&v?, &format!("{what}[{i}]")))
        .collect()
}

/// Exports one writable buffer per value, refusing any two that share a byte.
pub fn writable_all(buffers: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<ByteBuffer>> {
    let bufs = buffers
        .try_iter()?
        .enumerate()
        .map(|(i, b)| ByteBuffer::writable(&b?, &format!("{what}[{i}]")))
        .collect::<PyResult<Vec<_>>>()?;
    if let Some((a, b)) = first_overlap(bufs.iter().map(ByteBuffer::span)) {
        // Each buffer becomes a `&mut [u8]` written by its own reader task, concurrently:
        // two over the same bytes would be aliasing mutable slices, a data race in Rust terms
        // and not merely a garbled result.
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{what}[{a}] and {what}[{b}] overlap: each key needs its own memory to be read into"
        )));
    }
    Ok(bufs)
}

/// Two positions, lower first, whose `(address, length)` spans share a byte. Empty spans share
/// none.
fn first_overlap(spans: impl Iterator<Item = (usize, usize)>) -> Option<(usize, usize)> {
    let mut spans: Vec<(usize, usize, usize)> = spans
        .enumerate()
        .filter(|(_, (_, len))| *len > 0)
        .map(|(i, (start, len))| (start, start.saturating_add(len), i))
        .collect();
    spans.sort_unstable();
    // Sorted by start, a span overlaps an earlier one iff it starts before the furthest end
    // seen so far.
    let mut furthest: Option<(usize, usize)> = None;
    for (start, end, i) in spans {
        match furthest {
            Some((reach, j)) if start < reach => return Some((i.min(j), i.max(j))),
            Some((reach, _)) if reach >= end => {}
            _ => furthest = Some((end, i)),
        }
    }
    None
}

fn two<T>(v: Vec<T>) -> Option<(T, T)> {
    let [a, b]: [T; 2] = v.try_into().ok()?;
    Some((a, b))
}

/// `(key, value)` pairs from any iterable.
pub fn items(items: &Bound<'_, PyAny>) -> PyResult<(Vec<Vec<u8>>, Vec<ByteBuffer>)> {
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for (i, item) in items.try_iter()?.enumerate() {
        let item = item?;
        // A tuple or a list of two; extraction refuses anything else.
        let pair: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = item
            .extract()
            .ok()
            .or_else(|| item.extract::<Vec<Bound<'_, PyAny>>>().ok().and_then(two));
        let (key, value) = pair.ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "items[{i}]: expected a (key, value) pair"
            ))
        })?;
        keys.push(keys::named_key(&key, Some(&format!("items[{i}] key")))?);
        values.push(ByteBuffer::readable(&value, &format!("items[{i}] value"))?);
    }
    Ok((keys, values))
}

pub fn check_counts(keys: usize, buffers: usize) -> PyResult<()> {
    if keys != buffers {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{keys} keys but {buffers} buffers: give one buffer per key"
        )));
    }
    Ok(())
}

/// A value as `bytes`, a miss as `None`.
pub fn bytes_or_none(py: Python<'_>, value: Option<Vec<u8>>) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Some(v) => PyBytes::new(py, &v).into_any().unbind(),
        None => py.None(),
    })
}

/// A blocking memkv client.
#[pyclass(module = "memkv._memkv", frozen)]
pub struct Client {
    shared: Shared,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (servers=None, auth_key=None, transport=None, timeout_ms=None, config=None))]
    fn new(
        py: Python<'_>,
        servers: Option<&Bound<'_, PyAny>>,
        auth_key: Option<&Bound<'_, PyAny>>,
        transport: Option<String>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        config: Option<std::path::PathBuf>,
    ) -> PyResult<Client> {
        let args = Args::from_py(servers, auth_key, transport, timeout_ms, config)?;
        Ok(Client {
            shared: Shared::connect(py, args)?,
        })
    }

    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        let value = ByteBuffer::readable(value, "value")?;
        match self.shared.regions.route(std::slice::from_ref(&value)) {
            Some(routed) => {
                let keys = [key];
                let mut results = block_on(
                    py,
                    regions::put_many(&c, Some(routed), &keys, std::slice::from_ref(&value)),
                )?;
                // One key: its own error, as any single put reports it (not a batch's).
                results.pop().expect("one result").map_err(to_py)
            }
            None => block_on(py, c.put(&key, value.as_slice()))?.map_err(to_py),
        }
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        let value = block_on(py, c.get(&key))?.map_err(to_py)?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    fn get_into(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<Option<usize>> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        let mut buf = ByteBuffer::writable(buffer, "buffer")?;
        let lent = ByteBuffer::watch(std::slice::from_mut(&mut buf));
        match self.shared.regions.route(std::slice::from_ref(&buf)) {
            Some(routed) => {
                let keys = [key];
                let (mut results, _buffers) = block_on_lending(
                    py,
                    lent.clone(),
                    regions::get_many_into(&c, Some(routed), &keys, vec![buf], lent),
                )?;
                results.pop().expect("one result").map_err(to_py)
            }
            None => {
                // The buffer comes back to be released here, with the GIL held.
                let (result, _buffer) =
                    block_on_lending(py, lent.clone(), regions::get_into(&c, &key, buf, lent))?;
                result.map_err(to_py)
            }
        }
    }

    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        block_on(py, c.delete(&key))?.map_err(to_py)
    }

    fn exists(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let c = self.shared.get()?;
        let key = keys::key(key)?;
        block_on(py, c.exists(&key))?.map_err(to_py)
    }

    fn put_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let (keys, values) = self::items(items)?;
        // The buffers come back to be released here, with the GIL held.
        let done = block_on(py, self.shared.put_many(keys, values)?)?;
        collect("put_many", &done.keys, done.results, none).map(drop)
    }

    fn get_many<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        let results = block_on(py, c.get_batch(&keys))?;
        collect("get_many", &keys, results, bytes_or_none)
    }

    fn get_many_into(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        let mut bufs = writable_all(buffers, "buffers")?;
        check_counts(keys.len(), bufs.len())?;
        let routed = self.shared.regions.route(&bufs);
        let lent = ByteBuffer::watch(&mut bufs);
        let (results, _buffers) = block_on_lending(
            py,
            lent.clone(),
            regions::get_many_into(&c, routed, &keys, bufs, lent),
        )?;
        collect("get_many_into", &keys, results, plain)
    }

    fn exists_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        let results = block_on(py, c.exists_batch(&keys))?;
        collect("exists_many", &keys, results, plain)
    }

    fn delete_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
        let c = self.shared.get()?;
        let keys = keys::keys(keys)?;
        let results = block_on(py, c.delete_batch(&keys))?;
        collect("delete_many", &keys, results, plain)
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

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.shared.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.shared.get() {
            Ok(c) => format!("memkv.Client(servers={:?})", c.servers()),
            Err(_) => "memkv.Client(closed)".into(),
        }
    }
}
