//! How a batch is cut into frames: items grouped by owning server, in the caller's order, each
//! group cut within the batch limits. Shared by the TCP and the RDMA batch paths; pure
//! bookkeeping, no I/O.

use crate::Client;

/// Payload bytes a TCP batch frame aims at. The protocol allows frames up to
/// `max_frame_payload` (256 MiB), but one such frame occupies one connection and one server
/// task from first byte to last; frames of a few MiB spread a batch of large values over the
/// pool's connections and overlap sending, storing and answering. An item larger than this
/// still travels, alone in its frame.
pub(crate) const TCP_CHUNK_TARGET: usize = 8 << 20;

/// Values of at least this size travel as single pipelined TcpPut / TcpGet requests instead of
/// inside batch frames, all at once over the pool's connections: a server sends a single get
/// straight from its arena and hashes a single put as it lands, while a batch frame is
/// assembled, MACed and taken apart whole (measured on loopback, 4 MiB values with four
/// callers: 4.2 GiB/s as singles, 1.1 GiB/s in batches of eight). Smaller values keep the
/// batch frames, where the per-request cost dominates.
pub(crate) const SINGLE_VALUE_MIN: usize = 64 << 10;

/// Bytes of a batch payload before its items (the item count).
pub(crate) const BATCH_PREFIX: usize = 4;
/// Bytes of a BatchPut item before its key and value.
pub(crate) const PUT_ITEM_HEADER: usize = memkv_proto::batch::PUT_ITEM_HEADER_LEN;
/// Bytes of a BatchGet answer item besides its value (status, length, checksum), rounded up.
pub(crate) const GET_ITEM_ANSWER_HEADER: usize = 16;
/// Bytes of a key-list item before its key.
pub(crate) const KEY_ITEM_HEADER: usize = 2;

/// One batch frame: the server and the caller's item indices it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub server: usize,
    pub items: Vec<usize>,
}

/// An item that passed local checks: its index, owner and encoded size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    pub index: usize,
    pub server: usize,
    pub size: usize,
}

/// Groups items by server (keeping the caller's order within each) and cuts each group into
/// chunks of at most `max_items` items and `max_bytes` payload bytes.
pub(crate) fn plan_chunks(
    items: &[Planned],
    servers: usize,
    max_items: usize,
    max_bytes: usize,
) -> Vec<Chunk> {
    let mut open: Vec<Option<(Chunk, usize)>> = vec![None; servers];
    let mut done = Vec::new();
    for item in items {
        let slot = &mut open[item.server];
        if let Some((chunk, bytes)) = slot
            && (chunk.items.len() >= max_items || *bytes + item.size > max_bytes)
        {
            done.push(std::mem::replace(
                chunk,
                Chunk {
                    server: item.server,
                    items: Vec::new(),
                },
            ));
            *bytes = BATCH_PREFIX;
        }
        let (chunk, bytes) = slot.get_or_insert_with(|| {
            (
                Chunk {
                    server: item.server,
                    items: Vec::new(),
                },
                BATCH_PREFIX,
            )
        });
        chunk.items.push(item.index);
        *bytes += item.size;
    }
    done.extend(open.into_iter().flatten().map(|(c, _)| c));
    done
}

impl Client {
    /// Chunks within the protocol's limits (RDMA batches: values do not travel in frames).
    pub(crate) fn chunks(&self, planned: &[Planned]) -> Vec<Chunk> {
        self.chunks_of(planned, usize::MAX)
    }

    /// Chunks for TCP frames: also at most about [`TCP_CHUNK_TARGET`] bytes each.
    pub(crate) fn tcp_chunks(&self, planned: &[Planned]) -> Vec<Chunk> {
        self.chunks_of(planned, TCP_CHUNK_TARGET)
    }

    fn chunks_of(&self, planned: &[Planned], target: usize) -> Vec<Chunk> {
        let limits = &self.inner.limits;
        let frame = usize::try_from(limits.max_frame_payload).unwrap_or(usize::MAX);
        plan_chunks(
            planned,
            self.inner.pools.len(),
            limits.max_batch_items,
            frame.min(target),
        )
    }
}

#[cfg(test)]
mod tests;
