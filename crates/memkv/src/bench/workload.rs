//! One block size's run: concurrent tasks issuing operations through the real client (or, for
//! `--redis`, to a Redis server) until the duration or the operation count is reached, each
//! timing its calls into its own histogram. Closed loop by default (each task sends its next
//! call when the last one ends); with a rate, open loop: calls are due at fixed intervals and
//! each is timed from when it was due, so time spent queued behind a slow call counts (no
//! coordinated omission).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use memkv_client::{Client, RdmaBuffer};
use tokio::time::Instant;

use super::histogram::Histogram;
use super::resp::RespConn;
use super::units::format_size;

/// What the bench drives.
#[derive(Clone)]
pub enum Target {
    Memkv(Client),
    /// A Redis server's `host:port` (SET / GET / DEL; single-key calls only).
    Redis(String),
}

/// What each call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Put,
    Get,
    /// Half puts, half gets (chosen at random per call).
    Mixed,
    Exists,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Mixed => "mixed",
            Op::Exists => "exists",
        }
    }

    /// Whether the keys must exist before the timed run.
    pub fn reads(self) -> bool {
        !matches!(self, Op::Put)
    }

    /// Whether each item moves a value (exists moves none).
    pub fn moves_values(self) -> bool {
        !matches!(self, Op::Exists)
    }
}

/// When a run ends.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    After(Duration),
    /// Total items over all tasks.
    Count(u64),
}

/// One block size's run.
#[derive(Clone)]
pub struct Plan {
    pub op: Op,
    pub size: u64,
    pub tasks: usize,
    pub batch: usize,
    pub stop: Stop,
    pub keys: Arc<Vec<Vec<u8>>>,
    pub value: Arc<Vec<u8>>,
    /// Single-key puts and gets from/into an RDMA-registered buffer per task (zero-copy).
    pub registered: bool,
    /// Items per second over all tasks (open loop); `None`: each task as fast as it can.
    pub rate: Option<f64>,
}

/// What a run measured. Latency is per call (one batch when `batch` > 1), one sample each.
pub struct Outcome {
    pub items: u64,
    pub elapsed: Duration,
    pub latency: Histogram,
}

/// Why a run stopped early.
#[derive(Debug)]
pub enum Failure {
    Client(memkv_client::Error),
    /// The server answered, but not with what the bench stored.
    Wrong(String),
}

impl From<memkv_client::Error> for Failure {
    fn from(e: memkv_client::Error) -> Self {
        Failure::Client(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Wrong(e.to_string())
    }
}

/// The keys of one block size: distinct per size, so a sweep never reads another size's value.
pub fn key_space(size: u64, count: u64) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("bench/{}/{i:08}", format_size(size)).into_bytes())
        .collect()
}

/// A value of `size` pseudo-random bytes (incompressible, not all zeros).
pub fn value_of(size: u64) -> Vec<u8> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ size);
    let mut value = Vec::with_capacity(size as usize);
    while value.len() < size as usize {
        let word = rng.next().to_le_bytes();
        let take = word.len().min(size as usize - value.len());
        value.extend_from_slice(&word[..take]);
    }
    value
}

/// Stores every key once (untimed), in batches of at most 32 MiB / 1000 items.
pub async fn populate(target: &Target, plan: &Plan) -> Result<(), Failure> {
    let client = match target {
        Target::Memkv(client) => client,
        Target::Redis(addr) => {
            let mut conn = RespConn::connect(addr).await?;
            for key in plan.keys.iter() {
                conn.set(key, &plan.value).await?;
            }
            return Ok(());
        }
    };
    let per_batch = ((32 << 20) / plan.size.max(1)).clamp(1, 1000) as usize;
    for chunk in plan.keys.chunks(per_batch) {
        let items: Vec<(&[u8], &[u8])> = chunk
            .iter()
            .map(|k| (k.as_slice(), plan.value.as_slice()))
            .collect();
        for result in client.put_batch(&items).await {
            result?;
        }
    }
    Ok(())
}

