//! Executes one verified request against the store. Synchronous: in memory mode it runs on
//! the connection's task; in file mode on a blocking thread.

use memkv_proto::batch::{self, GET_ITEM_HEADER_LEN};
use memkv_proto::messages::{
    AbortRequest, AllocateRequest, AllocateResponse, CommitRequest, LookupRequest, LookupResponse,
    ReleaseRequest, SharedCommitRequest, StatsResponse,
};
use memkv_proto::{Header, Opcode, ProtoError, Status};
use memkv_store::StoreError;
use std::time::Duration;

use super::writer::{Body, Outgoing};
use crate::config::StorageMode;
use crate::state::Shared;

/// Keys are 1 to 1024 bytes; an empty one is refused (its item, in a batch).
const EMPTY_KEY: &str = "key must not be empty";

/// The wire status and message for a store error.
pub fn store_status(e: &StoreError) -> Status {
    match e {
        StoreError::NotFound | StoreError::UnknownReservation(_) | StoreError::UnknownDrive(_) => {
            Status::NotFound
        }
        StoreError::Full(_) => Status::Full,
        StoreError::TooLarge { .. } => Status::TooLarge,
        StoreError::BadRequest(_) => Status::BadRequest,
        StoreError::ChecksumMismatch { .. } => Status::ChecksumMismatch,
        StoreError::LeaseExpired(_) => Status::LeaseExpired,
        StoreError::UnsupportedVersion { .. } | StoreError::Corrupt(_) | StoreError::Io(_) => {
            Status::Internal
        }
    }
}

pub(super) fn fail(h: &Header, e: &StoreError) -> Outgoing {
    if matches!(e, StoreError::Io(_) | StoreError::Corrupt(_)) {
        tracing::warn!(op = h.opcode.name(), error = %e, "storage error");
    }
    if let StoreError::ChecksumMismatch { expected, actual } = e {
        // Kept out of the answer (see StoreError::ChecksumMismatch); here for whoever debugs.
        tracing::debug!(
            op = h.opcode.name(),
            expected = format_args!("{expected:#018x}"),
            actual = format_args!("{actual:#018x}"),
            "checksum mismatch"
        );
    }
    Outgoing::error(h, store_status(e), &e.to_string())
}

pub(super) fn bad(h: &Header, e: &ProtoError) -> Outgoing {
    Outgoing::error(h, e.status(), &e.to_string())
}

pub(super) fn ok(h: &Header, body: Body) -> Outgoing {
    Outgoing::new(h, Status::Ok, body)
}

pub(super) fn lease(ms: u32, default: Duration) -> Duration {
    if ms == 0 {
        default
    } else {
        Duration::from_millis(u64::from(ms))
    }
}

/// Bytes of values a request's answer holds in the server's memory until it is sent: the
/// values a drive-backed server reads off its drives for a get (memory-mode answers point
/// into the arena and hold nothing). Estimated from the index before the read.
pub fn answer_bytes(shared: &Shared, h: &Header, key: &[u8], payload: &[u8]) -> u64 {
    if shared.config.storage.mode == StorageMode::Memory {
        return 0;
    }
    let len = |key: &[u8]| shared.store.value_len(key).ok().flatten().unwrap_or(0);
    match h.opcode {
        Opcode::TcpGet => len(key),
        Opcode::BatchGet => match batch::decode_keys(payload, &shared.limits) {
            Ok(keys) => keys
                .iter()
                .map(|k| len(k))
                .sum::<u64>()
                .min(shared.limits.max_frame_payload),
            Err(_) => 0,
        },
        _ => 0,
    }
}

/// Stores one value, verifying `checksum` as the store commits it.
pub fn put_verified(
    shared: &Shared,
    key: &[u8],
    value: &[u8],
    checksum: u64,
) -> Result<(), StoreError> {
    shared.store.put_checked(key, value, checksum)
}

