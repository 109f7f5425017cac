//! RDMA for the client, in layers; a module uses only those listed before it:
//!
//! 1. [`plan`]: pure arithmetic, which bytes go over which rail in which piece.
//! 2. [`rails`], [`channel`]: one RDMA device's state and health; one server's queue pair (RC)
//!    or DC target.
//! 3. [`path`]: the transport, its rails, sessions with servers and the `auto` fallback.
//! 4. [`buffer`]: caller memory registered with a rail; the checksum check of values read.
//! 5. [`mover`]: moving the bytes of many values at once over the rails (WRITE / READ).
//! 6. [`control`]: the TCP control messages around a transfer (Allocate, Commit, Abort,
//!    Lookup, Release).
//! 7. [`values`]: puts and gets of many values with one server: control, then one transfer.
//! 8. [`single`], [`batch`], [`registered`]: the client's single-value and batch operations
//!    over RDMA, and batches to and from a registered buffer.
//!
//! The client's core (`crate::client`: placement, pools, deadlines) sits between 3 and 4: it
//! holds the [`path::RdmaPath`], and layers 4 and up are operations on it.

pub(crate) mod batch;
pub(crate) mod buffer;
pub(crate) mod channel;
pub(crate) mod control;
pub(crate) mod fallback;
pub(crate) mod mover;
pub(crate) mod path;
pub(crate) mod plan;
pub(crate) mod rails;
pub(crate) mod registered;
pub(crate) mod single;
pub(crate) mod values;

pub use buffer::RdmaBuffer;
pub(crate) use path::RdmaPath;
pub use rails::{RDMA_BYTES_TOTAL, RailStats};
