use clap::Parser;

use super::*;
use crate::cli::{Cli, Command};

fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
    let argv = ["memkv", "bench"].iter().chain(args).copied();
    match Cli::try_parse_from(argv)?.command {
        Command::Bench(bench) => Ok(bench),
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn defaults() {
    let a = parse(&[]).unwrap();
    assert_eq!(a.transport, BenchTransport::Tcp);
    assert_eq!(a.op, Op::Put);
    assert_eq!(a.sizes.0, [4 << 10, 64 << 10, 1 << 20, 4 << 20]);
    assert_eq!((a.threads, a.batch, a.connections), (4, 1, None));
    assert!(matches!(a.stop(), Stop::After(d) if d == Duration::from_secs(5)));
    assert!(!a.json && !a.local && !a.memcpy);
    assert_eq!(a.warmup, None);
}

#[test]
fn every_option_parses() {
    let a = parse(&[
        "--transport",
        "rdma",
        "--op",
        "exists",
        "--sizes",
        "4K,16K,64K,256K,1M,4M,16M",
        "--threads",
        "16",
        "--connections",
        "8",
        "--batch",
        "1000",
        "--count",
        "5000",
        "--keys",
        "2000",
        "--json",
        "--local",
    ])
    .unwrap();
    assert_eq!(a.transport, BenchTransport::Rdma);
    assert_eq!(a.op, Op::Exists);
    assert_eq!(a.sizes.0.len(), 7);
    assert_eq!(a.sizes.0[6], 16 << 20);
    assert_eq!((a.threads, a.connections, a.batch), (16, Some(8), 1000));
    assert!(matches!(a.stop(), Stop::Count(5000)));
    assert_eq!(a.keys_for(4096), 2000);
    assert!(a.json && a.local);
    let d = parse(&["--duration", "250ms", "--op", "mixed", "--warmup", "1s"]).unwrap();
    assert!(matches!(d.stop(), Stop::After(t) if t == Duration::from_millis(250)));
    assert_eq!(d.warmup, Some(Duration::from_secs(1)));
}

#[test]
fn the_global_client_flags_work_after_bench() {
    let cli = Cli::try_parse_from([
        "memkv",
        "bench",
        "--servers",
        "a:1,b:2",
        "--timeout-ms",
        "9",
    ])
    .unwrap();
    assert_eq!(cli.global.servers.as_deref(), Some("a:1,b:2"));
    assert_eq!(cli.global.timeout_ms, Some(9));
}

#[test]
fn bad_options_are_refused_by_name() {
    for (args, needle) in [
        (&["--sizes", "4K,3Q"][..], "\"3Q\""),
        (&["--sizes", "128M"], "64M"),
        (&["--duration", "25h"], "duration"),
        (&["--threads", "0"], "threads"),
        (&["--batch", "20000"], "batch"),
        (&["--op", "scan"], "scan"),
        (&["--transport", "udp"], "udp"),
        (&["--count", "0"], "count"),
        (&["--duration", "1s", "--count", "5"], "cannot be used with"),
        (&["--memcpy", "--local"], "cannot be used with"),
    ] {
        let err = parse(args).unwrap_err().to_string();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn the_default_key_space_is_about_256_mib_and_holds_a_batch() {
    let a = parse(&[]).unwrap();
    assert_eq!(a.keys_for(4 << 10), 10_000);
    assert_eq!(a.keys_for(1 << 20), 256);
    assert_eq!(a.keys_for(64 << 20), 16);
    let batched = parse(&["--batch", "1000", "--sizes", "16M"]).unwrap();
    assert_eq!(batched.keys_for(16 << 20), 1000);
    let counted = parse(&["--count", "200"]).unwrap();
    assert_eq!(counted.keys_for(4 << 10), 200);
}

#[test]
fn registered_buffers_need_single_key_rdma_calls() {
    for args in [
        &["--registered"][..],
        &["--registered", "--transport", "rdma", "--batch", "4"],
        &["--registered", "--transport", "rdma", "--op", "exists"],
    ] {
        let err = run(&GlobalArgs::default(), parse(args).unwrap()).unwrap_err();
        assert_eq!(err.code, exit::USAGE, "{args:?}");
        assert!(err.message.unwrap().contains("--registered"));
    }
}

#[test]
fn rate_and_redis_parse_and_bad_ones_are_named() {
    let a = parse(&["--rate", "2500", "--redis", "127.0.0.1:6379", "--op", "get"]).unwrap();
    assert_eq!(a.rate, Some(2500.0));
    assert_eq!(a.redis.as_deref(), Some("127.0.0.1:6379"));
    assert_eq!(parse(&["--rate", "0.001"]).unwrap().rate, Some(0.001));
    for bad in ["0", "-5", "nan", "inf", "1e9", "1e-300", "0.0009", "fast"] {
        let err = parse(&[&format!("--rate={bad}")]).unwrap_err().to_string();
        assert!(err.contains("from 0.001 to 10000000"), "{bad}: {err}");
    }
    assert!(parse(&["--redis", "h:1", "--local"]).is_err());
    assert!(parse(&["--redis", "h:1", "--registered"]).is_err());
}

#[test]
fn an_offered_rate_below_one_is_labelled_with_its_digits() {
    let label = stop_label(Stop::Count(5), Some(0.4));
    assert_eq!(label, "5 ops at 0.4 items/s offered");
    assert_eq!(
        stop_label(Stop::Count(5), Some(2500.0)),
        "5 ops at 2500 items/s offered"
    );
}
