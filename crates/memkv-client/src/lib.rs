//! memkv-client: the Rust client for memkv servers.
//!
//! A [`Client`] spreads keys over a static server list by rendezvous hashing
//! ([`memkv_proto::placement`]), keeps a pool of authenticated TCP connections per server, and
//! multiplexes requests on each (responses complete out of order). Values move without being
//! copied into frame buffers: requests are written with vectored writes from the caller's
//! slices, and a get's value is read straight into the buffer returned. Every operation has a
//! deadline ([`Error::Timeout`]); a dead server fails only its own keys and is reconnected
//! with exponential backoff (50 ms to 2 s) when it returns.
//!
//! ```no_run
//! # async fn demo() -> memkv_client::Result<()> {
//! let client = memkv_client::Client::from_env().await?; // MEMKV_CONFIG, MEMKV_SERVERS, ...
//! client.put(b"layer7/block3", &[0u8; 4096]).await?;
//! assert!(client.get(b"layer7/block3").await?.is_some());
//! # Ok(()) }
//! ```
//!
//! Configuration: [`ClientConfig::from_env`]. Blocking callers: [`BlockingClient`]. Metrics:
//! [`metrics`] (feature `prometheus` serves them on `MEMKV_PROMETHEUS_BIND`).

#![forbid(unsafe_code)]

mod batch;
mod blocking;
mod by_server;
mod client;
pub mod config;
mod conn;
mod destination;
mod direct_get;
mod error;
mod local;
pub mod metrics;
mod ops;
mod plan;
mod pool;
mod rdma;
mod superseded;

pub use blocking::BlockingClient;
pub use client::Client;
pub use config::{ClientConfig, ConfigSources, Setting, Transport};
pub use destination::ReadDestination;
pub use error::{Error, Result};
/// The local auth key file (shared with the server: `memkv-config`).
pub use memkv_config::key_file;
pub use memkv_proto::messages::StatsResponse;
pub use memkv_proto::{AuthKey, Status};
pub use memkv_rdma::CallerMemory;
pub use pool::{BACKOFF_MAX, BACKOFF_MIN};
pub use rdma::{RDMA_BYTES_TOTAL, RailStats, RdmaBuffer};
