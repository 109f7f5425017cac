//! How memkv-rdma fails over real verbs (Soft-RoCE in testing/rxe-vm): fabric refusals at
//! open, a bad rkey, an abort while operations are in flight, a peer that never answers
//! (deadline) and transport retries running out (the window halves). Nothing may hang: every
//! wait is bounded. Outside the VM these tests report themselves skipped.

mod metrics_probe;
mod pair;
mod support;

use std::io::Write as _;
use std::time::{Duration, Instant};

use memkv_fabric::{FabricConfig, FabricError, Mtu};
use memkv_rdma::{QpOptions, RdmaDevice, RdmaError, RegisteredBuffer, Transfer, WcStatus};

const MIB: usize = 1 << 20;
/// Far longer than any of these operations may take; reaching it means something hung.
const HANG: Duration = Duration::from_secs(60);

/// The VM's devices as client (`devices[0]`) and server (`devices[1]`); with one device both
/// ends share it (loopback through the same rxe device).
fn client_and_server(test: &str) -> Option<support::RxeVm> {
    let mut vm = support::rxe_vm_or_skip(test)?;
    if vm.devices.len() < 2 {
        support::skip(&format!(
            "{test}: one RDMA device: client and server share {} (loopback)",
            vm.devices[0]
        ));
        let only = vm.devices[0].clone();
        vm.devices.push(only);
    }
    Some(vm)
}

