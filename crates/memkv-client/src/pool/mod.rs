//! The connections kept to one server, opened on first use and reopened with exponential
//! backoff after a failure, so a dead server costs its callers one fast error instead of a
//! connect attempt per request.
//!
//! A request goes to the connection with the fewest requests in flight. Round-robin alone let
//! two requests queue on one socket (the second waits for the first's bytes) while another
//! connection sat idle, which showed as a longer tail under concurrent callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use memkv_proto::AuthKey;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::conn::{CLIENT_LIMITS, Connection, Dial};
use crate::{Error, Result};

mod probe;

use probe::{Probe, Target};

/// First retry delay after a failed connect.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Reconnect pacing of one connection slot.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last: Option<Error>,
}

impl Backoff {
    /// The delay after `failures` consecutive failures: 50 ms doubling up to 2 s.
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        BACKOFF_MIN.saturating_mul(1 << doublings).min(BACKOFF_MAX)
    }

    /// The last failure, while it is too soon to try again.
    fn waiting(&self, now: Instant) -> Option<&Error> {
        match self.retry_at {
            Some(at) if now < at => self.last.as_ref(),
            _ => None,
        }
    }

    fn failed(&mut self, now: Instant, err: Error) {
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + Backoff::delay(self.failures));
        self.last = Some(err);
    }

    fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

#[derive(Default)]
struct Slot {
    conn: Option<Arc<Connection>>,
    backoff: Backoff,
}

/// What callers see of a slot without taking its lock.
#[derive(Default)]
struct SlotLoad {
    /// Requests holding the slot's connection now.
    in_flight: AtomicUsize,
    /// While the slot's last connect failure is backing off (milliseconds since the pool was
    /// made; 0: not failing), it is chosen only when every slot is in that state. Once the
    /// backoff ends it is chosen like any other, so it is tried again.
    failing_until_ms: AtomicU64,
}

/// Up to `num_connections` connections to one server; each request takes the least loaded.
pub(crate) struct ServerPool {
    server: String,
    key: AuthKey,
    payload_mac: bool,
    slots: Vec<Mutex<Slot>>,
    loads: Vec<SlotLoad>,
    /// What the slots' failure deadlines count from.
    epoch: Instant,
    /// Where the search for the least loaded slot starts, so ties rotate.
    next: AtomicUsize,
    /// Checks the server once a dial or a request went unanswered past a caller's deadline,
    /// and says whether calls fail at once meanwhile (`probe.rs`).
    probe: Arc<Probe>,
}

/// One request counted in flight on a slot until dropped.
struct InFlight<'a>(&'a SlotLoad);

impl<'a> InFlight<'a> {
    fn new(load: &'a SlotLoad) -> Self {
        load.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(load)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection taken from the pool; it counts as in flight on its slot until dropped.
pub(crate) struct Lease<'a> {
    conn: Arc<Connection>,
    _in_flight: InFlight<'a>,
}

impl Lease<'_> {
    /// The connection itself, for a holder that keeps it (an RDMA session's control channel);
    /// it stops counting as in flight.
    pub fn into_connection(self) -> Arc<Connection> {
        self.conn
    }
}

