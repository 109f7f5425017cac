//! Dynamically Connected transport (mlx5 only, through mlx5dv).
//!
//! - [`RdmaDevice::dc_support`](crate::RdmaDevice::dc_support): whether an opened device can do
//!   DC, and if not, why ([`DcUnavailable`]).
//! - [`DcTarget`]: one per server device, an SRQ plus a DC target (DCT) in RTR that accepts
//!   RDMA READ and WRITE from any initiator presenting the DC access key. The server advertises
//!   its DCT number ([`DcTarget::local_endpoint`]); both sides derive the key.
//! - [`DciPool`]: `rdma.num_dcis` DC initiators (DCIs) in RTS sharing one completion queue and
//!   completion thread; [`DciPool::add_peer`] builds an address handle per server, then
//!   [`DciPool::write`] / [`DciPool::read`] and their batched forms work like
//!   [`RcQueuePair`](crate::RcQueuePair)'s, under the same per-peer congestion window.
//! - [`choose_transport`]: DC when both sides can, RC otherwise, with the reason.
//!
//! DC cannot run on Soft-RoCE, so everything that talks to the device is untested on
//! hardware; the policies (transport choice, DCI selection, in-flight accounting) are pure and
//! unit-tested. `unsafe` lives in `ffi`, `handles` and `verbs`; the in-flight table, completion
//! thread and operation loop are the crate's, shared with RC.

mod capability;
mod choice;
mod ffi;
mod handles;
mod initiators;
mod ops;
mod pool;
mod selector;
mod target;
pub(crate) mod unavailable;
mod verbs;

pub use capability::{DcCaps, DcSupport};
pub use choice::{Transport, TransportDecision, TransportPreference, choose_transport};
pub use pool::{DcPeer, DciPool, MAX_DCIS};
pub use selector::{Assignment, DciSelector};
pub use target::DcTarget;
pub use unavailable::DcUnavailable;