/// Runs a request whose frame has been verified (including its payload checksum, except for
/// puts, whose checksum the store verifies).
pub fn execute(shared: &Shared, h: &Header, key: &[u8], payload: Vec<u8>) -> Outgoing {
    let store = &shared.store;
    if h.opcode.takes_key() && key.is_empty() {
        return Outgoing::error(h, Status::BadRequest, EMPTY_KEY);
    }
    if let Some(staged) = super::staged::execute(shared, h, key, &payload) {
        return staged;
    }
    match h.opcode {
        Opcode::Ping => ok(h, Body::Owned(payload)),
        Opcode::Stats => {
            let s = store.stats();
            let body = StatsResponse {
                raw_bytes: s.raw_bytes,
                usable_bytes: s.usable_bytes,
                used_bytes: s.used_bytes,
                blocks: s.blocks,
                evictions: s.evictions,
                checksum_failures: s.checksum_failures,
            };
            ok(h, Body::Owned(body.encode()))
        }
        Opcode::Exists => {
            if store.exists(key) {
                ok(h, Body::Empty)
            } else {
                Outgoing::error(h, Status::NotFound, "no such key")
            }
        }
        Opcode::Delete | Opcode::TcpDelete => match store.delete(key) {
            Ok(true) => ok(h, Body::Empty),
            Ok(false) => Outgoing::error(h, Status::NotFound, "no such key"),
            Err(e) => fail(h, &e),
        },
        Opcode::TcpGet => match store.get_parts(key) {
            Ok(Some(v)) => ok(h, Body::Value(v)),
            Ok(None) => Outgoing::error(h, Status::NotFound, "no such key"),
            Err(e) => fail(h, &e),
        },
        Opcode::TcpPut => match put_verified(shared, key, &payload, h.checksum) {
            Ok(()) => ok(h, Body::Empty),
            Err(e) => fail(h, &e),
        },
        Opcode::Allocate => allocate(shared, h, key, &payload),
        Opcode::Commit => commit(shared, h, &payload),
        Opcode::Abort => match AbortRequest::decode(&payload) {
            Ok(r) => match store.abort(r.reservation) {
                Ok(()) => ok(h, Body::Empty),
                Err(e) => fail(h, &e),
            },
            Err(e) => bad(h, &e),
        },
        Opcode::Lookup => lookup(shared, h, key, &payload),
        Opcode::Release => match ReleaseRequest::decode(&payload) {
            Ok(r) if store.release(r.pin) => ok(h, Body::Empty),
            Ok(r) => Outgoing::error(
                h,
                Status::NotFound,
                &format!("no pin {} (released or expired)", r.pin),
            ),
            Err(e) => bad(h, &e),
        },
        Opcode::LocalAttach => Outgoing::error(
            h,
            Status::Internal,
            "LocalAttach dispatched without its connection",
        ),
        // Connect needs the connection (its queue pairs live there): see conn.rs.
        Opcode::Connect => Outgoing::error(
            h,
            Status::Internal,
            "Connect dispatched without its connection",
        ),
        Opcode::BatchPut => batch_put(shared, h, &payload),
        Opcode::BatchGet => batch_get(shared, h, &payload),
        Opcode::BatchDelete | Opcode::BatchExists => batch_keys(shared, h, &payload),
        Opcode::Hello | Opcode::Challenge | Opcode::Proof | Opcode::Ready => Outgoing::error(
            h,
            Status::BadRequest,
            "handshake frame on an established session",
        ),
    }
}

fn allocate(shared: &Shared, h: &Header, key: &[u8], payload: &[u8]) -> Outgoing {
    let req = match AllocateRequest::decode(payload) {
        Ok(r) => r,
        Err(e) => return bad(h, &e),
    };
    let default = shared.config.storage.reservation_lease;
    let granted = lease(req.lease_ms, default).min(default);
    match shared.store.allocate(key, req.len) {
        Ok(reservation) => {
            let (addr, rkey) = remote(shared, reservation.arena_offset());
            let body = AllocateResponse {
                reservation: reservation.id(),
                addr,
                rkey,
                lease_ms: granted.as_millis() as u32,
            };
            // Dropping the handle parks the reservation for Commit/Abort by id.
            drop(reservation);
            ok(h, Body::Owned(body.encode()))
        }
        Err(e) => fail(h, &e),
    }
}

/// Commit, in either form (told apart by length): a [`CommitRequest`] has its reservation
/// hashed and checked; a [`SharedCommitRequest`] from a same-host client that mapped this
/// server's arena has its checksum taken (the client hashed the bytes as it copied them).
fn commit(shared: &Shared, h: &Header, payload: &[u8]) -> Outgoing {
    let store = &shared.store;
    let (len, result) = if payload.len() == SharedCommitRequest::LEN {
        let r = match SharedCommitRequest::decode(payload) {
            Ok(r) => r,
            Err(e) => return bad(h, &e),
        };
        let ours = shared.local.as_ref().map(|l| l.arena_id);
        if ours != Some(r.arena_id) {
            // The bytes went to a mapping of some other arena: this one never saw them.
            let _ = store.abort(r.reservation);
            let why = match ours {
                Some(id) => format!(
                    "Commit through a mapping of arena {:#018x}, but this server's arena is {id:#018x} (a stale mapping: attach again)",
                    r.arena_id
                ),
                None => "shared-memory Commit, but this server does not share its arena".into(),
            };
            return Outgoing::error(h, Status::BadRequest, &why);
        }
        let len = store.parked_len(r.reservation).unwrap_or(0);
        (len, store.commit_id_copied(r.reservation, r.checksum))
    } else {
        let r = match CommitRequest::decode(payload) {
            Ok(r) => r,
            Err(e) => return bad(h, &e),
        };
        let len = store.parked_len(r.reservation).unwrap_or(0);
        (len, store.commit_id(r.reservation, r.checksum))
    };
    match result {
        Ok(()) => Outgoing {
            moved_value_bytes: len,
            ..ok(h, Body::Empty)
        },
        Err(e) => fail(h, &e),
    }
}

