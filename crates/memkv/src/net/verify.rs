//! `memkv net verify`: one block written to a server and read back, and a verdict on how its
//! bytes moved. VERIFIED means the block's own bytes crossed an RDMA rail both ways (the
//! InfiniBand runbook: "the addressing, partition, and MTU all agree end to end"), read from
//! the client's rail byte counters around each operation. That the client's RDMA path is up
//! proves nothing about one block: under `auto` a Busy answer from a drive-backed server
//! whose staging is full sends that value over TCP with the path still up, and a same-host
//! server is reached through shared memory, which verify turns off since it tests the fabric.

use std::time::{Duration, Instant};

use memkv_client::{Client, ConfigSources, Setting, Transport};

use crate::exit::{self, Exit};

/// What `memkv net verify` was asked to check.
pub struct VerifyArgs {
    pub server: String,
    pub device: Option<String>,
    pub auth_key: Option<String>,
    pub size: usize,
    pub require_rdma: bool,
}

fn failed(code: i32, reason: impl std::fmt::Display) -> Exit {
    Exit::with(code, format!("net verify FAILED: {reason}"))
}

/// Bytes each rail has moved since the client started: `(device, bytes)`.
type Counters = Vec<(String, u64)>;

fn counters(client: &Client) -> Counters {
    client
        .rdma_rail_stats()
        .into_iter()
        .map(|r| (r.device, r.bytes))
        .collect()
}

/// How one direction's bytes moved.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Way {
    /// The block's bytes crossed these rails.
    Rdma(Vec<String>),
    /// Another way, and why: e.g. "over TCP after RDMA failed: RDMA with server ...".
    Other(String),
}

/// The way of one operation on a `size`-byte block, from the rail counters `before` and
/// `after` it. RDMA when the rails together grew by the block's size and no RDMA failure was
/// recorded (`failure`: a value written over RDMA whose commit then failed was stored over
/// TCP); otherwise `other()` says how it went.
fn way(
    size: usize,
    before: &Counters,
    after: &Counters,
    failure: Option<String>,
    other: impl FnOnce() -> String,
) -> Way {
    let was = |device: &str| {
        before
            .iter()
            .find(|(d, _)| d == device)
            .map_or(0, |(_, b)| *b)
    };
    let grown: Vec<(&str, u64)> = after
        .iter()
        .map(|(d, b)| (d.as_str(), b.saturating_sub(was(d))))
        .filter(|(_, g)| *g > 0)
        .collect();
    let total: u64 = grown.iter().map(|(_, g)| g).sum();
    match failure {
        None if total >= size as u64 => {
            Way::Rdma(grown.iter().map(|(d, _)| d.to_string()).collect())
        }
        Some(reason) if total > 0 => Way::Other(format!(
            "over TCP: its bytes crossed the rail, then RDMA failed: {reason}"
        )),
        _ => Way::Other(other()),
    }
}

/// Where the bytes of an operation that did not move over RDMA went, and why, as far as the
/// client can tell.
fn other_way(client: &Client, server: &str) -> String {
    if client.shared_memory_servers().iter().any(|s| s == server) {
        return "through shared memory (transport shm: the server is on this host)".into();
    }
    let reason = client.rdma_fallback_reason();
    if client.rdma_rail_stats().is_empty() {
        return format!(
            "over TCP: the client has no RDMA path ({})",
            reason.as_deref().unwrap_or("reason unknown")
        );
    }
    match reason {
        // The reason names the server and what failed ("RDMA with server ...: ...").
        Some(r) => format!("over TCP after RDMA failed: {r}"),
        // Under `auto`, with shared memory off, the only way a value leaves a live RDMA path
        // for TCP is the server's Busy answer (ops.rs: `busy_to_tcp`).
        None => "over TCP while the client's RDMA path stayed up: the server answered Busy \
                 (a drive-backed server whose RDMA staging is full moves that value over TCP)"
            .into(),
    }
}

/// `Ok(rails)` when both directions moved over RDMA, else the NOT VERIFIED reason naming
/// the direction(s) that did not.
fn verdict(write: &Way, read: &Way) -> Result<Vec<String>, String> {
    match (write, read) {
        (Way::Rdma(w), Way::Rdma(r)) => {
            let mut rails = w.clone();
            rails.extend(r.iter().filter(|d| !w.contains(d)).cloned());
            Ok(rails)
        }
        (Way::Other(w), Way::Other(r)) if w == r => Err(format!(
            "neither the write nor the read moved over RDMA: both went {w}"
        )),
        (Way::Other(w), Way::Other(r)) => Err(format!(
            "neither the write nor the read moved over RDMA: the write went {w}; the read went {r}"
        )),
        (Way::Other(w), _) => Err(format!("the write did not move over RDMA: it went {w}")),
        (_, Way::Other(r)) => Err(format!("the read did not move over RDMA: it went {r}")),
    }
}

