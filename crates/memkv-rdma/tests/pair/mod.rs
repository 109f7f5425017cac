//! Two ends connected through memkv-rdma's public API, the way the server and client do it:
//! devices opened from the fabric plan, an arena registered on the server, endpoints exchanged
//! through memkv-proto's Connect encoding.

#![allow(dead_code)]

use std::sync::Arc;

use memkv_fabric::{Fabric, FabricConfig};
use memkv_proto::connect::RdmaEndpoint;
use memkv_rdma::{MemoryRegion, QpOptions, RcQueuePair, RdmaDevice};
use memmap2::MmapMut;

use crate::support::RxeVm;

/// The server's arena: an anonymous mapping registered as one region. Fields drop in order:
/// the region before the mapping it covers.
pub struct Arena {
    pub region: MemoryRegion,
    pub map: MmapMut,
}

impl Arena {
    pub fn new(device: &RdmaDevice, len: usize) -> Arena {
        let mut map = MmapMut::map_anon(len).expect("mmap of the arena");
        // SAFETY: the mapping is valid for `len` bytes and outlives the region (field order).
        let region = unsafe { device.register_arena(map.as_mut_ptr(), len) }
            .unwrap_or_else(|e| panic!("register_arena of {len} bytes: {e}"));
        Arena { region, map }
    }

    pub fn addr(&self) -> u64 {
        self.region.addr()
    }

    pub fn rkey(&self) -> u32 {
        self.region.rkey()
    }
}

pub struct Pair {
    pub client: Arc<RcQueuePair>,
    pub server: RcQueuePair,
    pub arena: Arena,
    pub client_device: Arc<RdmaDevice>,
    pub server_device: Arc<RdmaDevice>,
    pub fabric: Fabric,
}

pub fn start_fabric(cfg: &FabricConfig) -> Fabric {
    Fabric::start(cfg, &[]).unwrap_or_else(|e| panic!("Fabric::start: {e}"))
}

/// Sends an endpoint through the Connect wire format, as the TCP control channel does.
pub fn over_the_wire(endpoint: &RdmaEndpoint) -> RdmaEndpoint {
    let bytes = endpoint.encode();
    assert_eq!(bytes.len(), RdmaEndpoint::LEN);
    RdmaEndpoint::decode(&bytes).expect("decoding a Connect payload")
}

/// Client on `client_device`, server (with an arena of `arena_len` bytes) on `server_device`.
pub fn connect(
    vm: &RxeVm,
    client_device: &str,
    server_device: &str,
    arena_len: usize,
    options: QpOptions,
) -> Pair {
    let fabric = start_fabric(&FabricConfig::default());
    let server_dev = RdmaDevice::open(&fabric, Some(server_device), None)
        .unwrap_or_else(|e| panic!("opening {server_device}: {e}"));
    let client_dev = RdmaDevice::open(&fabric, Some(client_device), None)
        .unwrap_or_else(|e| panic!("opening {client_device}: {e}"));
    let arena = Arena::new(&server_dev, arena_len);
    let server = server_dev.create_rc().expect("server create_rc");
    let client = client_dev
        .create_rc_with(options)
        .expect("client create_rc");
    let server_ep = over_the_wire(
        &server
            .local_endpoint(Some((arena.addr(), arena.rkey())))
            .expect("server endpoint"),
    );
    let client_ep = over_the_wire(&client.local_endpoint(None).expect("client endpoint"));
    // The fabric picked the IPv4-mapped RoCE v2 GID the VM set up.
    assert_eq!(client_ep.gid_index, u32::from(vm.gid_index));
    assert_eq!(server_ep.gid_index, u32::from(vm.gid_index));
    assert_eq!(
        (server_ep.arena_addr, server_ep.arena_rkey),
        (arena.addr(), arena.rkey())
    );
    // Each INIT -> RTR may block about a second resolving the peer: do both at once.
    std::thread::scope(|s| {
        let c = s.spawn(|| client.connect(&server_ep));
        server.connect(&client_ep).expect("server connect");
        c.join().unwrap().expect("client connect");
    });
    Pair {
        client: Arc::new(client),
        server,
        arena,
        client_device: client_dev,
        server_device: server_dev,
        fabric,
    }
}

/// Deterministic bytes that differ per `seed`, so that a stale buffer never matches by chance.
pub fn fill_pattern(buffer: &mut [u8], seed: u64) {
    let mut state = seed
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .max(1);
    for chunk in buffer.chunks_mut(8) {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}
