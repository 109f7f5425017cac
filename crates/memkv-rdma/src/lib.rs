//! memkv-rdma: the verbs data plane.
//!
//! - [`RdmaDevice::open`] opens the port the fabric plan allows ([`memkv_fabric::Fabric`]).
//! - Memory: [`RdmaDevice::register_arena`] (the server's arena, one region peers READ and
//!   WRITE), [`RegisteredBuffer`] (library-owned, safe), [`RdmaDevice::register_user`]
//!   (caller buffers), [`StagingPool`] (for data that is not registered).
//! - [`RcQueuePair`]: created in INIT, advertised with [`RcQueuePair::local_endpoint`] (the
//!   Connect payload), connected with [`RcQueuePair::connect`], then async one-sided
//!   [`RcQueuePair::write`] / [`RcQueuePair::read`] and their batched forms ([`block_on`]
//!   runs them from plain threads). A completion thread per queue pair settles operations;
//!   a per-peer congestion window ([`window`]) bounds the work requests in flight.
//! - [`dc`]: Dynamically Connected transport on mlx5 ([`DcTarget`], [`DciPool`],
//!   [`choose_transport`]); built and unit-tested, untested on hardware.
//!
//! Layers, bottom to top. A module uses only modules of lower layers or, within its layer,
//! ones before it in the total order that `tests/layering.rs` lists and checks against every
//! `crate::` path, so no module imports one above it and there are no cycles:
//!
//! 1. Bookkeeping, pure: `error`, `status`, `metrics_names`, `op`, `options`, `slot`,
//!    `window`, `gate` (the window behind an async wait), `transfer`, `endpoint`, `inflight`
//!    (the table of posted work requests, generic over the transport), `block`,
//!    `dc::unavailable`, `dc::selector`, `chunks` (the server staging region's accounting).
//! 2. Verbs resources: `device`, `memory`, `lent` (disjoint pieces of a registered buffer,
//!    lent so that READs into them run at once), `staging`, `remote_staging` (the server's staging
//!    region for drive-backed storage), `cq` (a completion queue with its channel, and the
//!    eventfd that wakes its thread), `rc::verbs`, `dc::ffi`, `dc::handles`, `dc::verbs`,
//!    `dc::capability`, `dc::choice`, `dc::target`.
//! 3. Completion: `work_requests` (ids, in-flight table, doorbells), `completion` (the thread
//!    of one CQ, generic over `completion::QueuePairs`: one RC pair, or a DC pool's
//!    initiators), and the transports' shared state behind it: `rc::pair`, `dc::initiators`.
//! 4. Operations: `ops` (one operation's chains under the peer's window, generic over
//!    `ops::Sender`), the handles `qp` and `dc::pool`, then `rc::ops` and `dc::ops` (the
//!    public WRITE/READ methods and each transport's `Sender`).
//!
//! `unsafe` lives in the verbs layer only: `memory`, `staging`, `remote_staging`, `cq`,
//! `rc::verbs`, `dc::ffi`, `dc::handles`, `dc::verbs`. Every block carries a `// SAFETY:` note.

// Layer 1: bookkeeping.
pub mod block;
pub mod chunks;
mod endpoint;
pub mod error;
pub mod gate;
mod inflight;
pub mod metrics_names;
mod op;
mod options;
mod slot;
pub mod status;
pub mod transfer;
pub mod window;
// Layer 2: verbs resources.
mod cq;
pub mod device;
mod lent;
pub mod memory;
pub mod remote_staging;
pub mod staging;
// Layer 3: completion.
mod completion;
mod work_requests;
// Layer 4: operations.
mod ops;
pub mod qp;
// RC and DC span layers 2 to 4 (see above).
pub mod dc;
mod rc;

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
pub use lent::{LentPieces, SharedPieces};
pub use memkv_proto::connect::RdmaEndpoint;
pub use memory::{CallerMemory, LocalMemory, MemoryRegion, RegisteredBuffer};
pub use qp::{QpOptions, QpTransport, RcQueuePair};
pub use remote_staging::{RemoteStaging, StagedRange, StagingUsage};
pub use staging::{StagingBuffer, StagingPool};
pub use status::WcStatus;
pub use transfer::Transfer;
pub use window::CongestionWindow;
