//! Memory the caller registered (`Client.register`): with RDMA, each region is registered with
//! the NIC once, and batches whose buffers all lie inside one region move with no copy
//! (`put_batch_in` / `get_batch_in` on it); everything else takes the client's ordinary path
//! (staging buffers, or TCP). A region is only a registration: the bytes a batch moves are its
//! buffers' own, so batches on one region run side by side, as on the ordinary path.

use std::sync::{Arc, Mutex};

use memkv_client::{Client as RustClient, RdmaBuffer, Result as ClientResult};

use crate::buffer::{ByteBuffer, Released};

/// One registered region.
enum Region {
    /// Registered with the NIC.
    Rdma {
        base: usize,
        len: usize,
        buf: Arc<RdmaBuffer>,
    },
    /// TCP: nothing to register; kept exported for as long as the client, as promised.
    Kept(#[allow(dead_code)] ByteBuffer),
}

/// The region holding a batch's buffers.
pub struct Routed {
    buf: Arc<RdmaBuffer>,
}

#[derive(Default)]
pub struct Regions {
    list: Mutex<Vec<Region>>,
}

impl Regions {
    pub fn register(&self, client: &RustClient, buffer: ByteBuffer) -> ClientResult<()> {
        let (base, len) = buffer.span();
        let region = if client.transport() == "rdma" && len > 0 {
            Region::Rdma {
                base,
                len,
                buf: Arc::new(client.register_memory(Box::new(buffer))?),
            }
        } else {
            Region::Kept(buffer)
        };
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(region);
        Ok(())
    }

    pub fn clear(&self) {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Drops nothing: the regions of a client made before a fork (see `Shared::close`).
    pub fn forget(&self) {
        let list = std::mem::take(&mut *self.list.lock().unwrap_or_else(|p| p.into_inner()));
        std::mem::forget(list);
    }

    /// The RDMA region holding every one of `buffers`, if there is one.
    pub fn route(&self, buffers: &[ByteBuffer]) -> Option<Routed> {
        let list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        if list.is_empty() || buffers.is_empty() {
            return None;
        }
        list.iter().find_map(|region| match region {
            Region::Rdma { base, len, buf } => {
                let inside = buffers.iter().all(|b| {
                    let (start, n) = b.span();
                    start >= *base && start + n <= base + len
                });
                inside.then(|| Routed {
                    buf: Arc::clone(buf),
                })
            }
            Region::Kept(_) => None,
        })
    }
}

/// Stores `values[i]` under `keys[i]`: straight from the registered region when they all lie in
/// one, else through the client's ordinary batch path.
pub async fn put_many(
    client: &RustClient,
    routed: Option<Routed>,
    keys: &[Vec<u8>],
    values: &[ByteBuffer],
) -> Vec<ClientResult<()>> {
    match routed {
        Some(r) => {
            let items: Vec<(&[u8], &[u8])> = keys
                .iter()
                .map(Vec::as_slice)
                .zip(values.iter().map(ByteBuffer::as_slice))
                .collect();
            client.put_batch_in(&r.buf, &items).await
        }
        None => {
            let pairs: Vec<(&[u8], &[u8])> = keys
                .iter()
                .map(Vec::as_slice)
                .zip(values.iter().map(ByteBuffer::as_slice))
                .collect();
            client.put_batch(&pairs).await
        }
    }
}

/// Reads `keys[i]`'s value into `buffers[i]`: straight into the registered region when they all
/// lie in one, else through the client's TCP path, which reads values of 64 KiB and more from
/// the socket straight into their buffers. Returns the results and the buffers, less any a
/// request whose deadline passed still held; it returns only once those are released
/// (`lent`, from [`ByteBuffer::watch`] on `buffers`), so that no read writes into memory
/// Python has got back.
pub async fn get_many_into(
    client: &RustClient,
    routed: Option<Routed>,
    keys: &[Vec<u8>],
    mut buffers: Vec<ByteBuffer>,
    lent: Released,
) -> (Vec<ClientResult<Option<usize>>>, Vec<ByteBuffer>) {
    match routed {
        Some(r) => {
            let mut items: Vec<(&[u8], &mut [u8])> = keys
                .iter()
                .map(Vec::as_slice)
                .zip(buffers.iter_mut().map(ByteBuffer::as_mut_slice))
                .collect();
            let results = client.get_batch_in(&r.buf, &mut items).await;
            drop(items);
            let results = results
                .into_iter()
                .zip(buffers.iter())
                .map(|(res, b)| {
                    // The registered-buffer API says TooLarge for a value longer than its range.
                    res.map_err(|e| match e {
                        memkv_client::Error::TooLarge { len, .. } => {
                            memkv_client::Error::BufferTooSmall {
                                len,
                                capacity: b.len() as u64,
                            }
                        }
                        other => other,
                    })
                })
                .collect();
            (results, buffers)
        }
        None => {
            let (results, returned) = client.get_batch_into_destinations(keys, buffers).await;
            let returned = returned_and_released(returned.into_iter().flatten(), lent).await;
            (results, returned)
        }
    }
}

/// [`RustClient::get_into_destination`] into a Python buffer, returning only once the buffer
/// is back or released (see [`get_many_into`]).
pub async fn get_into(
    client: &RustClient,
    key: &[u8],
    buffer: ByteBuffer,
    lent: Released,
) -> (ClientResult<Option<usize>>, Option<ByteBuffer>) {
    let (result, returned) = client.get_into_destination(key, buffer).await;
    let mut returned = returned_and_released(returned, lent).await;
    (result, returned.pop())
}

/// Waits until every watched buffer that did not come back has been released.
async fn returned_and_released(
    returned: impl IntoIterator<Item = ByteBuffer>,
    released: Released,
) -> Vec<ByteBuffer> {
    let mut returned: Vec<ByteBuffer> = returned.into_iter().collect();
    returned.iter_mut().for_each(ByteBuffer::unwatch);
    released.all().await;
    returned
}
