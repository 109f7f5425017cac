//! The clients connected now, for `/v1/status`: one entry per authenticated connection with
//! its peer address, how its values move (TCP, RDMA RC or DC) and what it has done so far.
//!
//! A connection's transport starts as `tcp` and turns `rdma-rc` / `rdma-dc` when it sets up a
//! queue pair with Connect, or when it carries the RDMA data path's control messages
//! (Allocate, Commit, Lookup, ...). A client may send those on a pooled connection other than
//! the one its Connect went over; such a connection takes the RDMA kind of another connection
//! from the same host that did Connect, and RC when there is none (a server without a DC
//! target serves RC only).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::admin::ClientStatus;
use crate::metrics::Transport;

const TCP: u8 = 0;
const RDMA_RC: u8 = 1;
const RDMA_DC: u8 = 2;
const SHM: u8 = 3;

fn encode(t: Transport) -> u8 {
    match t {
        Transport::Tcp => TCP,
        Transport::RdmaRc => RDMA_RC,
        Transport::RdmaDc => RDMA_DC,
        Transport::Shm => SHM,
    }
}

fn decode(v: u8) -> Transport {
    match v {
        RDMA_RC => Transport::RdmaRc,
        RDMA_DC => Transport::RdmaDc,
        SHM => Transport::Shm,
        _ => Transport::Tcp,
    }
}

/// One connected client's counters.
#[derive(Debug)]
pub struct ClientEntry {
    pub id: u64,
    pub peer: SocketAddr,
    connected_unix: u64,
    connected: Instant,
    transport: AtomicU8,
    ops: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

impl ClientEntry {
    pub fn transport(&self) -> Transport {
        decode(self.transport.load(Ordering::Relaxed))
    }

    /// Counts one finished operation and the value bytes it moved.
    pub fn record(&self, bytes_in: u64, bytes_out: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
    }
}

/// Every client connected now, by registration order.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientEntry>>>,
}

/// Keeps a client listed; dropping it (the connection closing) removes it.
#[derive(Debug)]
pub struct ClientGuard {
    registry: Arc<ClientRegistry>,
    pub entry: Arc<ClientEntry>,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.entry.id);
    }
}

impl ClientRegistry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientEntry>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a client that has just authenticated.
    pub fn register(self: &Arc<Self>, peer: SocketAddr) -> ClientGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(ClientEntry {
            id,
            peer,
            connected_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            connected: Instant::now(),
            transport: AtomicU8::new(TCP),
            ops: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        });
        self.lock().insert(id, Arc::clone(&entry));
        ClientGuard {
            registry: Arc::clone(self),
            entry,
        }
    }

    /// Records that `client` set up a one-sided transport of this kind (a successful Connect,
    /// or LocalAttach).
    pub fn connected_one_sided(&self, client: &ClientEntry, kind: Transport) {
        client.transport.store(encode(kind), Ordering::Relaxed);
    }

    /// The transport a one-sided control message (Allocate, Lookup, ...) on `client`'s
    /// connection is served over: the connection's own kind, else that of a connection from
    /// the same host that did Connect or LocalAttach, else `default`. The answer sticks to
    /// the connection.
    pub fn one_sided_kind(&self, client: &ClientEntry, default: Transport) -> Transport {
        let own = client.transport();
        if own.is_one_sided() {
            return own;
        }
        let kind = self
            .lock()
            .values()
            .filter(|c| c.id != client.id && c.peer.ip() == client.peer.ip())
            .map(|c| c.transport())
            .find(|t| t.is_one_sided())
            .unwrap_or(default);
        client.transport.store(encode(kind), Ordering::Relaxed);
        kind
    }

    /// `/v1/status`'s client list; `device` is the RDMA device RDMA clients are served over.
    pub fn snapshot(&self, device: Option<&str>) -> Vec<ClientStatus> {
        self.lock()
            .values()
            .map(|c| {
                let transport = c.transport();
                ClientStatus {
                    id: c.id,
                    peer: c.peer.to_string(),
                    transport: transport.as_str().to_owned(),
                    device: device.filter(|_| transport.is_rdma()).map(str::to_owned),
                    connected_at_unix: c.connected_unix,
                    connected_secs: c.connected.elapsed().as_secs(),
                    ops: c.ops.load(Ordering::Relaxed),
                    bytes_in: c.bytes_in.load(Ordering::Relaxed),
                    bytes_out: c.bytes_out.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_listed_while_connected_and_inherit_their_hosts_rdma_kind() {
        let registry = Arc::new(ClientRegistry::default());
        let a = registry.register("10.0.0.1:5000".parse().unwrap());
        let b = registry.register("10.0.0.1:5001".parse().unwrap());
        let other = registry.register("10.0.0.2:5000".parse().unwrap());
        registry.connected_one_sided(&a.entry, Transport::RdmaDc);
        assert_eq!(
            registry.one_sided_kind(&b.entry, Transport::RdmaRc),
            Transport::RdmaDc
        );
        assert_eq!(
            registry.one_sided_kind(&other.entry, Transport::RdmaRc),
            Transport::RdmaRc
        );
        b.entry.record(10, 20);
        let list = registry.snapshot(Some("mlx5_0"));
        assert_eq!(list.len(), 3);
        assert_eq!(list[1].transport, "rdma-dc");
        assert_eq!(list[1].device.as_deref(), Some("mlx5_0"));
        assert_eq!(
            (list[1].ops, list[1].bytes_in, list[1].bytes_out),
            (1, 10, 20)
        );
        drop(a);
        let list = registry.snapshot(None);
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|c| c.device.is_none()));
    }

    #[test]
    fn a_tcp_client_stays_tcp() {
        let registry = Arc::new(ClientRegistry::default());
        let c = registry.register("127.0.0.1:1".parse().unwrap());
        c.entry.record(5, 0);
        let list = registry.snapshot(Some("rxe0"));
        assert_eq!(list[0].transport, "tcp");
        assert_eq!(list[0].device, None);
    }
}
