//! What a refused or never-read request leaves behind on a real server: a frame refused for
//! its MAC takes nothing from the store, answers a client does not read stay within its
//! connection's in-flight budget, a batch get reads no more than its answer carries,
//! connections waiting on the same-host socket are bounded, and connections that never
//! authenticate cannot keep new ones out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

mod support;

use memkv_proto::local::LocalAttachResponse;
use memkv_proto::{AuthKey, Opcode, ProtoError, Status, batch};
use memkv_server::Server;
use memkv_server::config::ServerConfig;
use support::raw::connect;

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Tests that measure this process's memory run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn key() -> AuthKey {
    AuthKey::from_hex(KEY_HEX).unwrap()
}

fn config(extra: &str) -> ServerConfig {
    let yaml = format!("network:\n  address: 127.0.0.1:0\n  auth_key: {KEY_HEX}\n{extra}");
    ServerConfig::from_yaml_str(&yaml, "test").expect("valid test config")
}

fn drive_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memkv-review-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn status(server: &Server) -> serde_json::Value {
    let (code, body) = support::http_get(server.admin_addr(), "/v1/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// This process's highest RSS, sampled every 2 ms on a thread of its own (a call that blocks
/// the test's task is measured while it runs) until dropped.
struct PeakRss {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    fn start() -> PeakRss {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes()));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        PeakRss {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A memory-mode server filled with acknowledged 1 MiB values ("v0", "v1", ...) to within
/// 24 MiB of its usable bytes, with no eviction yet; returns how many it holds.
async fn filled_memory_server() -> (Server, usize) {
    let server = Server::start(config("memory:\n  max_size: 64 MiB\n"))
        .await
        .unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let usable = status(&server).await["storage"]["usable_bytes_total"]
        .as_u64()
        .unwrap();
    let value = vec![0x5a; 1 << 20];
    let mut stored = 0;
    loop {
        let used = status(&server).await["storage"]["used_bytes_total"]
            .as_u64()
            .unwrap();
        if used + (24 << 20) > usable {
            break;
        }
        let k = format!("v{stored}");
        assert_eq!(
            c.call(Opcode::TcpPut, k.as_bytes(), &value).await.0,
            Status::Ok
        );
        stored += 1;
    }
    assert!(stored >= 8, "only {stored} values fit");
    assert_eq!(status(&server).await["storage"]["evictions"], 0);
    (server, stored)
}

/// Which of the `stored` values are gone, and the evictions counted.
async fn lost_values(server: &Server, stored: usize) -> (Vec<String>, serde_json::Value) {
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let mut lost = Vec::new();
    for i in 0..stored {
        let k = format!("v{i}");
        if c.call(Opcode::Exists, k.as_bytes(), &[]).await.0 != Status::Ok {
            lost.push(k);
        }
    }
    (lost, status(server).await["storage"]["evictions"].clone())
}

/// Memory mode reads a TcpPut's value straight into a reservation in the arena, and making
/// that reservation in a full arena evicts values: the frame's MAC is checked first, so a
/// frame refused for it evicts nothing.
#[tokio::test]
async fn a_put_refused_for_its_mac_evicts_nothing() {
    let _serial = SERIAL.lock().await;
    let (server, stored) = filled_memory_server().await;
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    // 32 MiB under a forged MAC: it does not fit without evicting.
    let big = vec![0xa5; 32 << 20];
    let mut f = c.frame(Opcode::TcpPut, b"forged", &big);
    f[40] ^= 1;
    c.send(&f).await;
    let (h, body) = c.recv().await.expect("a refusal");
    assert_eq!(
        h.status,
        Status::Unauthorized,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (lost, evictions) = lost_values(&server, stored).await;
    assert!(
        lost.is_empty() && evictions == 0,
        "a frame refused for its MAC evicted {evictions} acknowledged values: {lost:?} are gone"
    );
    server.shutdown().await.unwrap();
}

/// `limits.per_connection_inflight_bytes` bounds what one connection has in flight. In a
/// drive-backed mode every request runs on a blocking thread and the reader goes on at once,
/// and a get's answer holds its value, read off the drives, until it is sent: a get takes
/// budget for its value, so a client that pipelines gets and never reads the answers holds
/// about its budget of the server's memory, not one value per get.
#[tokio::test]
async fn unread_get_answers_stay_within_the_connections_inflight_budget() {
    let _serial = SERIAL.lock().await;
    let dir = drive_dir("inflight");
    let extra = format!(
        "limits:\n  max_value_size: 1 MiB\n  per_connection_inflight_bytes: 1 MiB\nstorage:\n  mode: file\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 64 MiB\n",
        dir.join("d0").display()
    );
    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let value = vec![0x33; 1 << 20];
    assert_eq!(c.call(Opcode::TcpPut, b"big", &value).await.0, Status::Ok);

    let before = rss_bytes();
    let gets = 512;
    let mut wire = Vec::new();
    for _ in 0..gets {
        wire.extend(c.frame(Opcode::TcpGet, b"big", &[]));
    }
    c.send(&wire).await;
    // Give the blocking reads time to run; keep the highest reading.
    let mut peak = before;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_bytes());
    }
    let grown = peak.saturating_sub(before);
    // The budget is 1 MiB; socket buffers hold a few more. 128 MiB is generous.
    assert!(
        grown < 128 << 20,
        "one connection whose {gets} TcpGet answers were never read grew the server by {} MiB \
         (per_connection_inflight_bytes: 1 MiB)",
        grown >> 20
    );
    drop(c);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Every request holds budget until its answer is written, not only its payload's and its
/// answer's bytes: a drive-backed server gives each request a task and an answer, so requests
/// with empty payloads (Exists, here), sent and never answered-for, grew the server about 1 KiB
/// each (200,000 of them: about 200 MiB) past a budget of 1 MiB.
#[tokio::test]
async fn unread_requests_with_empty_payloads_stay_within_the_connections_inflight_budget() {
    let _serial = SERIAL.lock().await;
    let dir = drive_dir("empty-payloads");
    let extra = format!(
        "limits:\n  max_value_size: 1 MiB\n  per_connection_inflight_bytes: 1 MiB\nstorage:\n  mode: file\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 64 MiB\n",
        dir.join("d0").display()
    );
    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let requests = 200_000;
    let mut wire = Vec::with_capacity(requests * 80);
    for _ in 0..requests {
        wire.extend(c.frame(Opcode::Exists, b"k", &[]));
    }
    let sent = wire.len() as u64;
    let before = rss_bytes();
    let sampler = PeakRss::start();
    // A server that keeps to the budget stops reading once it is spent, and the socket
    // buffers may not hold the rest: then the send does not finish, which is the point.
    let _ = tokio::time::timeout(Duration::from_secs(3), c.send(&wire)).await;
    drop(wire);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown = sampler.peak().saturating_sub(before);
    drop(sampler);
    eprintln!(
        "{requests} unread Exists grew the process by {} KiB",
        grown >> 10
    );
    assert!(
        grown < 64 << 20,
        "{requests} unread Exists requests ({} MiB on the wire) grew the server by {} MiB \
         (per_connection_inflight_bytes: 1 MiB)",
        sent >> 20,
        grown >> 20
    );
    drop(c);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A batch get's answer carries at most a frame of values (256 MiB here); a drive-backed server
/// used to read every value the batch named first and drop what did not fit after, so one
/// BatchGet naming a 32 MiB key 32 times made it read 1 GiB for an answer of 7 values (and
/// 16384 names of a 64 MiB key, 1 TiB). The values that do not fit are now refused unread.
#[tokio::test]
async fn a_file_mode_batch_get_reads_no_more_values_than_its_answer_carries() {
    let _serial = SERIAL.lock().await;
    let dir = drive_dir("batch-get-room");
    let extra = format!(
        "limits:\n  max_value_size: 32 MiB\nstorage:\n  mode: file\n  file_reads: pread\n  block_size: 1 MiB\n  drives:\n    - media: {}\n      size: 128 MiB\n",
        dir.join("d0").display()
    );
    let server = Server::start(config(&extra)).await.unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let value = vec![0x42; 32 << 20];
    assert_eq!(c.call(Opcode::TcpPut, b"big", &value).await.0, Status::Ok);
    drop(value);
    let payload = batch::encode_keys(&[&b"big"[..]; 32]);
    let before = rss_bytes();
    let sampler = PeakRss::start();
    let (status, body) = c.call(Opcode::BatchGet, &[], &payload).await;
    assert_eq!(status, Status::Ok);
    let items = batch::decode_get_response(&body, &memkv_proto::Limits::DEFAULT).unwrap();
    let statuses: Vec<Status> = items.iter().map(|i| i.status).collect();
    drop(body);
    std::thread::sleep(Duration::from_millis(50));
    let grown = sampler.peak().saturating_sub(before);
    drop(sampler);
    eprintln!(
        "a BatchGet of 32 x 32 MiB grew the process by {} MiB",
        grown >> 20
    );
    let fitted = statuses.iter().filter(|s| **s == Status::Ok).count();
    assert_eq!(fitted, 7, "{statuses:?}");
    assert!(
        statuses[7..].iter().all(|s| *s == Status::TooLarge),
        "{statuses:?}"
    );
    // The answer, held by the server and then by this test, plus slack.
    assert!(
        grown < 640 << 20,
        "one BatchGet of 32 x 32 MiB (an answer of {fitted} values) grew the process by {} MiB",
        grown >> 20
    );
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Server-side sockets named `name` (the listener and the connections it accepted, which
/// carry its name), from this process's view of /proc/net/unix.
fn sockets_named(name: &[u8]) -> usize {
    let path = format!("@{}", String::from_utf8_lossy(name));
    std::fs::read_to_string("/proc/self/net/unix")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(7) == Some(path.as_str()))
        .count()
}

/// The same-host socket is open to any process on the host, key or not, and each connection
/// waiting to trade a token holds a descriptor: at most 256 wait (as many as there can be
/// tokens), the rest are closed at once. Unbounded, they took the descriptors TCP accepts need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_waiting_on_the_same_host_socket_are_bounded() {
    // Both ends of each are in this process: 2 x 350 stays under a default limit of 1024.
    const ATTACKERS: usize = 350;
    const WAITING_AT_MOST: usize = 256;
    let server = Server::start(config("memory:\n  max_size: 64 MiB\n"))
        .await
        .unwrap();
    let mut c = connect(server.data_addr(), key()).await.unwrap();
    let (status, body) = c.call(Opcode::LocalAttach, &[], &[]).await;
    assert_eq!(status, Status::Ok);
    let name = LocalAttachResponse::decode(&body).unwrap().socket_name;
    let listening = sockets_named(&name);

    // Connections that never send a token; they hold no auth key.
    let name_ = name.clone();
    let held = tokio::task::spawn_blocking(move || {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name_).unwrap();
        (0..ATTACKERS)
            .map(|_| std::os::unix::net::UnixStream::connect_addr(&addr).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Let the server accept what it will.
    let mut server_side = 0;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        server_side = sockets_named(&name) - listening;
    }
    assert!(
        server_side <= WAITING_AT_MOST + 8,
        "the server holds {server_side} descriptors for {ATTACKERS} unauthenticated connections"
    );
    drop(held);
    server.shutdown().await.unwrap();
}

/// `limits.max_connections` counts connections from their accept. A peer that opens that many
/// and never sends a byte held every slot for the handshake's 10 s deadline, again and again;
/// now a new connection at the limit takes the place of the oldest one still in its handshake
/// after 500 ms.
#[tokio::test]
async fn connections_that_never_authenticate_give_their_places_to_new_ones() {
    use tokio::io::AsyncReadExt;
    let server = Server::start(config(
        "memory:\n  max_size: 64 MiB\nlimits:\n  max_connections: 2\n",
    ))
    .await
    .unwrap();
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(
            tokio::net::TcpStream::connect(server.data_addr())
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut c = connect(server.data_addr(), key())
        .await
        .expect("a new connection is admitted in place of a stalled handshake");
    let (status, body) = c.call(Opcode::TcpPut, b"admitted", b"value").await;
    assert_eq!(status, Status::Ok, "{}", String::from_utf8_lossy(&body));
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(2), silent[0].read(&mut byte))
        .await
        .expect("the oldest silent connection is closed at once");
    assert!(
        matches!(closed, Ok(0) | Err(_)),
        "the server sent it something: {closed:?}"
    );
    let (_, scrape) = support::http_get(server.admin_addr(), "/v1/metrics").await;
    assert!(
        scrape.contains("memkv_handshakes_preempted_total 1"),
        "{scrape}"
    );
    server.shutdown().await.unwrap();
}

/// In memory mode a get's answer refers to its value where it lies in the arena, and that space
/// is not reused until the answer is written. One connection overwriting a value while another
/// asked for it again and again, never reading, pinned a dead copy per get until the arena was
/// full for everyone; those answers now take their values' bytes from the connection's
/// in-flight budget.
#[tokio::test]
async fn unread_memory_mode_gets_pin_no_more_than_the_connections_inflight_budget() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(config(
        "memory:\n  max_size: 64 MiB\nlimits:\n  max_value_size: 1 MiB\n  per_connection_inflight_bytes: 4 MiB\n",
    ))
    .await
    .unwrap();
    let mut writer = connect(server.data_addr(), key()).await.unwrap();
    let mut never_reads = connect(server.data_addr(), key()).await.unwrap();
    let value = vec![0x44; 1 << 20];
    for _ in 0..96 {
        assert_eq!(
            writer.call(Opcode::TcpPut, b"churn", &value).await.0,
            Status::Ok
        );
        let get = never_reads.frame(Opcode::TcpGet, b"churn", &[]);
        // Once its budget is spent the server stops reading it; do not wait for that.
        let _ = tokio::time::timeout(Duration::from_millis(5), never_reads.send(&get)).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut honest = connect(server.data_addr(), key()).await.unwrap();
    for i in 0..40 {
        let (status, body) = honest
            .call(Opcode::TcpPut, format!("honest/{i}").as_bytes(), &value)
            .await;
        assert_eq!(
            status,
            Status::Ok,
            "put {i} of 40 MiB into a 64 MiB arena: {}",
            String::from_utf8_lossy(&body)
        );
    }
    drop(never_reads);
    server.shutdown().await.unwrap();
}

/// A server still starting (prefaulting its arena here; replaying a file-mode journal, which
/// can take minutes) refuses each connection at once ("starting") instead of leaving its
/// handshake unanswered, which cost a client its whole deadline. Its port is taken from the
/// first step, so a second server on it fails at once, even while the first is starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_starting_refuses_connections_instead_of_leaving_them_unanswered() {
    let _serial = SERIAL.lock().await;
    let address = support::fixed_loopback_address();
    let yaml = format!(
        "network:\n  address: {address}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 512 MiB\n  prefault: true\n"
    );
    let config = ServerConfig::from_yaml_str(&yaml, "test").unwrap();
    let starting = tokio::spawn(Server::start(config));
    // Until the server takes the port, a connect is refused by the kernel.
    while tokio::net::TcpStream::connect(address).await.is_err() && !starting.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let second = Server::start(
        ServerConfig::from_yaml_str(
            &format!("network:\n  address: {address}\n  auth_key: {KEY_HEX}\nmemory:\n  max_size: 16 MiB\n"),
            "test",
        )
        .unwrap(),
    )
    .await;
    assert!(
        matches!(&second, Err(e) if e.to_string().contains(&address.to_string())),
        "a second server on the port of one still starting: {:?}",
        second.as_ref().err()
    );
    // Each handshake's outcome, in order: refused as starting (false) or done (true); none
    // waits.
    let mut outcomes = Vec::new();
    while !starting.is_finished() {
        let attempt = tokio::time::timeout(Duration::from_secs(2), connect(address, key())).await;
        match attempt {
            Err(_) => panic!("a handshake with a starting server went unanswered for 2 s"),
            Ok(Ok(_)) => outcomes.push(true),
            Ok(Err(ProtoError::Refused {
                status: Status::Busy,
                message,
            })) => {
                assert!(message.contains("starting"), "{message}");
                outcomes.push(false);
            }
            Ok(Err(e)) => panic!("handshake with a starting server: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server = starting.await.unwrap().unwrap();
    let first_done = outcomes.iter().position(|&a| a).unwrap_or(outcomes.len());
    assert!(
        first_done > 0 && outcomes[first_done..].iter().all(|&a| a),
        "handshakes during the start, in order (true: done): {outcomes:?}"
    );
    assert!(connect(address, key()).await.is_ok());
    server.shutdown().await.unwrap();
}
