//! The server's RDMA path on real verbs, inside the Soft-RoCE VM (testing/rxe-vm): the server
//! registers its arena on rxe0; a client queue pair on rxe1 connects through Connect on the
//! authenticated TCP connection, then puts with Allocate + RDMA WRITE + Commit and gets with
//! Lookup + RDMA READ + Release. Also the fabric refusals that keep a server on TCP, and the one
//! that stops it from starting (rdma.mtu above the active MTU).

mod support;

use std::sync::Arc;

use memkv_fabric::{Fabric, FabricConfig};
use memkv_proto::connect::RdmaEndpoint;
use memkv_proto::messages::*;
use memkv_proto::{AuthKey, Opcode, Status, checksum};
use memkv_rdma::{RcQueuePair, RdmaDevice, RegisteredBuffer};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::{Raw, connect};

const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn config(server_device: &str, rdma_extra: &str) -> ServerConfig {
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 96 MiB\nrdma:\n  device: {server_device}\n{rdma_extra}"
    );
    ServerConfig::from_yaml_str(&yaml, "rxe test").expect("valid config")
}

struct RdmaClient {
    _fabric: Fabric,
    device: Arc<RdmaDevice>,
    qp: Arc<RcQueuePair>,
}

async fn rdma_connect(tcp: &mut Raw, client_device: &str) -> Result<RdmaClient, (Status, String)> {
    let fabric = Fabric::start(&FabricConfig::default(), &[client_device.to_owned()])
        .expect("client fabric");
    let device = RdmaDevice::open(&fabric, Some(client_device), None).expect("client device");
    let qp = Arc::new(device.create_rc().expect("client queue pair"));
    let local = qp.local_endpoint(None).expect("client endpoint");
    let (status, body) = tcp.call(Opcode::Connect, &[], &local.encode()).await;
    if status != Status::Ok {
        return Err((status, String::from_utf8_lossy(&body).into_owned()));
    }
    let server = RdmaEndpoint::decode(&body).expect("server endpoint");
    assert_ne!(server.arena_rkey, 0, "the server advertises its arena");
    qp.connect_async(&server)
        .await
        .expect("client queue pair to RTS");
    Ok(RdmaClient {
        _fabric: fabric,
        device,
        qp,
    })
}

#[tokio::test]
async fn put_and_get_one_sided_over_rc() {
    let Some(devices) = support::rxe_devices_or_skip("put_and_get_one_sided_over_rc") else {
        return;
    };
    let (server_dev, client_dev) = (devices[0].clone(), devices.last().unwrap().clone());
    let server = Server::start(config(&server_dev, ""))
        .await
        .expect("server starts");
    let mut tcp = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let client = rdma_connect(&mut tcp, &client_dev)
        .await
        .expect("Connect accepted");

    for size in [1usize, 4096, 1 << 20, 16 << 20] {
        let mut buf = RegisteredBuffer::new(&client.device, size).expect("registered buffer");
        for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
            *b = (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ size as u8;
        }
        let key = format!("rdma-{size}");
        // Put: Allocate, RDMA WRITE into the reservation, Commit with the checksum.
        let (status, body) = tcp
            .call(
                Opcode::Allocate,
                key.as_bytes(),
                &AllocateRequest {
                    len: size as u64,
                    lease_ms: 0,
                }
                .encode(),
            )
            .await;
        assert_eq!(status, Status::Ok, "{}", String::from_utf8_lossy(&body));
        let alloc = AllocateResponse::decode(&body).unwrap();
        assert_ne!(alloc.addr, 0);
        client
            .qp
            .write(&buf, 0, size, alloc.addr, alloc.rkey)
            .await
            .expect("RDMA WRITE");
        let commit = CommitRequest {
            reservation: alloc.reservation,
            checksum: checksum::of(buf.as_slice()),
        };
        assert_eq!(
            tcp.call(Opcode::Commit, &[], &commit.encode()).await.0,
            Status::Ok
        );
        // The TCP path sees exactly those bytes.
        let (status, got) = tcp.call(Opcode::TcpGet, key.as_bytes(), &[]).await;
        assert_eq!(status, Status::Ok);
        assert!(
            got == buf.as_slice(),
            "{size} bytes written by RDMA differ over TCP"
        );

        // Get: Lookup pins, RDMA READ, verify, Release.
        let mut into = RegisteredBuffer::new(&client.device, size).unwrap();
        let (status, body) = tcp
            .call(
                Opcode::Lookup,
                key.as_bytes(),
                &LookupRequest { lease_ms: 5000 }.encode(),
            )
            .await;
        assert_eq!(status, Status::Ok);
        let pin = LookupResponse::decode(&body).unwrap();
        assert_eq!(pin.len, size as u64);
        client
            .qp
            .read(&mut into, 0, size, pin.addr, pin.rkey)
            .await
            .expect("RDMA READ");
        assert_eq!(checksum::of(into.as_slice()), pin.checksum);
        assert!(
            into.as_slice() == buf.as_slice(),
            "{size} bytes read by RDMA differ"
        );
        assert_eq!(
            tcp.call(
                Opcode::Release,
                &[],
                &ReleaseRequest { pin: pin.pin }.encode()
            )
            .await
            .0,
            Status::Ok
        );
    }

    // A TCP-only client uses the same server at the same time.
    let mut plain = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    assert_eq!(
        plain.call(Opcode::TcpPut, b"tcp", b"side by side").await.0,
        Status::Ok
    );
    let (status, got) = plain.call(Opcode::TcpGet, b"rdma-4096", &[]).await;
    assert_eq!((status, got.len()), (Status::Ok, 4096));
    drop(client);
    server.shutdown().await.unwrap();
}

