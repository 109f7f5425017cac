//! The RDMA control messages on a drive-backed server whose RDMA serves: Allocate, Commit
//! and Abort of staged puts, Lookup and Release of staged gets (`crate::staging` has the
//! design). Runs on a blocking thread, as every drive-backed request does: Commit writes the
//! drives and Lookup reads them.

use std::time::Instant;

use memkv_proto::messages::{
    AllocateRequest, AllocateResponse, CommitRequest, LookupRequest, LookupResponse, ReleaseRequest,
};
use memkv_proto::{Header, Opcode, Status};
use memkv_store::StoreError;

use super::dispatch::{bad, fail, lease, ok};
use super::writer::{Body, Outgoing};
use crate::staging::{StagedPut, Staging, StagingFull};
use crate::state::Shared;

/// How often a Lookup stages a value that a put replaced by a longer one meanwhile.
const LOOKUP_ATTEMPTS: usize = 3;

/// The answer to `h` when this server stages RDMA values and the request is one of the
/// staged ones; `None` sends it down the ordinary path (no staging here, or an id that was
/// not staged, whose refusal that path words).
pub(super) fn execute(shared: &Shared, h: &Header, key: &[u8], payload: &[u8]) -> Option<Outgoing> {
    let staging = shared.staging()?;
    match h.opcode {
        Opcode::Allocate => Some(allocate(shared, staging, h, key, payload)),
        Opcode::Commit => commit(shared, staging, h, payload),
        Opcode::Abort => {
            // Gives the range back; the ordinary path then aborts the reservation by id.
            let id = memkv_proto::messages::AbortRequest::decode(payload).ok()?;
            drop(staging.take_put(id.reservation));
            None
        }
        Opcode::Lookup => Some(lookup(shared, staging, h, key, payload)),
        Opcode::Release => {
            let r = ReleaseRequest::decode(payload).ok()?;
            staging.release_get(r.pin).then(|| ok(h, Body::Empty))
        }
        _ => None,
    }
}

fn busy(h: &Header, full: &StagingFull) -> Outgoing {
    tracing::debug!(op = h.opcode.name(), "{full}");
    Outgoing::error(h, Status::Busy, &full.to_string())
}

fn allocate(
    shared: &Shared,
    staging: &Staging,
    h: &Header,
    key: &[u8],
    payload: &[u8],
) -> Outgoing {
    let req = match AllocateRequest::decode(payload) {
        Ok(r) => r,
        Err(e) => return bad(h, &e),
    };
    let default = shared.config.storage.reservation_lease;
    let granted = lease(req.lease_ms, default).min(default);
    // The store first: its refusals (too large, full) are the ones that concern the value.
    let reservation = match shared.store.allocate(key, req.len) {
        Ok(r) => r,
        Err(e) => return fail(h, &e),
    };
    let range = match staging.stage(req.len) {
        Ok(range) => range,
        Err(full) => {
            let id = reservation.id();
            drop(reservation);
            let _ = shared.store.abort(id);
            return busy(h, &full);
        }
    };
    let body = AllocateResponse {
        reservation: reservation.id(),
        addr: range.remote_addr(),
        rkey: range.rkey(),
        lease_ms: granted.as_millis() as u32,
    };
    // The store's reservation lease runs from its allocation, as this one does.
    staging.hold_put(StagedPut { reservation, range }, Instant::now() + default);
    ok(h, Body::Owned(body.encode()))
}

/// Writes the staged bytes to the drives and commits them against the client's checksum.
fn commit(shared: &Shared, staging: &Staging, h: &Header, payload: &[u8]) -> Option<Outgoing> {
    let req = CommitRequest::decode(payload).ok()?;
    let StagedPut {
        mut reservation,
        range,
    } = staging.take_put(req.reservation)?;
    let len = range.len() as u64;
    let written = write_staged(&mut reservation, &range);
    drop(range);
    let committed = match written {
        Ok(()) => shared.store.commit(reservation, req.checksum),
        Err(e) => {
            let id = reservation.id();
            drop(reservation);
            let _ = shared.store.abort(id);
            Err(e)
        }
    };
    Some(match committed {
        Ok(()) => Outgoing {
            moved_value_bytes: len,
            ..ok(h, Body::Empty)
        },
        Err(e) => fail(h, &e),
    })
}

/// How much of a staged value is copied out of the region at a time: small enough to stay in
/// cache between the copy and the drive write.
const COPY_PIECE: usize = 1 << 20;

/// Writes the staged bytes into the reservation. Peers may write the region at any time, so
/// the bytes are copied out piece by piece (never borrowed); the store hashes them as it
/// writes them, in order, so the commit's check covers exactly what reached the drives and
/// reads nothing back.
fn write_staged(
    reservation: &mut memkv_store::Reservation,
    range: &memkv_rdma::StagedRange,
) -> Result<(), StoreError> {
    let mut piece = vec![0u8; COPY_PIECE.min(range.len())];
    let mut at = 0;
    // At least one write, as before, so an empty value is committed the same way.
    loop {
        let n = piece.len().min(range.len() - at);
        range.copy_out(at, &mut piece[..n]);
        reservation.write_at(at as u64, &piece[..n])?;
        at += n;
        if at >= range.len() {
            return Ok(());
        }
    }
}

/// Reads the value from the drives into staging (verified as every read is) and pins it there
/// for the client's RDMA READ.
fn lookup(shared: &Shared, staging: &Staging, h: &Header, key: &[u8], payload: &[u8]) -> Outgoing {
    let req = match LookupRequest::decode(payload) {
        Ok(r) => r,
        Err(e) => return bad(h, &e),
    };
    let pin_lease = shared.config.storage.pin_lease;
    let granted = lease(req.lease_ms, pin_lease).min(pin_lease);
    for _ in 0..LOOKUP_ATTEMPTS {
        let len = match shared.store.value_len(key) {
            Ok(Some(len)) => len,
            Ok(None) => return Outgoing::error(h, Status::NotFound, "no such key"),
            Err(e) => return fail(h, &e),
        };
        let mut range = match staging.stage(len) {
            Ok(range) => range,
            Err(full) => return busy(h, &full),
        };
        // Read (and verified) in owned memory, then copied in: peers may write the region at
        // any time, so no reference into it is handed to the store.
        let mut value = vec![0u8; range.len()];
        let (len, checksum) = match shared.store.read_into_slice(key, &mut value) {
            Ok(Some(read)) => {
                range.copy_in(0, &value[..read.0]);
                read
            }
            // Deleted meanwhile, or unreadable (a failed checksum or drive): a miss.
            Ok(None) => return Outgoing::error(h, Status::NotFound, "no such key"),
            // Replaced by a longer value since its length was read: stage that one.
            Err(StoreError::TooLarge { .. }) => continue,
            Err(e) => return fail(h, &e),
        };
        let (addr, rkey) = (range.remote_addr(), range.rkey());
        let pin = staging.hold_get(range, Instant::now() + granted);
        let body = LookupResponse {
            pin,
            addr,
            rkey,
            lease_ms: granted.as_millis() as u32,
            len: len as u64,
            checksum,
        };
        return Outgoing {
            moved_value_bytes: len as u64,
            ..ok(h, Body::Owned(body.encode()))
        };
    }
    Outgoing::error(
        h,
        Status::Busy,
        &format!("the value changed {LOOKUP_ATTEMPTS} times while it was being staged; retry"),
    )
}