fn describe(way: &Way, took: Duration) -> String {
    let ms = took.as_secs_f64() * 1e3;
    match way {
        Way::Rdma(rails) => format!("RDMA over {} ({ms:.2} ms)", rails.join(", ")),
        Way::Other(why) => format!("not RDMA ({ms:.2} ms): went {why}"),
    }
}

/// Connects, authenticates, writes a random block, reads it back, compares, and says
/// VERIFIED only when the block moved over RDMA both ways.
pub async fn verify(args: VerifyArgs) -> Result<(), Exit> {
    if args.size == 0 {
        return Err(Exit::with(
            exit::USAGE,
            "net verify: --size 0 moves no bytes, so nothing shows which way they went; give at least 1",
        ));
    }
    let overrides = |name: &str| match name {
        "MEMKV_SERVERS" => Some(Setting::new(args.server.clone(), "--server")),
        "MEMKV_AUTH_KEY" => args.auth_key.clone().map(|k| Setting::new(k, "--auth-key")),
        "MEMKV_RDMA_DEVICES" => args.device.clone().map(|d| Setting::new(d, "--device")),
        _ => None,
    };
    let mut config = ConfigSources::load(&overrides)
        .and_then(|sources| sources.config())
        .map_err(|e| failed(exit::FAILURE, e))?;
    // `--require-rdma` makes every RDMA problem the command's error, by name. `--device`
    // alone keeps `auto`: the block still makes its round trip when RDMA fails, so the report
    // shows how each direction really moved and why, and the verdict below withholds VERIFIED.
    if args.require_rdma {
        config.transport = Transport::Rdma;
    }
    config.shared_memory = false;
    let client = Client::connect(config)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    // An authenticated round trip before any data: a wrong key fails here, by name.
    let rtt = client
        .ping(&args.server)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    outln!("server            : {}", args.server);
    outln!(
        "authenticated     : yes (round trip {:.2} ms)",
        rtt.as_secs_f64() * 1e3
    );
    let mut block = vec![0u8; args.size];
    getrandom::fill(&mut block)
        .map_err(|e| failed(exit::FAILURE, format!("no random source: {e}")))?;
    let mut name = [0u8; 8];
    getrandom::fill(&mut name)
        .map_err(|e| failed(exit::FAILURE, format!("no random source: {e}")))?;
    let key = format!(
        "memkv-net-verify/{}",
        name.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let before = counters(&client);
    let started = Instant::now();
    client
        .put(key.as_bytes(), &block)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    let wrote = started.elapsed();
    let after_write = counters(&client);
    let write = way(
        args.size,
        &before,
        &after_write,
        client.rdma_fallback_reason(),
        || other_way(&client, &args.server),
    );
    let started = Instant::now();
    let back = client
        .get(key.as_bytes())
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    let read_took = started.elapsed();
    let read = way(
        args.size,
        &after_write,
        &counters(&client),
        client.rdma_fallback_reason(),
        || other_way(&client, &args.server),
    );
    let _ = client.delete(key.as_bytes()).await;
    outln!("transport         : {}", transport(&client));
    outln!("write             : {}", describe(&write, wrote));
    outln!("read              : {}", describe(&read, read_took));
    match back {
        Some(bytes) if bytes == block => {}
        Some(_) => {
            return Err(failed(
                exit::FAILURE,
                "the block read back differs from the block written",
            ));
        }
        None => {
            return Err(failed(
                exit::FAILURE,
                "the block written is missing when read back",
            ));
        }
    }
    // On stderr, so that stdout holds the word VERIFIED only for a verified path.
    let rails = verdict(&write, &read).map_err(|why| {
        Exit::with(
            exit::RDMA_UNAVAILABLE,
            format!("net verify: NOT VERIFIED: {why}"),
        )
    })?;
    let dc = client
        .rdma_rail_stats()
        .iter()
        .any(|r| r.transport == "DC" && rails.contains(&r.device));
    outln!(
        "VERIFIED {} bytes over {}: write {:.2} ms, read {:.2} ms",
        args.size,
        if dc { "DC" } else { "RC" },
        wrote.as_secs_f64() * 1e3,
        read_took.as_secs_f64() * 1e3
    );
    Ok(())
}

/// The transport negotiated: DC or RC per rail and why, or TCP and why RDMA is not used.
fn transport(client: &Client) -> String {
    match client.transport() {
        "rdma" => client
            .rdma_rail_stats()
            .iter()
            .map(|r| {
                format!(
                    "{} over {} ({}; {})",
                    r.transport,
                    r.device,
                    r.transport_reason,
                    rail_class(r)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => format!(
            "TCP (RDMA not used: {})",
            client
                .rdma_fallback_reason()
                .unwrap_or_else(|| "unknown".into())
        ),
    }
}

/// The class a rail's queue pairs send in: what decides whether its transfers are lossless.
fn rail_class(rail: &memkv_client::RailStats) -> String {
    match rail.traffic_class {
        Some(tc) => format!(
            "traffic class {tc} (DSCP {}), service level {}",
            tc >> 2,
            rail.service_level
        ),
        None => format!("service level {}", rail.service_level),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn c(pairs: &[(&str, u64)]) -> Counters {
        pairs.iter().map(|(d, b)| (d.to_string(), *b)).collect()
    }

    fn unreached() -> String {
        panic!("asked why, though the bytes moved over RDMA")
    }

    #[test]
    fn a_block_whose_bytes_crossed_a_rail_moved_over_rdma() {
        let w = way(
            MIB,
            &c(&[("rxe1", 10)]),
            &c(&[("rxe1", 10 + MIB as u64)]),
            None,
            unreached,
        );
        assert_eq!(w, Way::Rdma(vec!["rxe1".into()]));
        // Spread over two rails, it still counts whole; an idle rail is not named.
        let w = way(
            MIB,
            &c(&[("a", 0), ("b", 0), ("c", 5)]),
            &c(&[("a", 600_000), ("b", 448_576), ("c", 5)]),
            None,
            unreached,
        );
        assert_eq!(w, Way::Rdma(vec!["a".into(), "b".into()]));
    }

    /// The case `client.transport()` alone called RDMA: the path is up, the rails moved
    /// nothing (a Busy answer sent the value over TCP).
    #[test]
    fn an_active_path_whose_rails_did_not_move_the_block_is_not_rdma() {
        let same = c(&[("mlx5_0", 4096)]);
        let w = way(MIB, &same, &same, None, || "over TCP (busy)".into());
        assert_eq!(w, Way::Other("over TCP (busy)".into()));
        // Part of the block is not the block.
        let w = way(
            MIB,
            &c(&[]),
            &c(&[("mlx5_0", MIB as u64 - 1)]),
            None,
            || "x".into(),
        );
        assert_eq!(w, Way::Other("x".into()));
        // No rails at all (a client without RDMA).
        assert_eq!(
            way(MIB, &c(&[]), &c(&[]), None, || "over TCP: no RDMA path"
                .into()),
            Way::Other("over TCP: no RDMA path".into())
        );
    }

    #[test]
    fn bytes_that_crossed_before_an_rdma_failure_are_not_a_verified_block() {
        let w = way(
            MIB,
            &c(&[("rxe1", 0)]),
            &c(&[("rxe1", MIB as u64)]),
            Some("commit: queue pair broken".into()),
            unreached,
        );
        let Way::Other(why) = w else { panic!("{w:?}") };
        assert!(why.contains("queue pair broken"), "{why}");
    }

    #[test]
    fn the_verdict_names_each_direction_that_did_not_use_rdma() {
        let rdma = Way::Rdma(vec!["rxe1".into()]);
        let tcp = Way::Other("over TCP: RDMA with the server failed (refused)".into());
        assert_eq!(verdict(&rdma, &rdma), Ok(vec!["rxe1".to_string()]));
        assert_eq!(
            verdict(&tcp, &rdma).unwrap_err(),
            "the write did not move over RDMA: it went over TCP: RDMA with the server failed (refused)"
        );
        assert!(
            verdict(&rdma, &tcp)
                .unwrap_err()
                .starts_with("the read did not")
        );
        assert_eq!(
            verdict(&tcp, &tcp).unwrap_err(),
            "neither the write nor the read moved over RDMA: both went over TCP: RDMA with the \
             server failed (refused)"
        );
        let busy = Way::Other("over TCP while the client's RDMA path stayed up: busy".into());
        assert_eq!(
            verdict(&busy, &tcp).unwrap_err(),
            "neither the write nor the read moved over RDMA: the write went over TCP while the \
             client's RDMA path stayed up: busy; the read went over TCP: RDMA with the server \
             failed (refused)"
        );
    }
}
