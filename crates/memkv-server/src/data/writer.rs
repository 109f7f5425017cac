//! The connection's writer task: seals responses in order of completion and writes them with
//! vectored I/O, so values go from storage to the socket without being copied into a frame.

use std::collections::HashSet;
use std::io::IoSlice;
use std::sync::{Arc, Mutex};

use memkv_proto::coverage::{self, Coverage};
use memkv_proto::{HEADER_LEN, Header, Opcode, Sealer, Status, frame::error_message};
use memkv_store::ValueParts;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

/// A response body.
pub enum Body {
    Empty,
    Owned(Vec<u8>),
    /// A stored value, written from where it lives (the arena, or the drive buffers it was read
    /// into); its checksum is the stored one.
    Value(ValueParts),
    /// A BatchGet response: the encoded prefix, then per item its 14-byte header and value.
    BatchGet {
        count: [u8; 4],
        items: Vec<(
            [u8; memkv_proto::batch::GET_ITEM_HEADER_LEN],
            Option<ValueParts>,
        )>,
    },
}

/// One response waiting to be written.
pub struct Outgoing {
    pub header: Header,
    pub body: Body,
    /// Held until the response is on the wire: the connection's in-flight byte budget.
    pub _permit: Option<OwnedSemaphorePermit>,
    /// A fatal refusal: the raw header of the frame it refuses (whose opcode byte and request
    /// id it echoes). The writer writes it as the connection's last frame and closes.
    pub refuses: Option<[u8; HEADER_LEN]>,
    /// Value bytes this operation moved where its frames do not say: a Commit's value (written
    /// by the client's RDMA WRITE) or a Lookup's (pinned for its RDMA READ), and the values of a
    /// batch put's items that were stored. Zero for everything else.
    pub moved_value_bytes: u64,
}

impl Outgoing {
    pub fn new(request: &Header, status: Status, body: Body) -> Outgoing {
        Outgoing {
            header: Header::response(request, status),
            body,
            _permit: None,
            refuses: None,
            moved_value_bytes: 0,
        }
    }

    /// The fatal refusal of the frame whose header arrived as `raw` (it may not decode).
    pub fn refusal(raw: &[u8; HEADER_LEN], status: Status, message: &str) -> Outgoing {
        let request_id = u64::from_le_bytes(raw[8..16].try_into().expect("8 bytes"));
        let placeholder = Header::request(
            Opcode::from_code(raw[5]).unwrap_or(Opcode::Ping),
            request_id,
        );
        Outgoing {
            refuses: Some(*raw),
            ..Outgoing::error(&placeholder, status, message)
        }
    }

    pub fn error(request: &Header, status: Status, message: &str) -> Outgoing {
        Outgoing::new(
            request,
            status,
            Body::Owned(error_message(message).to_vec()),
        )
    }

    /// This answer, holding its request's share of the connection's in-flight budget until
    /// it is on the wire.
    pub fn holding(self, permit: OwnedSemaphorePermit) -> Outgoing {
        Outgoing {
            _permit: Some(permit),
            ..self
        }
    }

    /// Bytes of stored values the answer refers to (and keeps in place until written).
    pub fn stored_value_bytes(&self) -> u64 {
        match &self.body {
            Body::Value(parts) => parts.len(),
            Body::BatchGet { items, .. } => items
                .iter()
                .filter_map(|(_, parts)| parts.as_ref().map(ValueParts::len))
                .sum(),
            _ => 0,
        }
    }

    pub fn payload_len(&self) -> u64 {
        body_parts(&self.body).iter().map(|p| p.len() as u64).sum()
    }
}

fn body_parts(body: &Body) -> Vec<&[u8]> {
    match body {
        Body::Empty => Vec::new(),
        Body::Owned(v) => vec![v],
        Body::Value(v) => v.parts().collect(),
        Body::BatchGet { count, items } => {
            let mut parts = Vec::with_capacity(1 + 2 * items.len());
            parts.push(&count[..]);
            for (head, value) in items {
                parts.push(&head[..]);
                if let Some(v) = value {
                    parts.extend(v.parts());
                }
            }
            parts
        }
    }
}

/// Responses batched into one vectored write when they are small.
const COALESCE_BYTES: u64 = 256 << 10;
const COALESCE_FRAMES: usize = 64;

/// The request ids a connection has read and not yet answered. The reader refuses a request
/// whose id is in the set; the writer takes an id out as it seals the answer, before the
/// answer can reach the client, so a client that reuses an id once answered is never refused.
#[derive(Default)]
pub struct Outstanding(Mutex<HashSet<u64>>);

impl Outstanding {
    /// Adds `id`; false when it is already outstanding.
    pub fn insert(&self, id: u64) -> bool {
        self.lock().insert(id)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        // Single inserts and removes leave the set consistent even after a panic.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes responses until every sender is gone, the socket fails, or a fatal refusal has been
/// written (nothing is written after it).
pub async fn run(
    mut sealer: Sealer,
    mut socket: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Outgoing>,
    outstanding: Arc<Outstanding>,
) {
    let mut batch: Vec<Outgoing> = Vec::with_capacity(COALESCE_FRAMES);
    while let Some(first) = rx.recv().await {
        let mut bytes = first.payload_len();
        let mut last = first.refuses.is_some();
        batch.push(first);
        while !last && bytes < COALESCE_BYTES && batch.len() < COALESCE_FRAMES {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.payload_len();
                    last = next.refuses.is_some();
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        if write_batch(&mut sealer, &mut socket, &mut batch, &outstanding)
            .await
            .is_err()
            || last
        {
            break;
        }
        batch.clear();
    }
    let _ = socket.shutdown().await;
}

async fn write_batch(
    sealer: &mut Sealer,
    socket: &mut OwnedWriteHalf,
    batch: &mut [Outgoing],
    outstanding: &Outstanding,
) -> std::io::Result<()> {
    let mut heads = Vec::with_capacity(batch.len());
    for out in batch.iter_mut() {
        let parts = body_parts(&out.body);
        let head = match (&out.refuses, &out.body) {
            (Some(raw), Body::Owned(message)) => {
                sealer.seal_refusal(raw, out.header.status, message)
            }
            (_, Body::Value(v)) => {
                let sum = v.checksum();
                sealer.seal_with_checksum(&mut out.header, &[], &parts, sum)
            }
            // The values are not hashed again: each item carries its stored checksum.
            (_, Body::BatchGet { count, items })
                if Coverage::of(sealer.version(), out.header.opcode, true)
                    == Coverage::GetResponseItems =>
            {
                let sum = coverage::get_response_checksum(count, items.iter().map(|(h, _)| h));
                sealer.seal_with_checksum(&mut out.header, &[], &parts, sum)
            }
            _ => sealer.seal(&mut out.header, &[], &parts),
        };
        if out.refuses.is_none() {
            outstanding.remove(out.header.request_id);
        }
        heads.push(head);
    }
    let mut slices: Vec<IoSlice<'_>> = Vec::new();
    for (head, out) in heads.iter().zip(batch.iter()) {
        slices.push(IoSlice::new(head));
        slices.extend(
            body_parts(&out.body)
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(IoSlice::new),
        );
    }
    write_all_vectored(socket, &mut slices).await
}

/// Writes every slice, resuming after partial writes.
pub async fn write_all_vectored<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    // The kernel takes at most IOV_MAX (1024) slices per call.
    while !slices.is_empty() {
        let window = slices.len().min(1024);
        let n = w.write_vectored(&slices[..window]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}
