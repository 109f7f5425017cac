//! The same-host transport, client side: values of servers on this host are copied straight
//! into and out of the server's arena, mapped into this process, instead of travelling
//! through a socket. The control messages are RDMA's (Allocate / Commit, Lookup / Release);
//! only the transfer is a `memcpy` (fused with the checksum).
//!
//! Layers, each using only those before it:
//! 1. [`attach`]: LocalAttach on an authenticated connection, the token traded for the arena's
//!    memfd on the server's Unix socket, the mapping.
//! 2. [`path`]: which servers are attached, which are not (and until when), `auto` vs `shm`.
//! 3. [`values`]: puts and gets of many values with one attached server.
//! 4. [`routes`]: the client's operations served locally where they can be; the rest go on
//!    to RDMA or TCP.

pub(crate) mod attach;
pub(crate) mod path;
pub(crate) mod routes;
pub(crate) mod values;

pub(crate) use path::LocalPath;