/// Deletes the key space (untimed), so the next block size starts with the server's memory
/// free instead of evicting this size's values while it stores its own. On Redis only the
/// bench's own keys are deleted.
pub async fn clear(target: &Target, plan: &Plan) -> Result<(), Failure> {
    let client = match target {
        Target::Memkv(client) => client,
        Target::Redis(addr) => {
            let mut conn = RespConn::connect(addr).await?;
            for key in plan.keys.iter() {
                conn.del(key).await?;
            }
            return Ok(());
        }
    };
    for chunk in plan.keys.chunks(1000) {
        for result in client.delete_batch(chunk).await {
            result?;
        }
    }
    Ok(())
}

/// When task `index` of `tasks` is first due, and the interval between its calls. `--rate`'s
/// range keeps these in bounds; checked all the same, as a float that does not fit a
/// `Duration` would panic.
fn pacing(
    started: Instant,
    batch: usize,
    rate: f64,
    index: usize,
    tasks: usize,
) -> Result<(Instant, Duration), Failure> {
    let out_of_range = || {
        Failure::Wrong(format!(
            "--rate {rate}: the interval between calls is out of range"
        ))
    };
    let interval = Duration::try_from_secs_f64(batch as f64 / rate).map_err(|_| out_of_range())?;
    let first = u32::try_from(index)
        .ok()
        .and_then(|i| interval.checked_mul(i))
        .and_then(|offset| started.checked_add(offset));
    let every = u32::try_from(tasks)
        .ok()
        .and_then(|n| interval.checked_mul(n));
    first.zip(every).ok_or_else(out_of_range)
}