async fn assert_tcp_only(extra: &str, expected: &[&str]) {
    let Some(devices) = support::rxe_devices_or_skip("refusal") else {
        return;
    };
    let server = Server::start(config(&devices[0], extra))
        .await
        .expect("server starts anyway");
    let mut tcp = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    let err = rdma_connect(&mut tcp, devices.last().unwrap())
        .await
        .err()
        .expect("Connect refused");
    assert_eq!(err.0, Status::Unsupported);
    for needle in expected {
        assert!(err.1.contains(needle), "{:?} lacks {needle:?}", err.1);
    }
    assert_eq!(
        tcp.call(Opcode::TcpPut, b"k", b"still served over TCP")
            .await
            .0,
        Status::Ok
    );
    assert_eq!(
        tcp.call(Opcode::TcpGet, b"k", &[]).await.1,
        b"still served over TCP"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_empty_pkey_index_keeps_the_server_on_tcp() {
    // rxe's P_Key table has one entry, so index 1 does not exist.
    assert_tcp_only("  pkey_index: 1\n", &["index 1"]).await;
}

/// InfiniBand runbook, MTU: "MemKV refuses to start when the configured mtu exceeds what the
/// port negotiated, naming both values" (unlike an empty P_Key entry, which keeps the server on
/// TCP). The VM's veth MTU 1500 gives an active MTU of 1024.
#[tokio::test]
async fn an_mtu_above_the_active_mtu_refuses_to_start() {
    let Some(devices) =
        support::rxe_devices_or_skip("an_mtu_above_the_active_mtu_refuses_to_start")
    else {
        return;
    };
    let err = match Server::start(config(&devices[0], "  mtu: 4096\n")).await {
        Ok(server) => {
            server.shutdown().await.unwrap();
            panic!("the server started with rdma.mtu 4096 above the active MTU 1024");
        }
        Err(e) => e.to_string(),
    };
    for needle in [
        "rdma.mtu",
        "4096",
        "1024",
        &format!("{} port 1", devices[0]),
    ] {
        assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    }
    // At most the active MTU, it starts and serves RDMA.
    let server = Server::start(config(&devices[0], "  mtu: 1024\n"))
        .await
        .expect("rdma.mtu 1024 starts");
    let mut tcp = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    assert!(
        rdma_connect(&mut tcp, devices.last().unwrap())
            .await
            .is_ok(),
        "Connect with rdma.mtu 1024"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn failed_queue_pairs_do_not_use_up_a_connections_limit() {
    let Some(devices) =
        support::rxe_devices_or_skip("failed_queue_pairs_do_not_use_up_a_connections_limit")
    else {
        return;
    };
    let (server_dev, client_dev) = (devices[0].clone(), devices.last().unwrap().clone());
    let server = Server::start(config(&server_dev, ""))
        .await
        .expect("server starts");
    let mut tcp = connect(server.data_addr(), AuthKey::from_hex(KEY_HEX).unwrap())
        .await
        .unwrap();
    // More rebuilds than the per-connection limit (8): each pair is broken on purpose by an
    // RDMA WRITE with a wrong rkey, which moves the server's (responder's) pair to the error
    // state, as a client rebuilding failed pairs would leave them.
    for round in 0..10 {
        let client = rdma_connect(&mut tcp, &client_dev)
            .await
            .unwrap_or_else(|e| panic!("Connect {round} refused: {e:?}"));
        let buf = RegisteredBuffer::new(&client.device, 4096).unwrap();
        let (status, body) = tcp
            .call(
                Opcode::Allocate,
                b"victim",
                &AllocateRequest {
                    len: 4096,
                    lease_ms: 0,
                }
                .encode(),
            )
            .await;
        assert_eq!(status, Status::Ok);
        let alloc = AllocateResponse::decode(&body).unwrap();
        let err = client
            .qp
            .write(&buf, 0, 4096, alloc.addr, alloc.rkey ^ 0x5a5a)
            .await
            .expect_err("a wrong rkey is refused");
        assert!(client.qp.is_broken(), "round {round}: {err}");
        let abort = AbortRequest {
            reservation: alloc.reservation,
        };
        assert_eq!(
            tcp.call(Opcode::Abort, &[], &abort.encode()).await.0,
            Status::Ok
        );
    }
    // The connection still serves TCP.
    assert_eq!(tcp.call(Opcode::TcpPut, b"k", b"v").await.0, Status::Ok);
    server.shutdown().await.unwrap();
}

/// A Soft-RoCE device of its own on its own veth pair, so taking its link down disturbs neither
/// the harness's wire nor other tests; removed on drop.
struct ScratchRxe;

const SCRATCH_DEV: &str = "rxesrv9";
const SCRATCH_NETDEV: &str = "vethsrv9";

fn run(program: &str, args: &[&str]) {
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {}", args.join(" "));
}

impl ScratchRxe {
    fn create() -> Self {
        let peer = "vethsrv9p";
        run(
            "ip",
            &[
                "link",
                "add",
                SCRATCH_NETDEV,
                "type",
                "veth",
                "peer",
                "name",
                peer,
            ],
        );
        // RoCE needs an address on the rail for its GID.
        run(
            "ip",
            &["addr", "add", "198.51.100.9/24", "dev", SCRATCH_NETDEV],
        );
        run("ip", &["link", "set", SCRATCH_NETDEV, "up"]);
        run("ip", &["link", "set", peer, "up"]);
        run(
            "rdma",
            &[
                "link",
                "add",
                SCRATCH_DEV,
                "type",
                "rxe",
                "netdev",
                SCRATCH_NETDEV,
            ],
        );
        Self
    }
}

impl Drop for ScratchRxe {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rdma")
            .args(["link", "delete", SCRATCH_DEV])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", SCRATCH_NETDEV])
            .status();
    }
}

/// Waits until the admin API's `path` answers with a body containing every one of `wanted`.
async fn until_admin_says(server: &Server, path: &str, wanted: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, body) = support::http_get(server.admin_addr(), path).await;
        if wanted.iter().all(|w| body.contains(w)) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} never said {wanted:?}; last: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `/v1/status` and `/v1/health` report the serving port as it is now, not as it was at start:
/// its link going down shows as a port `Down`, RDMA inactive with the reason, health degraded;
/// back up, as it was.
#[tokio::test]
async fn status_and_health_follow_the_serving_port_after_start() {
    if support::rxe_devices_or_skip("status_and_health_follow_the_serving_port_after_start")
        .is_none()
    {
        return;
    }
    let _scratch = ScratchRxe::create();
    let server = Server::start(config(SCRATCH_DEV, ""))
        .await
        .expect("server starts on the scratch device");
    until_admin_says(
        &server,
        "/v1/health",
        &[r#""status":"healthy""#, r#""rdma_active":true"#],
    )
    .await;
    run("ip", &["link", "set", SCRATCH_NETDEV, "down"]);
    until_admin_says(
        &server,
        "/v1/health",
        &[r#""status":"degraded""#, r#""rdma_active":false"#],
    )
    .await;
    let status = until_admin_says(&server, "/v1/status", &[r#""state":"Down""#]).await;
    assert!(
        status.contains(&format!("port 1 of {SCRATCH_DEV} is Down")),
        "{status}"
    );
    run("ip", &["link", "set", SCRATCH_NETDEV, "up"]);
    until_admin_says(
        &server,
        "/v1/health",
        &[r#""status":"healthy""#, r#""rdma_active":true"#],
    )
    .await;
    until_admin_says(&server, "/v1/status", &[r#""state":"Active""#]).await;
    server.shutdown().await.unwrap();
}
