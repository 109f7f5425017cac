//! LocalAttach (0x08) on an authenticated connection: a token and where to trade it.

use std::time::Instant;

use memkv_proto::local::LocalAttachResponse;
use memkv_proto::{Header, Status};

use crate::clients::ClientEntry;
use crate::data::writer::{Body, Outgoing};
use crate::metrics::Transport;
use crate::state::Shared;

pub(crate) fn answer(shared: &Shared, entry: &ClientEntry, h: &Header) -> Outgoing {
    let Some(local) = &shared.local else {
        let why = if shared.config.storage.mode != crate::config::StorageMode::Memory {
            "the same-host transport serves memory mode only"
        } else {
            "network.shared_memory is off"
        };
        return Outgoing::error(h, Status::Unsupported, why);
    };
    match local.tokens.mint(Instant::now()) {
        Ok(token) => {
            shared.clients.connected_one_sided(entry, Transport::Shm);
            let body = LocalAttachResponse {
                token,
                arena_addr: local.arena_addr(),
                arena_len: local.arena.len() as u64,
                arena_id: local.arena_id,
                socket_name: local.socket_name.clone(),
            };
            Outgoing::new(h, Status::Ok, Body::Owned(body.encode()))
        }
        Err(why) => Outgoing::error(h, Status::Busy, &why),
    }
}
