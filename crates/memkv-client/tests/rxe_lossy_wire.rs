//! RDMA over a bad wire, inside the Soft-RoCE VM (testing/rxe-vm). netem on the veth wire
//! that carries RoCE (the test double for a flaky cable, a congested fabric or a link that
//! goes down) drops, delays and reorders packets; then the wire goes down in the middle of a
//! batch. Whatever the wire does: every value a put acknowledged reads back bit-exact, every
//! failure is a named error within its deadline, and once the wire is good again the same
//! client moves data again. Outside the VM each test prints why it is skipped and passes.
//!
//! Only RDMA crosses the veth wire: the control channel is on loopback.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use memkv_client::{Client, Error, Transport};
use memkv_server::Server;

/// One test at a time owns the wire: the tests of this binary would otherwise impair each
/// other's.
static WIRE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The rxe devices, the veth ends under them and their addresses, in the VM: the server on
/// the first, the client's rail on the last.
struct Wire {
    server_device: String,
    server_addr: String,
    rail: String,
    rail_addr: String,
    netdevs: Vec<String>,
}

fn wire_or_skip(test: &str) -> Option<Wire> {
    use std::io::Write;
    // RUST_LOG=memkv_rdma=debug shows each queue pair break and why.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs it in the Soft-RoCE VM)"
        );
        return None;
    }
    let list = |name: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is set in the VM"))
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let (devices, addrs) = (list("MEMKV_RXE_DEVICES"), list("MEMKV_RXE_ADDRS"));
    Some(Wire {
        server_device: devices[0].clone(),
        server_addr: addrs[0].clone(),
        rail: devices.last().unwrap().clone(),
        rail_addr: addrs.last().unwrap().clone(),
        netdevs: list("MEMKV_RXE_NETDEVS"),
    })
}

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// netem on both ends of the wire while it lives; the wire is clean again when it drops, even
/// when an assertion fails, so one test's wire does not leak into the next.
struct Netem<'a>(&'a [String]);

impl<'a> Netem<'a> {
    fn set(netdevs: &'a [String], spec: &str) -> Self {
        for dev in netdevs {
            let mut args = vec!["qdisc", "replace", "dev", dev, "root", "netem"];
            args.extend(spec.split_whitespace());
            sh("tc", &args);
        }
        Netem(netdevs)
    }
}

impl Drop for Netem<'_> {
    fn drop(&mut self) {
        for dev in self.0 {
            let _ = Command::new("tc")
                .args(["qdisc", "del", "dev", dev, "root"])
                .output();
        }
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8)
        .collect()
}

async fn server(wire: &Wire) -> Server {
    // No shared memory: a client on this host would use it and never touch the wire.
    let mut config = common::server_config(
        "127.0.0.1:0",
        &format!("rdma:\n  device: {}\n", wire.server_device),
    );
    config.network.shared_memory = false;
    Server::start(config).await.expect("server starts")
}