/// Runs `plan`, adding each finished item to `done` (for the progress display).
pub async fn run(target: &Target, plan: &Plan, done: Arc<AtomicU64>) -> Result<Outcome, Failure> {
    let claimed = Arc::new(AtomicU64::new(0));
    // Redis connections open before the clock starts, as memkv's (`open_connections`).
    let mut redis = Vec::with_capacity(plan.tasks);
    for _ in 0..plan.tasks {
        redis.push(match target {
            Target::Redis(addr) => Some(RespConn::connect(addr).await?),
            Target::Memkv(_) => None,
        });
    }
    let started = Instant::now();
    let deadline = match plan.stop {
        Stop::After(d) => Some(started + d),
        Stop::Count(_) => None,
    };
    let mut tasks = Vec::with_capacity(plan.tasks);
    for (index, redis) in redis.into_iter().enumerate() {
        // Open loop: task `index` is due every `tasks` intervals, offset by `index` intervals,
        // so the calls of all tasks together arrive evenly at the rate.
        let pacing = match plan.rate {
            Some(rate) => Some(pacing(started, plan.batch, rate, index, plan.tasks)?),
            None => None,
        };
        let worker = Worker {
            target: target.clone(),
            redis,
            plan: plan.clone(),
            pacing,
            rng: Rng(0x2545_f491_4f6c_dd1d ^ ((index as u64 + 1) << 32) ^ plan.size),
            claimed: Arc::clone(&claimed),
            done: Arc::clone(&done),
            deadline,
        };
        tasks.push(tokio::spawn(worker.run()));
    }
    let mut outcome = Outcome {
        items: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::default(),
    };
    let mut first_failure = None;
    for task in tasks {
        match task.await.expect("bench tasks do not panic") {
            Ok(part) => {
                outcome.items += part.items;
                outcome.latency.merge(&part.latency);
            }
            Err(e) => {
                first_failure.get_or_insert(e);
            }
        }
    }
    outcome.elapsed = started.elapsed();
    match first_failure {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

struct Worker {
    target: Target,
    /// This task's connection when the target is Redis.
    redis: Option<RespConn>,
    plan: Plan,
    /// (when the first call is due, the interval between this task's calls)
    pacing: Option<(Instant, Duration)>,
    rng: Rng,
    claimed: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
    deadline: Option<Instant>,
}

impl Worker {
    async fn run(mut self) -> Result<Outcome, Failure> {
        let mut latency = Histogram::default();
        let mut items = 0u64;
        let mut buf = Vec::new();
        let mut batch_bufs: Vec<Vec<u8>> = Vec::new();
        let mut registered = match self.plan.registered {
            true => Some(self.registered_buffer()?),
            false => None,
        };
        let mut redis = self.redis.take();
        let mut due = self.pacing.map(|(first, _)| first);
        let batch = self.plan.batch as u64;
        loop {
            let n = match (self.plan.stop, self.deadline) {
                (Stop::Count(total), _) => {
                    let first = self.claimed.fetch_add(batch, Ordering::Relaxed);
                    if first >= total {
                        break;
                    }
                    batch.min(total - first) as usize
                }
                // Paced, every call due before the deadline is sent (below), however late: a
                // server slow at the end of a run must not leave its calls unmeasured.
                (Stop::After(_), Some(deadline))
                    if self.pacing.is_some() || Instant::now() < deadline =>
                {
                    batch as usize
                }
                _ => break,
            };
            let keys = &self.plan.keys;
            let start = (self.rng.next() % keys.len() as u64) as usize;
            let put = match self.plan.op {
                Op::Put => true,
                Op::Mixed => self.rng.next() & 1 == 0,
                Op::Get | Op::Exists => false,
            };
            if let (Some(due), Some(deadline)) = (due, self.deadline)
                && due >= deadline
            {
                break;
            }
            let began = match (due.as_mut(), self.pacing) {
                (Some(due), Some((_, interval))) => {
                    let this = *due;
                    *due += interval;
                    if Instant::now() < this {
                        // On time: the call starts when the wait ends. The wait's own slack
                        // (about 50 us) is the bench's, not the server's, so up to
                        // PACING_SLACK of lateness is not counted; anything later (a busy
                        // runtime, cores taken by the server under test) is.
                        wait_until(this).await;
                        Instant::now().min(this + PACING_SLACK)
                    } else {
                        // Behind (the last call ran long): timed from when it was due.
                        this
                    }
                }
                _ => Instant::now(),
            };
            if let Some(conn) = redis.as_mut() {
                self.redis(conn, &keys[start], put, &mut buf).await?;
            } else if let Some(rb) = registered.as_mut() {
                self.registered(&keys[start], put, rb).await?;
            } else if n == 1 {
                self.single(&keys[start], put, &mut buf).await?;
            } else {
                let picked: Vec<&[u8]> = (0..n)
                    .map(|i| keys[(start + i) % keys.len()].as_slice())
                    .collect();
                self.batch(&picked, put, &mut batch_bufs).await?;
            }
            latency.record(began.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
            items += n as u64;
            self.done.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(Outcome {
            items,
            elapsed: Duration::ZERO,
            latency,
        })
    }

    fn client(&self) -> &Client {
        match &self.target {
            Target::Memkv(client) => client,
            Target::Redis(_) => unreachable!("Redis workers use their connection"),
        }
    }

    async fn redis(
        &self,
        conn: &mut RespConn,
        key: &[u8],
        put: bool,
        buf: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        if put {
            return Ok(conn.set(key, &self.plan.value).await?);
        }
        let found =
            conn.get(key, buf, self.plan.size as usize).await? && self.check_len(key, buf.len())?;
        self.found(key, found)
    }

    fn registered_buffer(&self) -> Result<RdmaBuffer, Failure> {
        let mut rb = self.client().register_buffer(self.plan.size as usize)?;
        rb.as_mut_slice().copy_from_slice(&self.plan.value);
        Ok(rb)
    }

    async fn registered(&self, key: &[u8], put: bool, rb: &mut RdmaBuffer) -> Result<(), Failure> {
        let client = self.client();
        if put {
            return Ok(client.put_from(key, rb, rb.len()).await?);
        }
        let found = match client.get_into_buffer(key, rb).await? {
            Some(len) => self.check_len(key, len)?,
            None => false,
        };
        self.found(key, found)
    }

    async fn single(&self, key: &[u8], put: bool, buf: &mut Vec<u8>) -> Result<(), Failure> {
        let client = self.client();
        if put {
            return Ok(client.put(key, &self.plan.value).await?);
        }
        let found = match self.plan.op {
            Op::Exists => client.exists(key).await?,
            _ => client.get_into(key, buf).await? && self.check_len(key, buf.len())?,
        };
        self.found(key, found)
    }

    /// A batch call; gets land in `bufs`, one caller-owned buffer per key reused from call to
    /// call, as an engine's batch reads land in its own KV memory (`get_batch_into`).
    async fn batch(
        &self,
        keys: &[&[u8]],
        put: bool,
        bufs: &mut Vec<Vec<u8>>,
    ) -> Result<(), Failure> {
        let client = self.client();
        if put {
            let value = self.plan.value.as_slice();
            let items: Vec<(&[u8], &[u8])> = keys.iter().map(|&k| (k, value)).collect();
            for result in client.put_batch(&items).await {
                result?;
            }
            return Ok(());
        }
        if self.plan.op == Op::Exists {
            for (key, result) in keys.iter().zip(client.exists_batch(keys).await) {
                self.found(key, result?)?;
            }
            return Ok(());
        }
        let size = usize::try_from(self.plan.size).expect("bench sizes fit memory");
        bufs.resize_with(keys.len(), || vec![0; size]);
        let bufs = &mut bufs[..keys.len()];
        for (key, result) in keys.iter().zip(client.get_batch_into(keys, bufs).await) {
            let found = match result? {
                Some(len) => self.check_len(key, len)?,
                None => false,
            };
            self.found(key, found)?;
        }
        Ok(())
    }

    fn check_len(&self, key: &[u8], len: usize) -> Result<bool, Failure> {
        if len as u64 == self.plan.size {
            return Ok(true);
        }
        Err(Failure::Wrong(format!(
            "key {} came back with {len} bytes; the bench stored {}",
            String::from_utf8_lossy(key),
            self.plan.size
        )))
    }

    fn found(&self, key: &[u8], found: bool) -> Result<(), Failure> {
        if found {
            return Ok(());
        }
        Err(Failure::Wrong(format!(
            "key {} is missing although the bench stored it: the server evicted it (the key \
             space, --keys x size, is larger than the server's memory? A file- or direct-mode \
             server holds each value in whole extents of storage.block_size: fewer --keys, or \
             a block size nearer the value size)",
            String::from_utf8_lossy(key)
        )))
    }
}

/// How late after its due time a paced call may start without the lateness counting in its
/// latency: four times the thread sleep's usual slack in `wait_until`.
const PACING_SLACK: Duration = Duration::from_micros(200);

/// Waits until `due`, precisely: tokio's timer ticks in whole milliseconds, which at
/// thousands of calls per second would release them in bursts at each tick and measure the
/// bursts' queueing. The last stretch (under 2 ms) is a thread sleep on the blocking pool
/// (the kernel's high-resolution timer, about 50 us of slack).
async fn wait_until(due: Instant) {
    const TOKIO_TICK: Duration = Duration::from_millis(2);
    let now = Instant::now();
    if due > now + TOKIO_TICK {
        tokio::time::sleep_until(due - TOKIO_TICK).await;
    }
    let left = due.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

/// xorshift64*: cheap, seedable, and good enough to spread keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_per_size() {
        let a = key_space(4096, 3);
        let b = key_space(1 << 20, 3);
        assert_eq!(a[0], b"bench/4K/00000000");
        assert_eq!(b[2], b"bench/1M/00000002");
        assert!(a.iter().all(|k| !b.contains(k)));
    }

    #[test]
    fn values_have_their_size_and_are_not_flat() {
        for size in [1, 7, 4096, 100_003] {
            let v = value_of(size);
            assert_eq!(v.len() as u64, size);
            if size > 16 {
                assert!(v.iter().any(|&b| b != v[0]));
            }
        }
    }
}