/// Where a client reaches arena bytes one-sided: the registered address and rkey; with no
/// RDMA, the address in the shared arena (rkey 0) for same-host clients; else zeros.
fn remote(shared: &Shared, arena_offset: Option<u64>) -> (u64, u32) {
    match (&shared.rdma.serving, &shared.local, arena_offset) {
        (Some(s), _, Some(offset)) => match &s.arena {
            Some(arena) => (arena.addr() + offset, arena.rkey()),
            None => (0, 0),
        },
        (None, Some(local), Some(offset)) => (local.arena_addr() + offset, 0),
        _ => (0, 0),
    }
}

fn lookup(shared: &Shared, h: &Header, key: &[u8], payload: &[u8]) -> Outgoing {
    let req = match LookupRequest::decode(payload) {
        Ok(r) => r,
        Err(e) => return bad(h, &e),
    };
    let granted = lease(req.lease_ms, shared.config.storage.pin_lease);
    match shared.store.lookup(key, granted) {
        Ok(Some(p)) => {
            let (addr, rkey) = remote(shared, Some(p.arena_offset));
            let out = ok(
                h,
                Body::Owned(
                    LookupResponse {
                        pin: p.pin_id,
                        addr,
                        rkey,
                        lease_ms: granted.min(shared.config.storage.pin_lease).as_millis() as u32,
                        len: p.len,
                        checksum: p.checksum,
                    }
                    .encode(),
                ),
            );
            Outgoing {
                moved_value_bytes: p.len,
                ..out
            }
        }
        Ok(None) => Outgoing::error(h, Status::NotFound, "no such key"),
        Err(e) => fail(h, &e),
    }
}

fn batch_put(shared: &Shared, h: &Header, payload: &[u8]) -> Outgoing {
    let items = match batch::decode_put_request(payload, &shared.limits) {
        Ok(items) => items,
        Err(e) => return bad(h, &e),
    };
    let items: Vec<_> = items.iter().map(|i| (i.key, i.value, i.checksum)).collect();
    let results = shared.store.put_batch_checked(&items);
    let stored = items
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|((_, value, _), _)| value.len() as u64)
        .sum();
    let statuses: Vec<Status> = results
        .iter()
        .map(|r| match r {
            Ok(()) => Status::Ok,
            Err(e) => store_status(e),
        })
        .collect();
    Outgoing {
        moved_value_bytes: stored,
        ..ok(h, Body::Owned(batch::encode_statuses(&statuses)))
    }
}

fn batch_get(shared: &Shared, h: &Header, payload: &[u8]) -> Outgoing {
    let keys = match batch::decode_keys(payload, &shared.limits) {
        Ok(keys) => keys,
        Err(e) => return bad(h, &e),
    };
    // Every item's header is sent; the values share what is left of the frame.
    let headers = 4 + keys.len() as u64 * GET_ITEM_HEADER_LEN as u64;
    let room = shared.limits.max_frame_payload.saturating_sub(headers);
    let found = shared.store.get_parts_batch(&keys, room);
    let items = keys
        .iter()
        .zip(found)
        .map(|(k, found)| {
            let found = if k.is_empty() {
                Err(StoreError::BadRequest(EMPTY_KEY.into()))
            } else {
                found
            };
            // A value with no room left in the frame comes back `TooLarge`, unread.
            let (status, value) = match found {
                Ok(Some(v)) => (Status::Ok, Some(v)),
                Ok(None) => (Status::NotFound, None),
                Err(e) => (store_status(&e), None),
            };
            let len = value.as_ref().map_or(0, |v| v.len());
            let sum = value.as_ref().map_or(0, |v| v.checksum());
            (batch::get_item_header(status, len as u32, sum), value)
        })
        .collect();
    ok(
        h,
        Body::BatchGet {
            count: (keys.len() as u32).to_le_bytes(),
            items,
        },
    )
}

fn batch_keys(shared: &Shared, h: &Header, payload: &[u8]) -> Outgoing {
    let keys = match batch::decode_keys(payload, &shared.limits) {
        Ok(keys) => keys,
        Err(e) => return bad(h, &e),
    };
    // Exists looks the whole batch up at once (one lock per index shard, not per key).
    let present = (h.opcode == Opcode::BatchExists).then(|| shared.store.exists_batch(&keys));
    let statuses: Vec<Status> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let found = if k.is_empty() {
                Err(StoreError::BadRequest(EMPTY_KEY.into()))
            } else if let Some(present) = &present {
                Ok(present[i])
            } else {
                shared.store.delete(k)
            };
            match found {
                Ok(true) => Status::Ok,
                Ok(false) => Status::NotFound,
                Err(e) => store_status(&e),
            }
        })
        .collect();
    ok(h, Body::Owned(batch::encode_statuses(&statuses)))
}
