//! RDMA for drive-backed modes (file, direct): values cannot be read or written one-sided on
//! the drives, so they pass through registered staging memory (`rdma.staging_size`, in
//! chunks of `memory.block_size`).
//!
//! - Put: Allocate reserves drive space and a staged range; the client RDMA WRITEs the value
//!   into the range; Commit writes the range to the drives (hashing it on the way, checked
//!   against the client's checksum as any put) and frees it. Abort frees both.
//! - Get: Lookup reads the value from the drives into a staged range (verified as any read);
//!   the client RDMA READs it; Release frees it.
//! - Full: Allocate and Lookup answer `Busy` at once instead of waiting. A batch sends all its
//!   Allocates (Lookups) before any Commit (Release), so waiting could wait for chunks only
//!   that same batch would give back; `auto` clients move a Busy value over TCP instead,
//!   which needs no staging.
//!
//! Leases bound everything: a put's staging lives as long as its reservation lease, a get's as
//! long as its pin lease; the reaper frees what a vanished client left.

mod leases;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use memkv_rdma::{RemoteStaging, StagedRange, StagingUsage};
use memkv_store::{Reservation, UnguessableIds};

use leases::Leases;

/// A put between Allocate and Commit: its drive space and the range the client writes.
pub struct StagedPut {
    pub reservation: Reservation,
    pub range: StagedRange,
}

/// The staging region and the transfers holding parts of it.
pub struct Staging {
    region: Arc<RemoteStaging>,
    puts: Leases<StagedPut>,
    gets: Leases<StagedRange>,
    /// Get ids (the Lookup answer's pin); a namespace of their own, as store pins are not
    /// used in drive-backed modes.
    get_ids: UnguessableIds,
    /// Allocates and Lookups answered Busy because no run of chunks was free.
    busy: AtomicU64,
}

/// Why a value could not be staged: the staging is full (for now).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "RDMA staging is full: {} of {} chunks of {} bytes in use and no free run of {needed} \
     chunks for a {len} byte value; retry, or move the value over TCP",
    usage.chunks_in_use, usage.chunks_total, usage.chunk_size
)]
pub struct StagingFull {
    pub len: u64,
    pub needed: usize,
    pub usage: StagingUsage,
}

/// What `/v1/status` shows of the staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingReport {
    pub usage: StagingUsage,
    pub puts_open: usize,
    pub gets_open: usize,
    pub busy_total: u64,
}

impl Staging {
    pub fn new(region: Arc<RemoteStaging>) -> Self {
        Self {
            region,
            puts: Leases::default(),
            gets: Leases::default(),
            get_ids: UnguessableIds::default(),
            busy: AtomicU64::new(0),
        }
    }

    /// The whole region, as Connect advertises it: `(address, rkey)`.
    pub fn window(&self) -> (u64, u32) {
        (self.region.addr(), self.region.rkey())
    }

    /// A range for a value of `len` bytes, or the reason there is none now (counted).
    pub fn stage(&self, len: u64) -> Result<StagedRange, StagingFull> {
        if let Some(range) = usize::try_from(len)
            .ok()
            .and_then(|bytes| self.region.try_stage(bytes))
        {
            return Ok(range);
        }
        self.busy.fetch_add(1, Ordering::Relaxed);
        let usage = self.region.usage();
        Err(StagingFull {
            len,
            // The region refuses a chunk size of zero.
            needed: len.div_ceil(usage.chunk_size as u64) as usize,
            usage,
        })
    }

    /// Holds a put's reservation and range until Commit or Abort names `reservation`'s id.
    pub fn hold_put(&self, put: StagedPut, deadline: Instant) {
        self.puts.insert(put.reservation.id(), put, deadline);
    }

    /// The put staged under reservation `id`; `None` when it was not staged here.
    pub fn take_put(&self, id: u64) -> Option<StagedPut> {
        self.puts.take(id)
    }

    /// Holds a get's range until Release; returns the id the client releases it with.
    pub fn hold_get(&self, range: StagedRange, deadline: Instant) -> u64 {
        self.gets.insert_new(&self.get_ids, range, deadline)
    }

    /// Frees get `id`'s range; `false` when no such get is held (released or expired).
    pub fn release_get(&self, id: u64) -> bool {
        self.gets.take(id).is_some()
    }

    /// Frees what expired leases held; returns how many.
    pub fn reap(&self, now: Instant) -> usize {
        self.puts.reap(now) + self.gets.reap(now)
    }

    pub fn report(&self) -> StagingReport {
        StagingReport {
            usage: self.region.usage(),
            puts_open: self.puts.len(),
            gets_open: self.gets.len(),
            busy_total: self.busy.load(Ordering::Relaxed),
        }
    }
}
