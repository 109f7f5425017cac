//! `memkv bench`: throughput and latency of servers driven through the real client, swept over
//! block sizes; `--local` brings its own in-process server, `--memcpy` measures the copy
//! ceiling instead. Comparisons with Redis, iperf3 and memcpy: `scripts/bench/compare`.

mod histogram;
mod local;
mod memcpy;
mod progress;
mod report;
mod resp;
mod units;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use memkv_client::{Client, ConfigSources, Setting, Transport};

use crate::cli::GlobalArgs;
use crate::exit::{self, Exit};
use report::{Row, Setup};
use workload::{Failure, Op, Plan, Stop, Target};

/// Deadline per call unless --timeout-ms or MEMKV_TIMEOUT_MS says otherwise: a batch of large
/// values under heavy concurrency can take seconds.
const BENCH_TIMEOUT: Duration = Duration::from_secs(60);
/// The default key space holds about this many bytes per block size.
const DEFAULT_KEY_BYTES: u64 = 256 << 20;

/// Block sizes, as parsed from `--sizes`.
#[derive(Debug, Clone)]
pub struct Sweep(pub Vec<u64>);

fn parse_sweep(text: &str) -> Result<Sweep, String> {
    units::parse_sweep(text).map(Sweep)
}

/// Fewest items per second `--rate` takes: one call in about 17 minutes. Slower rates are
/// mistakes, and a tiny one makes the interval between calls too long for a `Duration`.
const MIN_RATE: f64 = 0.001;
/// Most items per second `--rate` takes.
const MAX_RATE: f64 = 1e7;

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if (MIN_RATE..=MAX_RATE).contains(&r) => Ok(r),
        _ => Err(format!(
            "{text:?} is not a rate: give items per second, from {MIN_RATE} to {MAX_RATE}"
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchTransport {
    Tcp,
    Rdma,
    /// The same-host transport (servers on this host; `--local` starts one).
    Shm,
    /// What a client's default does: shared memory where it pays, RDMA where it is up, else TCP.
    Auto,
}

/// Options of `memkv bench`. Servers, auth key and deadline come from the global flags
/// (--servers, --auth-key, --timeout-ms) and the client environment, as for every command.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// How values move.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: BenchTransport,
    /// What each call does (get, mixed and exists store the key space first, untimed).
    #[arg(long, value_enum, default_value = "put")]
    pub op: Op,
    /// Block sizes to sweep, in order: bytes or K/M suffixes (powers of 1024), up to 64M.
    #[arg(long, value_name = "LIST", default_value = "4K,64K,1M,4M", value_parser = parse_sweep)]
    pub sizes: Sweep,
    /// Concurrent tasks issuing calls.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,
    /// Connections per server (default: MEMKV_NUM_CONNECTIONS, else the client's 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: Option<u32>,
    /// Items per call; 1 uses the single-key operations, more the batch ones.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16384))]
    pub batch: u32,
    /// How long each block size runs, e.g. 500ms, 10s, 2m [default: 5s].
    #[arg(long, value_name = "TIME", value_parser = units::parse_duration, conflicts_with = "count")]
    pub duration: Option<Duration>,
    /// Run each block size's workload this long first, untimed (a fresh server's memory is
    /// touched for the first time then; steady state is what the timed run should see).
    #[arg(long, value_name = "TIME", value_parser = units::parse_duration)]
    pub warmup: Option<Duration>,
    /// Run each block size for this many items instead of a duration.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Distinct keys per block size [default: about 256 MiB of values, 16..=10000 keys, at
    /// least one batch, at most --count].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub keys: Option<u64>,
    /// With --transport rdma: put from and get into a registered buffer per task (zero-copy,
    /// `put_from` / `get_into_buffer`) instead of the plain calls, which stage through the
    /// client's own registered memory. Single-key only (--batch 1).
    #[arg(long)]
    pub registered: bool,
    /// RDMA devices the client uses as rails (overrides MEMKV_RDMA_DEVICES).
    #[arg(long, value_name = "DEV,...", value_delimiter = ',')]
    pub rails: Vec<String>,
    /// With --local and --transport rdma: the RDMA device the in-process server serves its
    /// arena on (default: the server's own default).
    #[arg(long, value_name = "DEV", requires = "local")]
    pub local_rdma_device: Option<String>,
    /// Ask the servers to MAC every payload too (HMAC-SHA256 over the value bytes), to
    /// measure what that option costs.
    #[arg(long)]
    pub payload_mac: bool,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Start an in-process server on 127.0.0.1 with a fresh auth key and bench that.
    #[arg(long)]
    pub local: bool,
    /// Offered load: this many items per second (0.001 to 10000000) over all tasks, each call
    /// due at a fixed interval and timed from when it was due (open loop; default: closed
    /// loop, each task as fast as it can). The ops/s column shows what was achieved.
    #[arg(long, value_name = "OPS", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Drive the Redis server at HOST:PORT instead (SET / GET / DEL, one connection per task,
    /// single-key puts, gets or mixed): the baseline `scripts/bench/compare` measures with the
    /// same pacing and histograms.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["local", "registered", "payload_mac", "rails"])]
    pub redis: Option<String>,
    /// Measure memcpy bandwidth at each size instead (no server).
    #[arg(long, conflicts_with_all = ["local", "op", "threads", "batch", "count", "keys", "warmup"])]
    pub memcpy: bool,
}

impl BenchArgs {
    fn stop(&self) -> Stop {
        match self.count {
            Some(n) => Stop::Count(n),
            None => Stop::After(self.duration.unwrap_or(Duration::from_secs(5))),
        }
    }

    /// The key space of one block size.
    fn keys_for(&self, size: u64) -> u64 {
        if let Some(keys) = self.keys {
            return keys;
        }
        let keys = (DEFAULT_KEY_BYTES / size)
            .clamp(16, 10_000)
            .max(self.batch.into());
        match self.stop() {
            Stop::Count(n) => keys.min(n.max(self.batch.into())),
            Stop::After(_) => keys,
        }
    }
}

/// Runs `memkv bench`.
pub fn run(global: &GlobalArgs, args: BenchArgs) -> Result<(), Exit> {
    crate::start::init_client_logging();
    if args.memcpy {
        return run_memcpy(&args);
    }
    if args.registered
        && (args.transport != BenchTransport::Rdma || args.batch > 1 || args.op == Op::Exists)
    {
        return Err(Exit::with(
            exit::USAGE,
            "--registered needs --transport rdma, single-key calls (--batch 1) and an op that \
             moves values",
        ));
    }
    if args.redis.is_some() && (args.batch > 1 || args.op == Op::Exists) {
        return Err(Exit::with(
            exit::USAGE,
            "--redis drives single-key SET and GET: use --batch 1 and --op put, get or mixed",
        ));
    }
    if args.local && global.servers.is_some() {
        return Err(Exit::with(
            exit::USAGE,
            "--local starts its own server; drop --servers (or --local)",
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(global, args))
}

fn run_memcpy(args: &BenchArgs) -> Result<(), Exit> {
    let time = args.duration.unwrap_or(Duration::from_secs(1));
    let rows: Vec<_> = args
        .sizes
        .0
        .iter()
        .map(|&size| memcpy::measure(size, time))
        .collect();
    if args.json {
        outln!("{}", memcpy::json(&rows));
    } else {
        out!("{}", memcpy::table(&rows));
    }
    Ok(())
}

async fn bench(global: &GlobalArgs, args: BenchArgs) -> Result<(), Exit> {
    if let Some(addr) = args.redis.clone() {
        return bench_redis(addr, args).await;
    }
    let transport = match args.transport {
        BenchTransport::Tcp => Transport::Tcp,
        BenchTransport::Rdma => Transport::Rdma,
        BenchTransport::Shm => Transport::Shm,
        BenchTransport::Auto => Transport::Auto,
    };
    let flags = crate::flags(global);
    let (mut config, timeout_set, local) = if args.local {
        let largest = args
            .sizes
            .0
            .iter()
            .map(|&s| s.saturating_mul(args.keys_for(s)));
        let arena = local::arena_for(largest.max().unwrap_or(0));
        let rdma = (transport == Transport::Rdma).then_some(args.local_rdma_device.as_deref());
        let local = local::start(arena, rdma).await?;
        // The client settings apply as for any server (MEMKV_NUM_CONNECTIONS, --timeout-ms,
        // MEMKV_CONFIG's payload_mac, ...); only where the server is and its key are fixed.
        let (address, key) = (local.address.clone(), local.key.to_hex());
        let local_flags = |name: &str| match name {
            "MEMKV_SERVERS" => Some(Setting::new(address.clone(), "--local")),
            "MEMKV_AUTH_KEY" => Some(Setting::new(key.clone(), "--local")),
            _ => flags(name),
        };
        let sources = ConfigSources::load(&local_flags)?;
        let (config, timeout_set) = (sources.config()?, sources.timeout()?.is_some());
        (config, timeout_set, Some(local))
    } else {
        let sources = ConfigSources::load(&flags)?;
        (sources.config()?, sources.timeout()?.is_some(), None)
    };
    config.transport = transport;
    if !args.rails.is_empty() {
        config.rdma_devices = args.rails.clone();
    }
    config.payload_mac |= args.payload_mac;
    if let Some(n) = args.connections {
        config.num_connections = n as usize;
    }
    if !timeout_set {
        config.timeout = BENCH_TIMEOUT;
    }
    let config_payload_mac = config.payload_mac;
    let servers = config.servers.clone();
    let connections = config.num_connections;
    let client = Client::connect(config).await?;
    open_connections(&client, connections).await?;
    let stop = args.stop();
    let setup = Setup {
        op: args.op,
        transport: match args.transport {
            BenchTransport::Tcp => "tcp",
            BenchTransport::Rdma => "rdma",
            BenchTransport::Shm => "shm",
            BenchTransport::Auto => "auto",
        },
        servers: &servers,
        local: args.local,
        tasks: args.threads as usize,
        connections,
        batch: args.batch as usize,
        stop: stop_label(stop, args.rate),
        warmup: args.warmup,
        payload_mac: config_payload_mac,
    };
    if !args.json {
        outln!("{}", report::heading(&setup));
        outln!("{}", report::table_header());
    }
    let target = Target::Memkv(client.clone());
    let result = sweep(&target, &args, stop, &setup).await;
    let used = client.transport();
    drop(target);
    drop(client);
    if let Some(local) = local {
        let _ = local.server.shutdown().await;
    }
    let rows = result?;
    if args.json {
        let mut doc = report::json(&setup, &rows);
        doc["transport_used"] = used.into();
        doc["registered"] = args.registered.into();
        outln!("{doc}");
    }
    Ok(())
}

/// Opens every pooled connection before anything is timed, as the Redis driver does: the
/// client connects lazily, so the first size's first calls timed a connect and handshake each.
/// Concurrent pings take different slots (a slot counts as busy while it connects).
async fn open_connections(client: &Client, per_server: usize) -> Result<(), Exit> {
    let mut pings = tokio::task::JoinSet::new();
    for server in client.servers() {
        for _ in 0..per_server {
            let (client, server) = (client.clone(), server.to_owned());
            pings.spawn(async move { client.ping(&server).await });
        }
    }
    while let Some(done) = pings.join_next().await {
        done.expect("pings do not panic")?;
    }
    Ok(())
}

/// `--redis`: the same sweep against a Redis server.
async fn bench_redis(addr: String, args: BenchArgs) -> Result<(), Exit> {
    let stop = args.stop();
    let servers = [addr.clone()];
    let setup = Setup {
        op: args.op,
        transport: "redis (RESP)",
        servers: &servers,
        local: false,
        tasks: args.threads as usize,
        connections: args.threads as usize,
        batch: 1,
        stop: stop_label(stop, args.rate),
        warmup: args.warmup,
        payload_mac: false,
    };
    if !args.json {
        outln!("{}", report::heading(&setup));
        outln!("{}", report::table_header());
    }
    let rows = sweep(&Target::Redis(addr), &args, stop, &setup).await?;
    if args.json {
        outln!("{}", report::json(&setup, &rows));
    }
    Ok(())
}

fn stop_label(stop: Stop, rate: Option<f64>) -> String {
    let stop = match stop {
        Stop::After(d) => format!("{d:?}"),
        Stop::Count(n) => format!("{n} ops"),
    };
    match rate {
        // Shortest exact form: `{:.0}` printed 0.4 as "0".
        Some(r) => format!("{stop} at {r} items/s offered"),
        None => stop,
    }
}

async fn sweep(
    client: &Target,
    args: &BenchArgs,
    stop: Stop,
    setup: &Setup<'_>,
) -> Result<Vec<Row>, Exit> {
    let mut rows = Vec::new();
    for &size in &args.sizes.0 {
        let plan = Plan {
            op: args.op,
            size,
            tasks: args.threads as usize,
            batch: args.batch as usize,
            stop,
            keys: Arc::new(workload::key_space(size, args.keys_for(size))),
            value: Arc::new(workload::value_of(size)),
            registered: args.registered,
            rate: args.rate,
        };
        let label = format!("{} {}", args.op.as_str(), units::format_size(size));
        if plan.op.reads() {
            let spinner = progress::populating(&label, plan.keys.len());
            workload::populate(client, &plan).await.map_err(failed)?;
            spinner.finish_and_clear();
        }
        if let Some(warmup) = args.warmup {
            let warm = progress::Display::start(&format!("{label} warm-up"), Stop::After(warmup));
            let warming = Plan {
                stop: Stop::After(warmup),
                ..plan.clone()
            };
            let outcome = workload::run(client, &warming, warm.counter()).await;
            warm.finish().await;
            outcome.map_err(failed)?;
        }
        let display = progress::Display::start(&label, stop);
        let outcome = workload::run(client, &plan, display.counter()).await;
        display.finish().await;
        let row = Row {
            size,
            outcome: outcome.map_err(failed)?,
        };
        workload::clear(client, &plan).await.map_err(failed)?;
        if !args.json {
            outln!("{}", report::table_row(setup.op, &row));
        }
        rows.push(row);
    }
    Ok(rows)
}

fn failed(failure: Failure) -> Exit {
    match failure {
        Failure::Client(e) => Exit::from(e),
        Failure::Wrong(message) => Exit::with(exit::FAILURE, message),
    }
}

#[cfg(test)]
mod tests;
