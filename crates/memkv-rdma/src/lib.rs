//! memkv-rdma: the verbs data plane.
//!
//! - [`RdmaDevice::open`] opens the port the fabric plan allows ([`memkv_fabric::Fabric`]).
//! - Memory: [`RdmaDevice::register_arena`] (the server's arena, one region peers READ and
//!   WRITE), [`RegisteredBuffer`] (library-owned, safe), [`RdmaDevice::register_user`]
//!   (caller buffers), [`StagingPool`] (for data that is not registered).
//! - [`RcQueuePair`]: created in INIT, advertised with [`RcQueuePair::local_endpoint`] (the
//!   Connect payload), connected with [`RcQueuePair::connect`], then async one-sided
//!   [`RcQueuePair::write`] / [`RcQueuePair::read`] and their batched forms ([`block_on`]
//!   runs them from plain threads). A completion thread per queue pair settles operations; a per-peer congestion window ([`window`])
//!   bounds the work requests in flight.
//! - [`dc`]: Dynamically Connected transport on mlx5 ([`DcTarget`], [`DciPool`],
//!   [`choose_transport`]); built and unit-tested, untested on hardware.
//!
//! `unsafe` lives in the verbs and memory layers (`core`, `post`, `completion`, `memory`,
//! `staging`, `device`, `dc::verbs`, `dc::handles`, `dc::post`, `dc::completion`).

pub mod block;
mod completion;
mod core;
pub mod dc;
pub mod device;
mod endpoint;
pub mod error;
pub mod gate;
mod inflight;
pub mod memory;
pub mod metrics_names;
mod op;
mod ops;
mod options;
mod post;
pub mod qp;
mod slot;
pub mod staging;
pub mod status;
pub mod transfer;
pub mod window;

/// The recorder double the integration tests use, shared with the unit tests.
#[cfg(test)]
#[path = "../tests/metrics_probe/mod.rs"]
mod metrics_probe;

pub use block::block_on;
pub use dc::{
    DcPeer, DcSupport, DcTarget, DcUnavailable, DciPool, Transport, TransportDecision,
    TransportPreference, choose_transport,
};
pub use device::{PortLimits, RdmaDevice};
pub use error::RdmaError;
pub use gate::PeerWindow;
pub use memkv_proto::connect::RdmaEndpoint;
pub use memory::{CallerMemory, LocalMemory, MemoryRegion, RegisteredBuffer};
pub use qp::{QpOptions, QpTransport, RcQueuePair};
pub use staging::{StagingBuffer, StagingPool};
pub use status::WcStatus;
pub use transfer::Transfer;
pub use window::CongestionWindow;