async fn rdma_client(server: &Server, wire: &Wire, timeout: Duration) -> Client {
    let mut config = common::client_config(&[server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![wire.rail.clone()];
    config.timeout = timeout;
    Client::connect(config).await.expect("strict RDMA client")
}

/// A client that never uses RDMA: it reads what the wire stored over loopback TCP.
async fn tcp_client(server: &Server) -> Client {
    let mut config = common::client_config(&[server]);
    config.transport = Transport::Tcp;
    Client::connect(config).await.expect("TCP client")
}

/// An error a caller can act on: it names the transport, the deadline or the connection.
fn assert_named(e: &Error, what: &str) {
    assert!(
        matches!(
            e,
            Error::Rdma { .. }
                | Error::Timeout { .. }
                | Error::Disconnected { .. }
                | Error::Unreachable { .. }
                | Error::Server { .. }
        ),
        "{what}: unexpected error {e:?}"
    );
    assert!(
        !e.to_string().is_empty(),
        "{what}: an error without a message"
    );
}

const VALUE: usize = 1 << 20;
const BATCH: usize = 8;
const BATCHES: usize = 2;

/// What one round of puts and gets over the wire did.
struct Round {
    elapsed: Duration,
    ok: usize,
    failed: usize,
}

/// `BATCHES` batches of `BATCH` 1 MiB puts, then gets of every value, over RDMA; every
/// acknowledged value is then read over TCP too (the wire does not carry TCP), bit-exact.
async fn round(rdma: &Client, tcp: &Client, label: &str, timeout: Duration) -> Round {
    // An operation fails at its deadline; allow the batch a little beyond it.
    let deadline = timeout + Duration::from_secs(5);
    let started = Instant::now();
    let (mut ok, mut failed) = (0, 0);
    let mut acknowledged = Vec::new();
    for b in 0..BATCHES {
        let values: Vec<(String, Vec<u8>)> = (0..BATCH)
            .map(|i| {
                let n = (b * BATCH + i) as u64;
                (
                    format!("{label}/{n}"),
                    pattern(VALUE, n ^ label.len() as u64),
                )
            })
            .collect();
        let t = Instant::now();
        let results = rdma.put_batch(&values).await;
        assert!(
            t.elapsed() < deadline,
            "{label}: a put batch took {:?}, past its deadline {deadline:?}",
            t.elapsed()
        );
        for ((key, value), r) in values.into_iter().zip(results) {
            match r {
                Ok(()) => acknowledged.push((key, value)),
                Err(e) => {
                    assert_named(&e, &format!("{label}: put {key}"));
                    if failed == 0 {
                        eprintln!("{label}: first failure: {e}");
                    }
                    failed += 1;
                }
            }
        }
    }
    let keys_of = |chunk: &[(String, Vec<u8>)]| -> Vec<String> {
        chunk.iter().map(|(k, _)| k.clone()).collect()
    };
    for chunk in acknowledged.chunks(BATCH) {
        let t = Instant::now();
        let got = rdma.get_batch(&keys_of(chunk)).await;
        assert!(
            t.elapsed() < deadline,
            "{label}: a get batch took {:?}",
            t.elapsed()
        );
        for ((key, want), r) in chunk.iter().zip(got) {
            match r {
                Ok(Some(v)) => {
                    assert!(v == *want, "{label}: {key} came back different over RDMA");
                    ok += 1;
                }
                Ok(None) => panic!("{label}: acknowledged {key} is missing"),
                Err(e) => {
                    assert_named(&e, &format!("{label}: get {key}"));
                    failed += 1;
                }
            }
        }
    }
    let elapsed = started.elapsed();
    for chunk in acknowledged.chunks(BATCH) {
        let read = tcp.get_batch(&keys_of(chunk)).await;
        for ((key, want), r) in chunk.iter().zip(read) {
            assert!(
                r.expect("TCP get").as_ref() == Some(want),
                "{label}: acknowledged {key} differs over TCP"
            );
        }
    }
    Round {
        elapsed,
        ok,
        failed,
    }
}

/// The client's congestion window towards the server's rail (`memkv_rdma_cwnd`, exported
/// through the server's metrics: server and client share this test's process and recorder).
async fn cwnd(server: &Server, wire: &Wire) -> f64 {
    let server_addr = &wire.server_addr;
    let scrape = common::admin_get(server, "/v1/metrics").await;
    scrape
        .lines()
        .filter(|l| l.starts_with("memkv_rdma_cwnd{") && l.contains(server_addr.as_str()))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .next()
        .unwrap_or_else(|| panic!("no memkv_rdma_cwnd for {server_addr} in:\n{scrape}"))
}

fn mib_per_s(r: &Round) -> f64 {
    // Each value crossed the wire twice: its put and its get.
    (2 * (r.ok + r.failed) * VALUE) as f64 / (1 << 20) as f64 / r.elapsed.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_delay_and_reordering_cost_time_never_bytes() {
    let Some(wire) = wire_or_skip("loss_delay_and_reordering_cost_time_never_bytes") else {
        return;
    };
    let _wire = WIRE.lock().await;
    let server = server(&wire).await;
    let deadline = Duration::from_secs(6);
    let rdma = rdma_client(&server, &wire, deadline).await;
    let tcp = tcp_client(&server).await;

    // The first round also connects and registers; the clean baseline is the second.
    assert_eq!(round(&rdma, &tcp, "warm-up", deadline).await.failed, 0);
    let clean = round(&rdma, &tcp, "clean", deadline).await;
    assert_eq!(clean.failed, 0, "a clean wire failed an operation");
    assert_eq!(rdma.transport(), "rdma");
    let mut table = vec![("clean".to_owned(), mib_per_s(&clean), 0)];
    // RC's retransmission hides rare loss entirely; at 1% and with reordering it costs time,
    // and any operation that still fails must say so.
    for (spec, must_all_succeed) in [
        ("loss 0.1%", true),
        ("loss 1%", false),
        ("delay 1ms reorder 1%", false),
        ("delay 1ms 100us", false),
    ] {
        let label = spec.split_whitespace().collect::<Vec<_>>().join("-");
        let lossy = {
            let _netem = Netem::set(&wire.netdevs, spec);
            round(&rdma, &tcp, &label, deadline).await
        };
        if must_all_succeed {
            assert_eq!(lossy.failed, 0, "{spec}: RC retransmission should hide it");
        }
        eprintln!(
            "{spec}: {} ok, {} failed in {:?}",
            lossy.ok, lossy.failed, lossy.elapsed
        );
        table.push((spec.to_owned(), mib_per_s(&lossy), lossy.failed));
        // A clean wire again: the same client moves everything.
        let after = round(&rdma, &tcp, &format!("after-{label}"), deadline).await;
        assert_eq!(after.failed, 0, "after {spec}: the client did not recover");
    }
    eprintln!("RDMA 1 MiB put + get over a lossy wire (Soft-RoCE, netem):");
    eprintln!(
        "{:<32} {:>10} {:>8} {:>7}",
        "wire", "MiB/s", "vs clean", "failed"
    );
    for (spec, rate, failed) in &table {
        eprintln!(
            "{spec:<32} {rate:>10.1} {:>7.2}x {failed:>7}",
            rate / table[0].1
        );
    }
    server.shutdown().await.unwrap();
}

const STRIPED: usize = 16 << 20;

/// Two 16 MiB values put and read back over a two-rail client (every one must succeed: RC
/// hides the loss), each rail carrying half of every value; read over TCP too. How long the
/// RDMA part took.
async fn striped_round(rdma: &Client, tcp: &Client, label: &str) -> Duration {
    let values: Vec<(String, Vec<u8>)> = (0..2u64)
        .map(|i| {
            (
                format!("{label}/{i}"),
                pattern(STRIPED, 77 + i + label.len() as u64),
            )
        })
        .collect();
    let keys: Vec<String> = values.iter().map(|(k, _)| k.clone()).collect();
    let rail_bytes =
        |c: &Client| -> Vec<u64> { c.rdma_rail_stats().iter().map(|r| r.bytes).collect() };
    let before = rail_bytes(rdma);
    let t = Instant::now();
    for r in rdma.put_batch(&values).await {
        r.unwrap_or_else(|e| panic!("{label}: a striped put: {e}"));
    }
    for ((key, want), got) in values.iter().zip(rdma.get_batch(&keys).await) {
        let got = got.unwrap_or_else(|e| panic!("{label}: striped get {key}: {e}"));
        assert!(
            got.as_ref() == Some(want),
            "{key} came back different over two rails"
        );
    }
    let took = t.elapsed();
    let per_rail = (values.len() * STRIPED) as u64;
    let moved: Vec<u64> = rail_bytes(rdma)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(
        moved,
        vec![per_rail, per_rail],
        "{label}: each rail carries half of every value"
    );
    for ((key, want), got) in values.iter().zip(tcp.get_batch(&keys).await) {
        assert!(
            got.expect("TCP get").as_ref() == Some(want),
            "{key} differs over TCP"
        );
    }
    took
}

/// 16 MiB values striped over two rails (two queue pairs on the rail device, both across the
/// wire) while the wire drops 0.1 % of packets: RC retransmission hides the loss on each rail,
/// so every value is acknowledged, both rails carry half of every value, and every byte reads
/// back exactly, over the striped rails and over TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn striped_rails_lose_packets_never_bytes() {
    let Some(wire) = wire_or_skip("striped_rails_lose_packets_never_bytes") else {
        return;
    };
    let _wire = WIRE.lock().await;
    let server = server(&wire).await;
    let mut config = common::client_config(&[&server]);
    config.transport = Transport::Rdma;
    config.rdma_devices = vec![wire.rail.clone(), wire.rail.clone()];
    config.timeout = Duration::from_secs(30);
    let rdma = Client::connect(config)
        .await
        .expect("strict two-rail client");
    assert_eq!(rdma.rdma_rails().len(), 2);
    let tcp = tcp_client(&server).await;
    let clean = striped_round(&rdma, &tcp, "clean").await;
    let lossy = {
        let _netem = Netem::set(&wire.netdevs, "loss 0.1%");
        striped_round(&rdma, &tcp, "loss-0.1%").await
    };
    let stats = rdma.rdma_rail_stats();
    assert!(stats.iter().all(|r| r.dropped.is_empty()), "{stats:?}");
    eprintln!(
        "two rails, 2 x 16 MiB put + get: clean {clean:?}, loss 0.1% {lossy:?} ({:.2}x the clean rate)",
        clean.as_secs_f64() / lossy.as_secs_f64()
    );
    server.shutdown().await.unwrap();
}

/// The link of the client's rail, taken down while it lives and brought back (with the route
/// the VM's policy routing needs) when it drops, even when an assertion fails.
struct LinkDown {
    link: String,
    src: String,
    table: &'static str,
}

impl LinkDown {
    fn take(wire: &Wire) -> Self {
        let link = wire.netdevs.last().unwrap().clone();
        let table = if wire.netdevs.len() > 1 { "101" } else { "100" };
        sh("ip", &["link", "set", &link, "down"]);
        LinkDown {
            link,
            src: wire.rail_addr.clone(),
            table,
        }
    }
}

impl Drop for LinkDown {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", &self.link, "up"])
            .output();
        // Taking the link down removed its routes.
        let _ = Command::new("ip")
            .args(["route", "replace", "192.0.2.0/24", "dev", &self.link])
            .args(["src", &self.src, "table", self.table])
            .output();
    }
}

/// Puts `values` in one batch while `impair` runs 10 ms into it; what each put returned, and
/// how long the batch took. Acknowledged values must read back over TCP (loopback, not the
/// wire); failures must be named.
async fn batch_through<T>(
    rdma: &Client,
    tcp: &Client,
    values: &[(String, Vec<u8>)],
    impair: impl FnOnce() -> T,
) -> (T, usize, Duration) {
    let batch = {
        let (rdma, values) = (rdma.clone(), values.to_vec());
        tokio::spawn(async move {
            let t = Instant::now();
            (rdma.put_batch(&values).await, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let impaired = impair();
    let (results, took) = batch.await.unwrap();
    let mut acknowledged = 0;
    let mut errors = std::collections::BTreeMap::<String, usize>::new();
    for ((key, value), r) in values.iter().zip(&results) {
        match r {
            Ok(()) => {
                acknowledged += 1;
                assert!(
                    tcp.get(key.as_bytes()).await.unwrap().as_ref() == Some(value),
                    "acknowledged {key} differs"
                );
            }
            Err(e) => {
                assert_named(e, &format!("put {key} on an impaired wire"));
                *errors.entry(e.to_string()).or_default() += 1;
            }
        }
    }
    for (e, n) in errors {
        eprintln!("  {n} x {e}");
    }
    (impaired, acknowledged, took)
}

/// Puts until one succeeds over RDMA; how long that took. Every failure on the way is named.
async fn recovery(rdma: &Client, what: &str) -> Duration {
    let since = Instant::now();
    loop {
        match rdma.put(b"recovery", &pattern(VALUE, 8)).await {
            Ok(()) if rdma.transport() == "rdma" => return since.elapsed(),
            Ok(()) => panic!("a strict RDMA client used {}", rdma.transport()),
            Err(e) => {
                assert_named(&e, &format!("a put after {what}"));
                assert!(
                    since.elapsed() < Duration::from_secs(60),
                    "no recovery 60 s after {what}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_wire_fails_in_time_backs_the_window_off_and_the_client_recovers() {
    let Some(wire) =
        wire_or_skip("a_dead_wire_fails_in_time_backs_the_window_off_and_the_client_recovers")
    else {
        return;
    };
    let _wire = WIRE.lock().await;
    let server = server(&wire).await;
    let timeout = Duration::from_secs(5);
    let rdma = rdma_client(&server, &wire, timeout).await;
    let tcp = tcp_client(&server).await;
    let long = Duration::from_secs(20);
    assert_eq!(round(&rdma, &tcp, "before", long).await.failed, 0);
    let window_before = cwnd(&server, &wire).await;
    let bound = timeout + Duration::from_secs(5);
    let values = |tag: &str| -> Vec<(String, Vec<u8>)> {
        (0..96u64)
            .map(|i| (format!("{tag}/{i}"), pattern(VALUE, 1000 + i)))
            .collect()
    };

    // A wire that drops everything until the batch ends (a fabric black hole, the link still
    // up): the transfers caught in it go unanswered past their deadline (or run out of
    // transport retries, on a fabric whose retries end), which halves the window: once for
    // the requests of one stall, again for those posted after it that are lost too.
    let blackhole = values("blackhole");
    let (netem, acknowledged, took) = batch_through(&rdma, &tcp, &blackhole, || {
        Netem::set(&wire.netdevs, "loss 100%")
    })
    .await;
    drop(netem);
    let window_down = cwnd(&server, &wire).await;
    eprintln!(
        "black hole: {acknowledged} of {} acknowledged, the batch ended after {took:?}; \
         congestion window {window_before} before, {window_down} after",
        blackhole.len()
    );
    assert!(took < bound, "the batch took {took:?}, past {bound:?}");
    assert!(
        acknowledged < blackhole.len(),
        "the batch finished before the black hole: nothing was tested"
    );
    assert!(
        window_down < window_before,
        "the window did not back off: {window_before} before the black hole, {window_down} after"
    );
    let back = recovery(&rdma, "the black hole").await;
    assert_eq!(round(&rdma, &tcp, "after-blackhole", long).await.failed, 0);
    let window_after = cwnd(&server, &wire).await;
    assert!(
        window_after > window_down,
        "the window did not grow back: {window_down} after the black hole, {window_after} later"
    );
    eprintln!(
        "black hole: RDMA moved data again {back:?} after the wire came back; congestion \
         window {window_after} after a round"
    );

    // The link itself goes down mid-batch, then comes back.
    let down = values("down");
    let (link, acknowledged, took) =
        batch_through(&rdma, &tcp, &down, || LinkDown::take(&wire)).await;
    assert!(took < bound, "the batch took {took:?}, past {bound:?}");
    // While the link is down the client fails fast and by name.
    let t = Instant::now();
    if let Err(e) = rdma.put(b"down/while", &pattern(VALUE, 7)).await {
        assert_named(&e, "a put with the link down");
    }
    assert!(
        t.elapsed() < bound,
        "a put with the link down took {:?}",
        t.elapsed()
    );
    drop(link);
    let back = recovery(&rdma, "the link came back").await;
    assert_eq!(round(&rdma, &tcp, "after-link", long).await.failed, 0);
    eprintln!(
        "link down mid-batch: {acknowledged} of {} acknowledged, the batch ended after {took:?}; \
         RDMA moved data again {back:?} after the link came back",
        down.len()
    );
    server.shutdown().await.unwrap();
}
