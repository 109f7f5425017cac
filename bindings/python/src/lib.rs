//! The native half of the `memkv` Python package (`memkv._memkv`): thin classes over
//! `memkv-client`. The Python half (`python/memkv`) re-exports them with type stubs.

mod async_client;
mod asyncio;
mod buffer;
mod client;
mod config;
mod connector;
mod errors;
mod keys;
mod regions;
mod runtime;
mod shutdown;

use pyo3::prelude::*;

#[pymodule]
fn _memkv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<async_client::AsyncClient>()?;
    m.add_class::<connector::MemkvConnector>()?;
    errors::register(m)?;
    shutdown::register(m)?;
    Ok(())
}
