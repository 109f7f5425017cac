//! Connect (0x06): the RDMA bootstrap on an authenticated connection. The client's endpoint
//! comes in; this side's goes out: an RC queue pair built for the client, or the device's DC
//! target for a DC-capable client.

use std::sync::Arc;

use memkv_proto::{Header, Status};
use memkv_rdma::RcQueuePair;

use super::writer::{Body, Outgoing};
use crate::clients::ClientEntry;
use crate::metrics::Transport;
use crate::state::Shared;

/// Queue pairs one connection may hold (a client uses one per rail).
pub(super) const MAX_QUEUE_PAIRS: usize = 8;

/// RDMA bootstrap: builds a queue pair towards the client's, moves it to ready-to-send
/// and answers with this side's endpoint and the arena's address and rkey. A DC-capable
/// client of a server with a DC target gets the target's number instead (flag `dc_target`).
pub(super) async fn connect_rdma(
    shared: &Shared,
    queue_pairs: &mut Vec<Arc<RcQueuePair>>,
    entry: &ClientEntry,
    h: &Header,
    payload: &[u8],
) -> Outgoing {
    let client = entry.peer;
    let Some(serving) = &shared.rdma.serving else {
        let reason = shared
            .rdma
            .reason
            .as_deref()
            .unwrap_or("RDMA is not active");
        return Outgoing::error(
            h,
            Status::Unsupported,
            &format!("RDMA is not active on this server: {reason}"),
        );
    };
    // A client rebuilds a pair that failed; its old one here is dead weight once the
    // device has moved it to the error state, so it does not count against the limit.
    let before = queue_pairs.len();
    queue_pairs.retain(|qp| !qp.in_error_state());
    if queue_pairs.len() < before {
        tracing::debug!(
            peer = %client,
            dropped = before - queue_pairs.len(),
            "dropped queue pairs in the error state"
        );
    }
    if queue_pairs.len() >= MAX_QUEUE_PAIRS {
        return Outgoing::error(
            h,
            Status::Busy,
            &format!("a connection holds at most {MAX_QUEUE_PAIRS} queue pairs"),
        );
    }
    let peer = match memkv_proto::connect::RdmaEndpoint::decode(payload) {
        Ok(p) => p,
        Err(e) => return Outgoing::error(h, e.status(), &e.to_string()),
    };
    let arena = serving.window();
    if let Some(target) = serving.dc.as_ref().filter(|_| peer.dc_capable) {
        // DC: the client's initiators reach the arena through the device's one target, so
        // this connection gets no queue pair of its own.
        return match target.local_endpoint(Some(arena)) {
            Ok(local) => {
                let local = memkv_proto::connect::RdmaEndpoint {
                    dc_target: true,
                    ..local
                };
                tracing::debug!(peer = %client, dct = target.dct_num(), "RDMA connect: DC");
                shared.clients.connected_one_sided(entry, Transport::RdmaDc);
                Outgoing::new(h, Status::Ok, Body::Owned(local.encode()))
            }
            Err(e) => Outgoing::error(h, Status::Unsupported, &e.to_string()),
        };
    }
    let qp = match serving.device.create_rc() {
        Ok(qp) => Arc::new(qp),
        Err(e) => {
            return Outgoing::error(
                h,
                Status::Internal,
                &format!("cannot create a queue pair: {e}"),
            );
        }
    };
    let local = match qp.local_endpoint(Some(arena)) {
        Ok(l) => l,
        Err(e) => return Outgoing::error(h, Status::Unsupported, &e.to_string()),
    };
    if let Err(e) = qp.connect_async(&peer).await {
        tracing::info!(peer = %client, error = %e, "RDMA connect refused");
        return Outgoing::error(h, Status::BadRequest, &format!("RDMA connect refused: {e}"));
    }
    queue_pairs.push(qp);
    shared.clients.connected_one_sided(entry, Transport::RdmaRc);
    Outgoing::new(h, Status::Ok, Body::Owned(local.encode()))
}