/// Two distinct devices, for tests that need operations to overlap on the wire: rxe completes
/// loopback work requests on one device inside ibv_post_send, so nothing is ever in flight.
fn two_devices(test: &str) -> Option<support::RxeVm> {
    let vm = support::rxe_vm_or_skip(test)?;
    if vm.devices.len() < 2 {
        support::skip(&format!(
            "{test}: skipped: needs two RDMA devices (on one, rxe completes work requests \
             inside ibv_post_send)"
        ));
        return None;
    }
    Some(vm)
}

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn fabric_refusals_come_back_named_from_open() {
    let Some(vm) = support::rxe_vm_or_skip("fabric_refusals_come_back_named_from_open") else {
        return;
    };
    let dev = vm.devices[0].as_str();

    let fabric = pair::start_fabric(&FabricConfig {
        pkey_index: Some(1),
        ..Default::default()
    });
    let err = RdmaDevice::open(&fabric, Some(dev), None)
        .err()
        .expect("pkey_index 1 refused");
    report(&format!("pkey_index 1: {err}"));
    assert!(
        matches!(
            err,
            RdmaError::Fabric(FabricError::PkeyIndexOutOfRange {
                index: 1,
                len: 1,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("pkey_index 1"), "{err}");
    let err = RdmaDevice::open(&fabric, Some(dev), Some(1))
        .err()
        .expect("explicit port too");
    assert!(err.to_string().contains("pkey_index 1"), "{err}");

    let mtu = std::env::var("MEMKV_RXE_MTU").expect("MEMKV_RXE_MTU");
    if mtu == "1500" {
        let fabric = pair::start_fabric(&FabricConfig {
            mtu: Some(Mtu::Mtu4096),
            ..Default::default()
        });
        let err = RdmaDevice::open(&fabric, Some(dev), None)
            .err()
            .expect("mtu 4096 refused");
        report(&format!("mtu 4096: {err}"));
        assert!(
            matches!(
                err,
                RdmaError::Fabric(FabricError::MtuAboveActive {
                    configured: Mtu::Mtu4096,
                    active: Mtu::Mtu1024
                })
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("4096") && text.contains("1024"), "{text}");
    } else {
        support::skip(&format!(
            "mtu refusal: skipped: needs veth MTU 1500, the VM has {mtu}"
        ));
    }

    let fabric = pair::start_fabric(&FabricConfig::default());
    let err = RdmaDevice::open(&fabric, Some("no_such_rdma0"), None)
        .err()
        .expect("unknown device");
    assert!(err.to_string().contains("no_such_rdma0"), "{err}");
    let ok = RdmaDevice::open(&fabric, Some(dev), None).expect("default settings open");
    assert_eq!(ok.name(), dev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rkey_ends_in_flight_operations_with_named_errors() {
    let Some(vm) = client_and_server("a_bad_rkey_ends_in_flight_operations_with_named_errors")
    else {
        return;
    };
    let probe = metrics_probe::global();
    let p = pair::connect(
        &vm,
        &vm.devices[0],
        &vm.devices[1],
        16 * MIB,
        QpOptions::default(),
    );
    let (addr, rkey) = (p.arena.addr(), p.arena.rkey());
    let local = std::sync::Arc::new(RegisteredBuffer::new(&p.client_device, 2 * MIB).unwrap());
    let errors_before = probe.counter("memkv_rdma_wc_errors_total{status=IBV_WC_REM_ACCESS_ERR}");
    // The bad WRITE goes first; RC executes in order, so the good ones posted behind it are
    // still queued when the responder's NAK moves the pair to the error state.
    let bad = tokio::spawn({
        let (client, local) = (p.client.clone(), local.clone());
        async move { client.write(&*local, 0, 4096, addr, rkey ^ 0x5a5a).await }
    });
    while p.client.in_flight() == 0 && !bad.is_finished() {
        tokio::task::yield_now().await;
    }
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let (client, local) = (p.client.clone(), local.clone());
        tasks.push(tokio::spawn(async move {
            client
                .write(&*local, 0, 2 * MIB, addr + i * 2 * MIB as u64, rkey)
                .await
        }));
    }
    let bad = tokio::time::timeout(HANG, bad)
        .await
        .expect("the bad-rkey WRITE hung")
        .unwrap();
    report(&format!("bad rkey: {bad:?}"));
    match &bad {
        Err(RdmaError::QueuePairError { status, .. }) => {
            assert!(
                !status.is_success() && *status != WcStatus::WR_FLUSH_ERR,
                "{status}"
            )
        }
        other => panic!("expected a QueuePairError, got {other:?}"),
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        let r = tokio::time::timeout(HANG, t)
            .await
            .expect("an in-flight WRITE hung")
            .unwrap();
        match &r {
            Ok(())
            | Err(RdmaError::QueuePairError { .. })
            | Err(RdmaError::QueuePairBroken { .. }) => {}
            other => panic!("unexpected outcome {other:?}"),
        }
        outcomes.push(r);
    }
    report(&format!("WRITEs behind it: {outcomes:?}"));
    assert!(
        outcomes.iter().any(|r| r.is_err()),
        "WRITEs posted behind the failing one cannot all succeed: {outcomes:?}"
    );
    assert!(p.client.is_broken());
    let after = p.client.write(&*local, 0, 4096, addr, rkey).await;
    assert!(
        matches!(after, Err(RdmaError::QueuePairBroken { .. })),
        "{after:?}"
    );
    assert_eq!(p.client.in_flight(), 0);
    let errors: u64 = probe
        .keys()
        .iter()
        .filter(|k| k.starts_with("memkv_rdma_wc_errors_total"))
        .map(|k| probe.counter(k))
        .sum();
    assert!(
        errors >= 1,
        "error completions are counted: {:?}",
        probe.keys()
    );
    if let Err(RdmaError::QueuePairError { status, .. }) = bad
        && status == WcStatus::REM_ACCESS_ERR
    {
        assert!(
            probe.counter("memkv_rdma_wc_errors_total{status=IBV_WC_REM_ACCESS_ERR}")
                > errors_before
        );
    }
    assert!(probe.counter("memkv_rdma_wr_total{op=write}") >= 1);

    // Work requests already queued behind the failing one, in one chain: the good one before
    // it lands, the four after it are flushed (and counted), the operation names the cause.
    let p = pair::connect(
        &vm,
        &vm.devices[0],
        &vm.devices[1],
        16 * MIB,
        QpOptions::default(),
    );
    let (addr, rkey) = (p.arena.addr(), p.arena.rkey());
    let local = RegisteredBuffer::new(&p.client_device, 2 * MIB).unwrap();
    let transfers: Vec<Transfer> = (0..6u64)
        .map(|i| Transfer {
            local_offset: 0,
            len: 2 * MIB,
            remote_addr: addr + i * 2 * MIB as u64,
            rkey: if i == 1 { rkey ^ 0x5a5a } else { rkey },
        })
        .collect();
    let flushed_before = probe.counter("memkv_rdma_wc_errors_total{status=IBV_WC_WR_FLUSH_ERR}");
    let r = tokio::time::timeout(HANG, p.client.write_batch(&local, &transfers))
        .await
        .expect("a batch with a bad rkey hung");
    report(&format!("batch with a bad rkey second: {r:?}"));
    assert!(
        matches!(&r, Err(RdmaError::QueuePairError { status, .. }) if *status != WcStatus::WR_FLUSH_ERR),
        "{r:?}"
    );
    let flushed =
        probe.counter("memkv_rdma_wc_errors_total{status=IBV_WC_WR_FLUSH_ERR}") - flushed_before;
    // At least: tests running alongside in this binary may flush requests of their own.
    assert!(
        flushed >= 4,
        "the four requests behind the bad one are flushed ({flushed})"
    );
    assert_eq!(p.client.in_flight(), 0);
    assert!(p.client.is_broken());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_flushes_operations_in_flight() {
    let Some(vm) = two_devices("abort_flushes_operations_in_flight") else {
        return;
    };
    let p = pair::connect(
        &vm,
        &vm.devices[0],
        &vm.devices[1],
        16 * MIB,
        QpOptions::default(),
    );
    let (addr, rkey) = (p.arena.addr(), p.arena.rkey());
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        let client = p.client.clone();
        let mut local = RegisteredBuffer::new(&p.client_device, 4 * MIB).unwrap();
        tasks.push(tokio::spawn(async move {
            client
                .read(&mut local, 0, 4 * MIB, addr + i * 4 * MIB as u64, rkey)
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    p.client.abort("test abort");
    let mut flushed = 0;
    for t in tasks {
        let r = tokio::time::timeout(HANG, t)
            .await
            .expect("a READ hung after abort")
            .unwrap();
        match r {
            Ok(()) => {}
            Err(RdmaError::QueuePairError { status, .. }) => {
                assert_eq!(status, WcStatus::WR_FLUSH_ERR);
                flushed += 1;
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    report(&format!(
        "abort: {flushed} of 4 READs flushed, all ended {:?} after abort",
        started.elapsed()
    ));
    assert!(
        flushed >= 1,
        "16 MiB of READs under TCG take seconds; abort must flush some"
    );
    assert!(p.client.is_broken());
    let mut local = RegisteredBuffer::new(&p.client_device, 4096).unwrap();
    let after = p.client.read(&mut local, 0, 4096, addr, rkey).await;
    match after {
        Err(RdmaError::QueuePairBroken { reason, .. }) => {
            assert!(reason.contains("test abort"), "{reason}")
        }
        other => panic!("expected QueuePairBroken, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_times_out_and_exhausted_retries_halve_the_window() {
    let Some(vm) =
        client_and_server("a_silent_peer_times_out_and_exhausted_retries_halve_the_window")
    else {
        return;
    };
    let fabric = pair::start_fabric(&FabricConfig::default());
    let server_dev = RdmaDevice::open(&fabric, Some(&vm.devices[1]), None).unwrap();
    let client_dev = RdmaDevice::open(&fabric, Some(&vm.devices[0]), None).unwrap();
    let arena = pair::Arena::new(&server_dev, MIB);
    let server = server_dev.create_rc().unwrap();
    // A real endpoint of the server's port, naming a queue pair that does not exist: rxe drops
    // every packet for it, so nothing is ever acknowledged.
    let mut silent = server
        .local_endpoint(Some((arena.addr(), arena.rkey())))
        .unwrap();
    silent.qp_num = (server.qp_num() + 0x1000) & 0x00ff_ffff;
    let silent = pair::over_the_wire(&silent);
    let local = RegisteredBuffer::new(&client_dev, 4096).unwrap();

    // Deadline first: ACK timeout about 4 s per try, operation deadline 300 ms.
    let waiting = client_dev
        .create_rc_with(QpOptions {
            op_deadline: Duration::from_millis(300),
            ack_timeout: 20,
            ..Default::default()
        })
        .unwrap();
    tokio::task::block_in_place(|| waiting.connect(&silent)).expect("connect to the silent peer");
    let started = Instant::now();
    let r = tokio::time::timeout(
        HANG,
        waiting.write(&local, 0, 4096, silent.arena_addr, silent.arena_rkey),
    )
    .await
    .expect("the WRITE to a silent peer hung");
    report(&format!(
        "silent peer, 300 ms deadline: {r:?} after {:?}",
        started.elapsed()
    ));
    assert!(
        matches!(
            r,
            Err(RdmaError::Timeout {
                deadline_ms: 300,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(waiting.is_broken());

    // Retries next: ACK timeout about 16 ms, two retries.
    let retrying = std::sync::Arc::new(
        client_dev
            .create_rc_with(QpOptions {
                ack_timeout: 12,
                retry_count: 2,
                ..Default::default()
            })
            .unwrap(),
    );
    retrying
        .connect_async(&silent)
        .await
        .expect("connect to the silent peer");
    let window = retrying.window().unwrap().clone();
    let before = window.snapshot().cwnd();
    let started = Instant::now();
    let r = tokio::time::timeout(
        HANG,
        retrying.write(&local, 0, 4096, silent.arena_addr, silent.arena_rkey),
    )
    .await
    .expect("the WRITE with few retries hung");
    report(&format!(
        "silent peer, 2 retries: {r:?} after {:?}",
        started.elapsed()
    ));
    assert!(
        matches!(
            r,
            Err(RdmaError::QueuePairError {
                status: WcStatus::RETRY_EXC_ERR,
                ..
            })
        ),
        "{r:?}"
    );
    let after = window.snapshot().cwnd();
    report(&format!("congestion window {before} -> {after}"));
    assert_eq!(after, (before / 2).max(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_operation_in_flight_breaks_the_pair_and_waits_for_the_flush() {
    let Some(vm) =
        two_devices("dropping_an_operation_in_flight_breaks_the_pair_and_waits_for_the_flush")
    else {
        return;
    };
    let p = pair::connect(
        &vm,
        &vm.devices[0],
        &vm.devices[1],
        16 * MIB,
        QpOptions::default(),
    );
    let mut local = RegisteredBuffer::new(&p.client_device, 16 * MIB).unwrap();
    // 16 MiB of READ takes hundreds of milliseconds under TCG; give up after 20.
    let r = tokio::time::timeout(
        Duration::from_millis(20),
        p.client
            .read(&mut local, 0, 16 * MIB, p.arena.addr(), p.arena.rkey()),
    )
    .await;
    assert!(r.is_err(), "the READ finished in 20 ms: {r:?}");
    // The dropped future broke the pair and waited: nothing of it is left in flight, so the
    // buffer is ours again.
    assert!(p.client.is_broken());
    assert_eq!(p.client.in_flight(), 0);
    local.as_mut_slice().fill(7);
    let after = p
        .client
        .read(&mut local, 0, 4096, p.arena.addr(), p.arena.rkey())
        .await;
    match after {
        Err(RdmaError::QueuePairBroken { reason, .. }) => {
            assert!(reason.contains("dropped"), "{reason}")
        }
        other => panic!("expected QueuePairBroken, got {other:?}"),
    }
}
