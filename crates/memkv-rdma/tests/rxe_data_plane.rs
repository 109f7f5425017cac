//! memkv-rdma's data plane over real verbs (Soft-RoCE in testing/rxe-vm), through its public
//! API only: WRITE and READ of several sizes bit for bit, a batch in one doorbell, the staging
//! pool, concurrent operations under the congestion window, and memory registration cost.
//! Outside the VM these tests report themselves skipped.

mod pair;
mod support;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use memkv_rdma::{QpOptions, RegisteredBuffer, StagingPool, Transfer};
use pair::fill_pattern;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

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

/// The default options with a deadline no loaded build machine reaches: these tests check
/// data, not timing (rxe_failures checks deadlines).
fn patient() -> QpOptions {
    QpOptions {
        op_deadline: std::time::Duration::from_secs(300),
        ..QpOptions::default()
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_then_read_is_bit_exact_from_one_byte_to_sixteen_mib() {
    let Some(vm) = client_and_server("write_then_read_is_bit_exact_from_one_byte_to_sixteen_mib")
    else {
        return;
    };
    let p = pair::connect(&vm, &vm.devices[0], &vm.devices[1], 32 * MIB, patient());
    let max_msg = p.client_device.limits().max_msg_size as usize;
    report(&format!("port max message size: {max_msg} bytes"));
    let mut local = RegisteredBuffer::new(&p.client_device, 16 * MIB).unwrap();
    let mut arena = p.arena;
    for (seed, len) in [(1u64, 1usize), (2, 4 * KIB), (3, MIB), (4, 16 * MIB)] {
        // Offsets that are not page aligned, on both sides.
        let (local_off, remote_off) = if len < 16 * MIB {
            (13, 4099)
        } else {
            (0, 8 * MIB)
        };
        fill_pattern(&mut local.as_mut_slice()[local_off..local_off + len], seed);
        let doorbells = p.client.doorbells();
        let started = Instant::now();
        p.client
            .write(
                &local,
                local_off,
                len,
                arena.addr() + remote_off as u64,
                arena.rkey(),
            )
            .await
            .unwrap_or_else(|e| panic!("WRITE of {len} bytes: {e}"));
        let write_time = started.elapsed();
        assert!(
            arena.map[remote_off..remote_off + len] == local.as_slice()[local_off..local_off + len],
            "WRITE of {len} bytes: arena differs from the source"
        );
        if len > max_msg {
            assert_eq!(
                p.client.doorbells() - doorbells,
                1,
                "one chain of work requests"
            );
        }
        fill_pattern(&mut arena.map[remote_off..remote_off + len], seed + 100);
        local.as_mut_slice().fill(0);
        let started = Instant::now();
        p.client
            .read(
                &mut local,
                local_off,
                len,
                arena.addr() + remote_off as u64,
                arena.rkey(),
            )
            .await
            .unwrap_or_else(|e| panic!("READ of {len} bytes: {e}"));
        let read_time = started.elapsed();
        assert!(
            local.as_slice()[local_off..local_off + len] == arena.map[remote_off..remote_off + len],
            "READ of {len} bytes: local bytes differ from the arena"
        );
        assert!(
            local.as_slice()[..local_off].iter().all(|b| *b == 0),
            "READ wrote before its range"
        );
        report(&format!(
            "{len} bytes: WRITE {:.1} ms, READ {:.1} ms",
            write_time.as_secs_f64() * 1e3,
            read_time.as_secs_f64() * 1e3
        ));
    }
    assert!(!p.client.is_broken());
    assert_eq!(p.client.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_sixteen_blocks_goes_in_one_doorbell_each_way() {
    let Some(vm) = client_and_server("a_batch_of_sixteen_blocks_goes_in_one_doorbell_each_way")
    else {
        return;
    };
    let p = pair::connect(&vm, &vm.devices[0], &vm.devices[1], 4 * MIB, patient());
    const BLOCK: usize = 64 * KIB;
    let mut local = RegisteredBuffer::new(&p.client_device, 16 * BLOCK).unwrap();
    fill_pattern(local.as_mut_slice(), 7);
    // Block i goes to arena slot 15 - i, with a gap: scattered on the server side.
    let remote = |i: usize| (15 - i) * 2 * BLOCK;
    let transfers: Vec<Transfer> = (0..16)
        .map(|i| Transfer {
            local_offset: i * BLOCK,
            len: BLOCK,
            remote_addr: p.arena.addr() + remote(i) as u64,
            rkey: p.arena.rkey(),
        })
        .collect();
    let before = p.client.doorbells();
    p.client
        .write_batch(&local, &transfers)
        .await
        .expect("batched WRITE");
    assert_eq!(p.client.doorbells() - before, 1, "16 WRITEs, one doorbell");
    for i in 0..16 {
        assert!(
            p.arena.map[remote(i)..remote(i) + BLOCK]
                == local.as_slice()[i * BLOCK..(i + 1) * BLOCK],
            "block {i} differs after the batched WRITE"
        );
    }
    let expected = local.as_slice().to_vec();
    local.as_mut_slice().fill(0);
    let before = p.client.doorbells();
    p.client
        .read_batch(&mut local, &transfers)
        .await
        .expect("batched READ");
    assert_eq!(p.client.doorbells() - before, 1, "16 READs, one doorbell");
    assert!(
        local.as_slice() == expected.as_slice(),
        "batched READ differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_pool_and_concurrent_operations_respect_the_window() {
    let Some(vm) = two_devices("staging_pool_and_concurrent_operations_respect_the_window") else {
        return;
    };
    let p = pair::connect(&vm, &vm.devices[0], &vm.devices[1], 20 * MIB, patient());
    let (addr, rkey) = (p.arena.addr(), p.arena.rkey());

    // Unregistered data through a small staging pool: 3.5 buffers' worth.
    let pool = StagingPool::new(&p.client_device, 64 * KIB, 8).unwrap();
    let mut data = vec![0u8; 224 * KIB];
    fill_pattern(&mut data, 11);
    p.client
        .write_from_slice(&pool, &data, addr, rkey)
        .await
        .expect("staged WRITE");
    assert!(
        p.arena.map[..data.len()] == data[..],
        "staged WRITE differs"
    );
    let mut back = vec![0u8; data.len()];
    p.client
        .read_into_slice(&pool, &mut back, addr, rkey)
        .await
        .expect("staged READ");
    assert!(back == data, "staged READ differs");
    assert_eq!(
        pool.available(),
        8,
        "every staging buffer went back to the pool"
    );

    // 48 concurrent operations of one work request each against a window of 16: long enough
    // (256 KiB) that the window fills and operations wait for completions.
    let window = p.client.window().expect("connected").clone();
    let start = window.snapshot();
    assert_eq!(start.in_flight(), 0);
    const BLOCK: usize = 256 * KIB;
    let buffers = StagingPool::new(&p.client_device, BLOCK, 48).unwrap();
    // All 48 post together once their data is ready, so that the window fills however fast
    // the wire is.
    let start_line = Arc::new(tokio::sync::Barrier::new(48));
    let mut tasks = Vec::new();
    for i in 0..48usize {
        let (client, pool, window) = (p.client.clone(), buffers.clone(), window.clone());
        let start_line = start_line.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = pool.acquire().await;
            fill_pattern(&mut buf.as_mut_slice()[..BLOCK], 1000 + i as u64);
            start_line.wait().await;
            let at = addr + 4 * MIB as u64 + (i * BLOCK) as u64;
            client
                .write(&buf, 0, BLOCK, at, rkey)
                .await
                .expect("concurrent WRITE");
            let w = window.snapshot();
            assert!(
                w.in_flight() <= w.cwnd(),
                "in flight {} > window {}",
                w.in_flight(),
                w.cwnd()
            );
            buf.as_mut_slice().fill(0);
            client
                .read(&mut buf, 0, BLOCK, at, rkey)
                .await
                .expect("concurrent READ");
            let mut expected = vec![0u8; BLOCK];
            fill_pattern(&mut expected, 1000 + i as u64);
            assert!(
                buf.as_slice()[..BLOCK] == expected[..],
                "task {i}: READ differs"
            );
        }));
    }
    let mut peak = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        let w = window.snapshot();
        assert!(
            w.in_flight() <= w.cwnd().max(start.cwnd()),
            "window exceeded"
        );
        peak = peak.max(p.client.in_flight());
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    for t in tasks {
        t.await.expect("task");
    }
    let end = window.snapshot();
    report(&format!(
        "congestion window {} -> {} after {} successful completions, peak {} in flight, \
         {} waits for a full window",
        start.cwnd(),
        end.cwnd(),
        96 + 8,
        peak,
        window.waits()
    ));
    assert_eq!(end.in_flight(), 0);
    assert!(end.cwnd() > start.cwnd(), "successes grow the window");

    // Whether the 48 above had to wait depends on how fast the wire drains; a full window is
    // made certain here by holding every slot, and the next operation must wait for one.
    let held = window.try_acquire(window.snapshot().cwnd());
    assert!(held > 0);
    let waits_before = window.waits();
    let staged = pool.acquire().await;
    let client = p.client.clone();
    let blocked = tokio::spawn(async move { client.write(&staged, 0, 4096, addr, rkey).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !blocked.is_finished(),
        "an operation must wait while the window is full"
    );
    assert!(window.waits() > waits_before, "the wait is counted");
    window.release_unused(held);
    blocked
        .await
        .expect("task")
        .expect("WRITE once the window reopens");
    assert!(!p.client.is_broken());
}

#[test]
fn registering_large_regions_costs() {
    let Some(vm) = support::rxe_vm_or_skip("registering_large_regions_costs") else {
        return;
    };
    let fabric = pair::start_fabric(&Default::default());
    let device = memkv_rdma::RdmaDevice::open(&fabric, Some(&vm.devices[0]), None).unwrap();
    // Small enough for a loaded build machine (faulting in untouched pages under TCG is slow),
    // large enough to extrapolate per GiB.
    const FRESH: usize = 64 * MIB;
    const LEN: usize = 256 * MIB;

    // Untouched anonymous memory: registration faults in (and zeroes) every page.
    let mut fresh = memmap2::MmapMut::map_anon(FRESH).unwrap();
    let started = Instant::now();
    // SAFETY: the mapping is valid for FRESH bytes and outlives the region (dropped first).
    let region =
        unsafe { device.register_arena(fresh.as_mut_ptr(), FRESH) }.expect("64 MiB region");
    let fresh_time = started.elapsed();
    assert_eq!(region.len(), FRESH);
    drop(region);
    drop(fresh);

    // Memory already populated, as a store's arena is: only pinning and mapping remain.
    let mut map = memmap2::MmapMut::map_anon(LEN).unwrap();
    map.fill(1);
    let started = Instant::now();
    // SAFETY: as above.
    let whole =
        unsafe { device.register_arena(map.as_mut_ptr(), LEN) }.expect("one 256 MiB region");
    let one = started.elapsed();
    assert_eq!(whole.len(), LEN);
    drop(whole);
    let base = map.as_mut_ptr() as usize;
    let started = Instant::now();
    let regions: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let device = Arc::clone(&device);
                s.spawn(move || {
                    (0..2)
                        .map(|k| {
                            let at = base + (t * 2 + k) * (LEN / 4);
                            // SAFETY: a quarter of the live mapping, dropped before it.
                            unsafe { device.register_arena(at as *mut u8, LEN / 4) }
                                .expect("quarter")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let parallel = started.elapsed();
    assert_eq!(regions.len(), 4);
    drop(regions);
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    report(&format!(
        "ibv_reg_mr: 64 MiB untouched {:.0} ms; 256 MiB populated: one region {:.0} ms, \
         four regions on two threads {:.0} ms",
        ms(fresh_time),
        ms(one),
        ms(parallel)
    ));
}

#[test]
fn blocking_callers_need_no_async_runtime() {
    let Some(vm) = client_and_server("blocking_callers_need_no_async_runtime") else {
        return;
    };
    let p = pair::connect(&vm, &vm.devices[0], &vm.devices[1], MIB, patient());
    let mut local = RegisteredBuffer::new(&p.client_device, 64 * KIB).unwrap();
    fill_pattern(local.as_mut_slice(), 21);
    memkv_rdma::block_on(
        p.client
            .write(&local, 0, 64 * KIB, p.arena.addr(), p.arena.rkey()),
    )
    .expect("blocking WRITE");
    assert!(
        p.arena.map[..64 * KIB] == local.as_slice()[..],
        "blocking WRITE differs"
    );
    let expected = local.as_slice().to_vec();
    local.as_mut_slice().fill(0);
    memkv_rdma::block_on(
        p.client
            .read(&mut local, 0, 64 * KIB, p.arena.addr(), p.arena.rkey()),
    )
    .expect("blocking READ");
    assert!(
        local.as_slice() == expected.as_slice(),
        "blocking READ differs"
    );
    // Idle with its completion thread started: the thread sleeps in poll(2), it does not spin.
    let thread = format!("rdma-cq-{}", p.client.qp_num());
    let before = thread_cpu_ticks(&thread).expect("the completion thread is running");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let idle = thread_cpu_ticks(&thread).unwrap() - before;
    report(&format!(
        "completion thread CPU while idle for 1 s: {idle} ticks of 10 ms"
    ));
    assert!(
        idle <= 5,
        "an idle completion thread used {idle} ticks in one second"
    );
}

/// User + system CPU time, in clock ticks, of this process's thread named `name`.
fn thread_cpu_ticks(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // Fields after the ")" that closes the name: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        return Some(utime + stime);
    }
    None
}
