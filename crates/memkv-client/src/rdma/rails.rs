//! Rails: one opened RDMA device each, with its staging buffers and counters, and per server
//! the rail's health. A rail whose transfers or Connect fail with a server is dropped for that
//! server (reason logged at WARN the first time) while the client's other rails carry its
//! transfers; it is tried again after `RAIL_RETRY`. A client's last live rail is never dropped:
//! its failures go to the caller (or, under `auto`, to TCP).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memkv_rdma::{DciPool, RdmaDevice, StagingPool};

/// How long a rail dropped for a server stays out before it is tried again.
pub(crate) const RAIL_RETRY: Duration = Duration::from_secs(10);

/// Counter: bytes moved by RDMA, by rail and operation (`write`, `read`).
pub const RDMA_BYTES_TOTAL: &str = "memkv_client_rdma_bytes_total";

/// What one rail has done since the client started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailStats {
    /// The RDMA device.
    pub device: String,
    /// Chains of work requests posted (one doorbell each) by this rail's queue pairs.
    pub doorbells: u64,
    /// Value bytes moved (both directions).
    pub bytes: u64,
    /// Servers for which the rail is dropped now, with the reason.
    pub dropped: Vec<(String, String)>,
    /// "DC" when a server is reached through DC initiators on this rail, else "RC".
    pub transport: &'static str,
    /// Why that transport: e.g. "both sides support DC", or why DC is not used.
    pub transport_reason: String,
    /// The GRH traffic class (DSCP << 2) this rail's queue pairs send with, as planned at
    /// start (configured, detected over dcbnl, or 0); `None` on InfiniBand, which has no GRH.
    pub traffic_class: Option<u8>,
    /// The service level they send at (on RoCE the PFC priority).
    pub service_level: u8,
}

pub(crate) struct Rail {
    pub device: Arc<RdmaDevice>,
    pub staging: Arc<StagingPool>,
    /// DC initiators shared by every server on this rail, when the device can do DC.
    pub dci: Option<Arc<DciPool>>,
    /// Why this rail has no DC initiators (when it has none).
    pub no_dc: Option<String>,
    /// Doorbells of this rail's queue pairs that were replaced.
    pub retired_doorbells: AtomicU64,
    pub bytes: AtomicU64,
}

impl Rail {
    pub fn new(
        device: Arc<RdmaDevice>,
        staging: Arc<StagingPool>,
        dci: Result<Arc<DciPool>, String>,
    ) -> Rail {
        let (dci, no_dc) = match dci {
            Ok(pool) => (Some(pool), None),
            Err(why) => (None, Some(why)),
        };
        Rail {
            device,
            staging,
            dci,
            no_dc,
            retired_doorbells: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    pub fn moved(&self, bytes: usize, op: &'static str) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        metrics::counter!(RDMA_BYTES_TOTAL, "rail" => self.device.name().to_owned(), "op" => op)
            .increment(bytes as u64);
    }
}

/// A rail's standing with one server.
#[derive(Debug, Default)]
pub(crate) struct Health {
    down: Option<(Instant, String)>,
    warned: bool,
}

impl Health {
    /// Whether the rail may carry transfers to the server at `now`.
    pub fn live(&self, now: Instant) -> bool {
        self.down.as_ref().is_none_or(|(until, _)| now >= *until)
    }

    /// Drops the rail until `now + RAIL_RETRY`. `true` the first time (the caller logs it).
    pub fn drop_until(&mut self, now: Instant, reason: String) -> bool {
        self.down = Some((now + RAIL_RETRY, reason));
        !std::mem::replace(&mut self.warned, true)
    }

    /// The reason, while the rail is out.
    pub fn reason(&self, now: Instant) -> Option<&str> {
        match &self.down {
            Some((until, reason)) if now < *until => Some(reason),
            _ => None,
        }
    }
}

/// Of `rails` rails whose health is `live`, those to use: the live ones, or all of them when
/// none is live (a server is never left without a rail to try).
pub(crate) fn usable(live: &[bool]) -> Vec<usize> {
    let up: Vec<usize> = (0..live.len()).filter(|&r| live[r]).collect();
    if up.is_empty() {
        (0..live.len()).collect()
    } else {
        up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_rail_returns_after_its_retry_time_and_warns_once() {
        let mut h = Health::default();
        let now = Instant::now();
        assert!(h.live(now));
        assert!(h.drop_until(now, "qp broke".into()));
        assert!(!h.live(now + RAIL_RETRY / 2));
        assert_eq!(h.reason(now), Some("qp broke"));
        assert!(h.live(now + RAIL_RETRY));
        assert!(!h.drop_until(now, "again".into()), "logged once");
        assert_eq!(h.reason(now + RAIL_RETRY), None);
    }

    #[test]
    fn with_no_live_rail_every_rail_is_tried() {
        assert_eq!(usable(&[true, false, true]), vec![0, 2]);
        assert_eq!(usable(&[false, false]), vec![0, 1]);
        assert!(usable(&[]).is_empty());
    }
}