impl std::ops::Deref for Lease<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl ServerPool {
    pub fn new(server: String, key: AuthKey, payload_mac: bool, num_connections: usize) -> Self {
        ServerPool {
            server,
            key,
            payload_mac,
            slots: (0..num_connections.max(1))
                .map(|_| Mutex::new(Slot::default()))
                .collect(),
            loads: (0..num_connections.max(1))
                .map(|_| SlotLoad::default())
                .collect(),
            epoch: Instant::now(),
            next: AtomicUsize::new(0),
            probe: Arc::default(),
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The slot to use next: the fewest requests in flight among the slots that are not
    /// failing (all of them when every one is), the first found from a rotating start.
    fn pick(&self) -> usize {
        let n = self.loads.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = self.millis(Instant::now());
        let mut best: Option<(bool, usize, usize)> = None;
        for k in 0..n {
            let index = (start + k) % n;
            let load = &self.loads[index];
            let rank = (
                load.failing_until_ms.load(Ordering::Relaxed) > now,
                load.in_flight.load(Ordering::Relaxed),
                index,
            );
            if best.is_none_or(|b| (rank.0, rank.1) < (b.0, b.1)) {
                best = Some(rank);
                if !rank.0 && rank.1 == 0 {
                    break;
                }
            }
        }
        best.map_or(start, |b| b.2)
    }

    /// `at` in milliseconds since the pool was made, at least 1 (0 means "not failing").
    fn millis(&self, at: Instant) -> u64 {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX).max(1)
    }

    /// An open connection: the least loaded slot's, opening it if needed. When that slot cannot
    /// connect (or is backing off after a failure), another slot's open connection, if there
    /// is one, else the slot's error at once.
    pub async fn connection(&self) -> Result<Lease<'_>> {
        // Open connections included: a server that leaves a dial or a request unanswered is
        // hung, whichever connection reaches it.
        if let Some(err) = self.probe.down() {
            return Err(err);
        }
        let index = self.pick();
        let load = &self.loads[index];
        // Counted from here, so concurrent callers see the slot as taken while it connects.
        let in_flight = InFlight::new(load);
        let lease = |conn: Arc<Connection>| Lease {
            conn,
            _in_flight: in_flight,
        };
        let mut slot = self.slots[index].lock().await;
        if let Some(conn) = slot.conn.as_ref().filter(|c| c.is_open()) {
            return Ok(lease(Arc::clone(conn)));
        }
        slot.conn = None;
        let now = Instant::now();
        if let Some(err) = slot.backoff.waiting(now) {
            let err = err.clone();
            drop(slot);
            return self.open_elsewhere(index).ok_or(err);
        }
        let dial = Dial {
            server: &self.server,
            key: &self.key,
            payload_mac: self.payload_mac,
            limits: CLIENT_LIMITS,
        };
        // A caller's deadline may drop this future mid-handshake (a server that accepts but
        // never answers): that counts as a failed connect too, or the next caller would dial
        // again at once instead of getting one fast error.
        let mut abandoned = AbandonedDial {
            slot: Some(&mut slot),
            load,
            pool: self,
        };
        let opened = Connection::open(&dial).await;
        abandoned.slot = None;
        drop(abandoned);
        match opened {
            Ok(conn) => Ok(lease(self.connected(&mut slot, load, conn))),
            Err(err) => {
                if slot.backoff.failures == 0 {
                    tracing::warn!(server = %self.server, "cannot connect: {err}");
                }
                self.connect_failed(&mut slot, load, err.clone());
                drop(slot);
                self.open_elsewhere(index).ok_or(err)
            }
        }
    }

    /// An open connection of a slot other than `except`, for a caller whose slot could not
    /// connect: a server that refuses connections beyond its `limits.max_connections` still
    /// serves the ones it accepted (each refused slot failed a request every back-off step).
    /// Slots busy connecting or being checked are passed over, not waited for.
    fn open_elsewhere(&self, except: usize) -> Option<Lease<'_>> {
        self.slots.iter().enumerate().find_map(|(index, slot)| {
            if index == except {
                return None;
            }
            let slot = slot.try_lock().ok()?;
            let conn = slot.conn.as_ref().filter(|c| c.is_open())?;
            Some(Lease {
                conn: Arc::clone(conn),
                _in_flight: InFlight::new(&self.loads[index]),
            })
        })
    }

    /// A request on an open connection went unanswered for `after` (the caller's deadline):
    /// the server is checked, and calls fail at once while it stays silent (`probe.rs`).
    pub fn request_unanswered(&self, after: Duration) {
        let err = Error::Unreachable {
            server: self.server.clone(),
            source: Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "a request went unanswered for {after:?}, and a fresh connection's ping too; calls fail at once until the server answers again"
                ),
            )),
        };
        self.probe.request_unanswered(self.target(), err);
    }

    fn target(&self) -> Target {
        Target {
            server: self.server.clone(),
            key: self.key.clone(),
            payload_mac: self.payload_mac,
        }
    }

    /// Puts a newly opened connection in `slot`.
    fn connected(&self, slot: &mut Slot, load: &SlotLoad, conn: Connection) -> Arc<Connection> {
        crate::metrics::connected();
        if slot.backoff.failures > 0 {
            tracing::info!(server = %self.server, "reconnected");
        }
        slot.backoff.succeeded();
        load.failing_until_ms.store(0, Ordering::Relaxed);
        let conn = Arc::new(conn);
        slot.conn = Some(Arc::clone(&conn));
        conn
    }

    /// Backs `slot` off after a failed connect, and marks it failing for [`Self::pick`].
    fn connect_failed(&self, slot: &mut Slot, load: &SlotLoad, err: Error) {
        let now = Instant::now();
        slot.backoff.failed(now, err);
        let until = slot.backoff.retry_at.unwrap_or(now);
        load.failing_until_ms
            .store(self.millis(until), Ordering::Relaxed);
    }
}

