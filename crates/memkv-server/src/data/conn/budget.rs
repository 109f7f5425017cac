//! The connection's in-flight budget, `limits.per_connection_inflight_bytes`: what one
//! connection may make the server hold for requests read and not yet answered. Each request
//! takes its share from when its header is read until its answer is on the wire (the permit
//! travels in its [`Outgoing`](crate::data::writer::Outgoing)), so a client that sends and
//! never reads stops being read once its share is spent, in every storage mode and whatever
//! the answers wait in: a blocking thread, the response queue or the writer.

use std::sync::Arc;

use memkv_proto::Header;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes.
const UNIT: u64 = 1024;
/// What every request costs beside its key, payload and answer: its task, its answer and its
/// id. Without it a request with an empty payload (Exists, Stats, a get) took nothing, and a
/// drive-backed server, which gives each request a task, grew about 1 KiB per request sent.
const REQUEST_BYTES: u64 = 1024;

pub(super) struct Budget {
    units: u64,
    semaphore: Arc<Semaphore>,
}

impl Budget {
    pub fn new(bytes: u64) -> Budget {
        let units = (bytes / UNIT).clamp(1, u64::from(u32::MAX >> 3));
        Budget {
            units,
            semaphore: Arc::new(Semaphore::new(units as usize)),
        }
    }

    /// A request's share once its header is read: the fixed cost and its key.
    pub async fn request(&self, header: &Header) -> OwnedSemaphorePermit {
        let bytes = REQUEST_BYTES + u64::from(header.key_len);
        let units = bytes.div_ceil(UNIT).min(self.units) as u32;
        Arc::clone(&self.semaphore)
            .acquire_many_owned(units)
            .await
            .expect("never closed")
    }

    /// Adds `bytes` (a payload to read, an answer's values) to a request's share, never past
    /// the whole budget, so one request alone always proceeds.
    pub async fn grow(&self, mut permit: OwnedSemaphorePermit, bytes: u64) -> OwnedSemaphorePermit {
        let room = self.units.saturating_sub(permit.num_permits() as u64);
        let units = bytes.div_ceil(UNIT).min(room) as u32;
        if units > 0 {
            let more = Arc::clone(&self.semaphore)
                .acquire_many_owned(units)
                .await
                .expect("never closed");
            permit.merge(more);
        }
        permit
    }
}
