//! The connection's writer task: seals responses in order of completion and writes them with
//! vectored I/O, so values go from storage to the socket without being copied into a frame.

use std::io::IoSlice;

use memkv_proto::{Header, Sealer, Status, frame::error_message};
use memkv_store::ValueRef;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

/// A response body.
pub enum Body {
    Empty,
    Owned(Vec<u8>),
    /// A stored value, written from where it lives; its checksum is the stored one.
    Value(ValueRef),
    /// A BatchGet response: the encoded prefix, then per item its 14-byte header and value.
    BatchGet {
        count: [u8; 4],
        items: Vec<(
            [u8; memkv_proto::batch::GET_ITEM_HEADER_LEN],
            Option<ValueRef>,
        )>,
    },
}

/// One response waiting to be written.
pub struct Outgoing {
    pub header: Header,
    pub body: Body,
    /// Held until the response is on the wire: the connection's in-flight byte budget.
    pub _permit: Option<OwnedSemaphorePermit>,
    /// Value bytes this operation moved one-sided: a Commit's value (written by the client's
    /// RDMA WRITE) or a Lookup's (pinned for its RDMA READ). Zero for everything else.
    pub rdma_value_bytes: u64,
}

impl Outgoing {
    pub fn new(request: &Header, status: Status, body: Body) -> Outgoing {
        Outgoing {
            header: Header::response(request, status),
            body,
            _permit: None,
            rdma_value_bytes: 0,
        }
    }

    pub fn error(request: &Header, status: Status, message: &str) -> Outgoing {
        Outgoing::new(
            request,
            status,
            Body::Owned(error_message(message).to_vec()),
        )
    }

    pub fn payload_len(&self) -> u64 {
        body_parts(&self.body).iter().map(|p| p.len() as u64).sum()
    }
}

fn body_parts(body: &Body) -> Vec<&[u8]> {
    match body {
        Body::Empty => Vec::new(),
        Body::Owned(v) => vec![v],
        Body::Value(v) => vec![v],
        Body::BatchGet { count, items } => {
            let mut parts = Vec::with_capacity(1 + 2 * items.len());
            parts.push(&count[..]);
            for (head, value) in items {
                parts.push(&head[..]);
                if let Some(v) = value {
                    parts.push(v);
                }
            }
            parts
        }
    }
}

/// Responses batched into one vectored write when they are small.
const COALESCE_BYTES: u64 = 256 << 10;
const COALESCE_FRAMES: usize = 64;

/// Writes responses until every sender is gone or the socket fails.
pub async fn run(mut sealer: Sealer, mut socket: OwnedWriteHalf, mut rx: mpsc::Receiver<Outgoing>) {
    let mut batch: Vec<Outgoing> = Vec::with_capacity(COALESCE_FRAMES);
    while let Some(first) = rx.recv().await {
        let mut bytes = first.payload_len();
        batch.push(first);
        while bytes < COALESCE_BYTES && batch.len() < COALESCE_FRAMES {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.payload_len();
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        if write_batch(&mut sealer, &mut socket, &mut batch)
            .await
            .is_err()
        {
            return;
        }
        batch.clear();
    }
    let _ = socket.shutdown().await;
}

async fn write_batch(
    sealer: &mut Sealer,
    socket: &mut OwnedWriteHalf,
    batch: &mut [Outgoing],
) -> std::io::Result<()> {
    let mut heads = Vec::with_capacity(batch.len());
    for out in batch.iter_mut() {
        let parts = body_parts(&out.body);
        let head = match &out.body {
            Body::Value(v) => {
                let sum = v.checksum();
                sealer.seal_with_checksum(&mut out.header, &[], &parts, sum)
            }
            _ => sealer.seal(&mut out.header, &[], &parts),
        };
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