/// Records a failed connect on its slot when dropped armed (the dial was abandoned).
struct AbandonedDial<'a> {
    slot: Option<&'a mut Slot>,
    load: &'a SlotLoad,
    pool: &'a ServerPool,
}

impl Drop for AbandonedDial<'_> {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let err = Error::Unreachable {
            server: self.pool.server.clone(),
            source: Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection's handshake did not finish within the caller's deadline",
            )),
        };
        self.pool.connect_failed(slot, self.load, err.clone());
        self.pool.probe.dial_unanswered(self.pool.target(), err);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_50ms_to_2s() {
        assert_eq!(Backoff::delay(1), Duration::from_millis(50));
        assert_eq!(Backoff::delay(2), Duration::from_millis(100));
        assert_eq!(Backoff::delay(6), Duration::from_millis(1600));
        assert_eq!(Backoff::delay(7), BACKOFF_MAX);
        assert_eq!(Backoff::delay(u32::MAX), BACKOFF_MAX);
    }

    fn pool(slots: usize) -> ServerPool {
        ServerPool::new(
            "127.0.0.1:1".into(),
            AuthKey::from_bytes([7; 32]),
            false,
            slots,
        )
    }

    #[tokio::test]
    async fn a_request_takes_the_least_loaded_connection() {
        let p = pool(4);
        for (slot, n) in [(0, 2), (1, 1), (2, 3), (3, 1)] {
            p.loads[slot].in_flight.store(n, Ordering::Relaxed);
        }
        // Slots 1 and 3 tie; the search start rotates, so both are used.
        let picks: Vec<usize> = (0..8).map(|_| p.pick()).collect();
        assert!(picks.iter().all(|&i| i == 1 || i == 3), "{picks:?}");
        assert!(picks.contains(&1) && picks.contains(&3), "{picks:?}");
        p.loads[2].in_flight.store(0, Ordering::Relaxed);
        assert!((0..8).all(|_| p.pick() == 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_slot_is_skipped_until_its_backoff_ends() {
        let p = pool(2);
        p.loads[1].in_flight.store(5, Ordering::Relaxed);
        let until = p.millis(Instant::now() + Duration::from_millis(50));
        p.loads[0].failing_until_ms.store(until, Ordering::Relaxed);
        assert!(
            (0..4).all(|_| p.pick() == 1),
            "a busy healthy slot beats a failing one"
        );
        p.loads[1].failing_until_ms.store(until, Ordering::Relaxed);
        assert!(
            (0..4).all(|_| p.pick() == 0),
            "all failing: the least loaded"
        );
        tokio::time::advance(Duration::from_millis(50)).await;
        p.loads[1].failing_until_ms.store(0, Ordering::Relaxed);
        assert!((0..4).all(|_| p.pick() == 0), "backoff over: tried again");
    }

    #[tokio::test]
    async fn a_lease_counts_until_dropped_and_a_failed_connect_marks_the_slot() {
        let p = pool(2);
        // Nothing listens on port 1: the connect fails, and the slot's count comes back.
        assert!(p.connection().await.is_err());
        assert!(
            p.loads
                .iter()
                .all(|l| l.in_flight.load(Ordering::Relaxed) == 0)
        );
        let now = p.millis(Instant::now());
        let failing = p
            .loads
            .iter()
            .filter(|l| l.failing_until_ms.load(Ordering::Relaxed) > now)
            .count();
        assert_eq!(failing, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_slot_answers_from_memory_until_its_retry_time() {
        let mut b = Backoff::default();
        let now = Instant::now();
        b.failed(
            now,
            Error::Config("first".into()), // any error stands in for a refused connect
        );
        assert!(b.waiting(now + Duration::from_millis(49)).is_some());
        assert!(b.waiting(now + Duration::from_millis(50)).is_none());
        b.failed(now, Error::Config("second".into()));
        assert!(b.waiting(now + Duration::from_millis(99)).is_some());
        b.succeeded();
        assert!(b.waiting(now).is_none());
    }
}
