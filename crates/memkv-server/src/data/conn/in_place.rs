//! Puts whose values are read from the socket straight to where they are stored: the arena in
//! memory mode, the drives' registered buffers in direct mode. Either saves a buffer of the
//! value's size, zeroed, filled and then copied.

use std::time::Instant;

use memkv_proto::{Flags, HEADER_LEN, Header, Status};
use tokio::sync::OwnedSemaphorePermit;

use super::{Closed, Connection, read_exact_within, record};
use crate::config::StorageMode;
use crate::data::dispatch::store_status;
use crate::data::writer::{Body, Outgoing};
use crate::state::Shared;

/// A TcpPut whose header and key have been read (and its header checked), its value not yet.
#[derive(Clone, Copy)]
pub(super) struct PutFrame<'a> {
    pub raw: &'a [u8; HEADER_LEN],
    pub header: &'a Header,
    pub key: &'a [u8],
    pub started: Instant,
}

/// A put's value is read into the arena and hashed in pieces of this size (fits in L2).
const HASH_PIECE: usize = 256 << 10;
/// The scratch buffer a refused put's value is read into, piece by piece, and dropped.
const DRAIN_PIECE: usize = 64 << 10;

impl Connection {
    /// Reads a TcpPut's value straight to where it is stored when the storage mode allows,
    /// and answers it, the answer holding `permit`. `Ok(Some(permit))`: nothing of the value
    /// was read; read it the usual way.
    pub(super) async fn put_straight(
        &mut self,
        put: PutFrame<'_>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Option<OwnedSemaphorePermit>, Closed> {
        // A MAC over the payload is checked over the whole payload, held in one buffer.
        if put.header.flags.contains(Flags::PAYLOAD_MAC) {
            return Ok(Some(permit));
        }
        match self.shared.config.storage.mode {
            StorageMode::Memory => self.put_in_place(put, permit).await.map(|()| None),
            StorageMode::Direct => self.put_direct_in_place(put, permit).await,
            StorageMode::File => Ok(Some(permit)),
        }
    }

    /// Memory mode: verifies a TcpPut from its header and key, then reads its value straight
    /// into its reservation in the arena. The frame is verified before the reservation is
    /// made, since making it may evict values: a frame refused for its MAC takes nothing. A
    /// put whose value never arrives (the client left) has made its room all the same, as it
    /// would have had it completed; its reservation is given back.
    async fn put_in_place(
        &mut self,
        put: PutFrame<'_>,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), Closed> {
        let (raw, key) = (put.raw, put.key);
        let header = match self.opener.verify_before_payload(raw, key) {
            Ok(h) => h,
            Err(e) => return self.refuse(raw, e).await,
        };
        let len = header.payload_len as usize;
        let mut reservation = match self.shared.store.allocate(key, len as u64) {
            Ok(r) => r,
            Err(e) => {
                // The frame is spent (its sequence number verified): the value is read and
                // dropped, and the store's refusal answers it.
                let out = Outgoing::error(&header, store_status(&e), &e.to_string());
                return self
                    .drain_and_answer(len, out.holding(permit), &header, put.started)
                    .await;
            }
        };
        let id = reservation.id();
        let abort = |shared: &Shared| {
            let _ = shared.store.abort(id);
        };
        if reservation.as_mut_slice().is_none() {
            drop(reservation);
            abort(&self.shared);
            let out = Outgoing::error(
                &header,
                Status::Internal,
                "a memory store reserved no memory",
            );
            return self
                .drain_and_answer(len, out.holding(permit), &header, put.started)
                .await;
        }
        let idle = self.idle();
        // In pieces, each hashed as soon as it lands, while it is still in cache: the commit
        // then does not read the whole value a second time.
        let mut filled = 0;
        while filled < len {
            let end = (filled + HASH_PIECE).min(len);
            let slice = reservation.as_mut_slice().expect("memory mode");
            if let Err(e) = read_exact_within(&mut self.read, &mut slice[filled..end], idle).await {
                drop(reservation);
                abort(&self.shared);
                return Err(e);
            }
            filled = end;
            reservation.hash_filled(filled);
        }
        let out = match self.shared.store.commit(reservation, header.checksum) {
            Ok(()) => Outgoing::new(&header, Status::Ok, Body::Empty),
            Err(e) => Outgoing::error(&header, store_status(&e), &e.to_string()),
        };
        record(&self.shared, &self.client.entry, &out, &header, put.started);
        self.send(out.holding(permit)).await
    }

    /// Reads and drops a verified frame's `len` payload bytes, then sends `out` for it.
    async fn drain_and_answer(
        &mut self,
        len: usize,
        out: Outgoing,
        header: &Header,
        started: Instant,
    ) -> Result<(), Closed> {
        let idle = self.idle();
        let mut scratch = vec![0u8; len.min(DRAIN_PIECE)];
        let mut left = len;
        while left > 0 {
            let n = left.min(scratch.len());
            read_exact_within(&mut self.read, &mut scratch[..n], idle).await?;
            left -= n;
        }
        record(&self.shared, &self.client.entry, &out, header, started);
        self.send(out).await
    }

    /// Direct mode: verifies a TcpPut from its header and key, then reads its value straight
    /// into the drives' registered buffers, each piece written as soon as it is full. The
    /// commit runs on a blocking thread and answers out of order, as other drive-backed
    /// requests do. `Ok(Some(permit))` when the store had no free room or buffers to spare now
    /// (or refused the put): nothing was read, and the caller reads the value the usual way.
    async fn put_direct_in_place(
        &mut self,
        put: PutFrame<'_>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Option<OwnedSemaphorePermit>, Closed> {
        let PutFrame {
            raw,
            header,
            key,
            started,
        } = put;
        let len = u64::from(header.payload_len);
        // Room and buffers first: once the frame is verified its sequence number is spent, so
        // falling back to the usual path (which verifies it) must be decided before.
        let Ok(Some(mut fill)) = self.shared.store.put_in_place(key, len) else {
            return Ok(Some(permit));
        };
        let header = match self.opener.verify_before_payload(raw, key) {
            Ok(h) => h,
            Err(e) => {
                drop(fill);
                return self.refuse(raw, e).await.map(|()| None);
            }
        };
        let idle = self.idle();
        while let Some(piece) = fill.next_piece() {
            if let Err(e) = read_exact_within(&mut self.read, piece, idle).await {
                // Dropping waits for the writes already started: off the runtime's threads.
                tokio::task::spawn_blocking(move || drop(fill));
                return Err(e);
            }
            fill.piece_filled();
        }
        self.answer_when_done(header, started, permit, move |_, header| {
            match fill.commit(header.checksum) {
                Ok(()) => Outgoing::new(header, Status::Ok, Body::Empty),
                Err(e) => Outgoing::error(header, store_status(&e), &e.to_string()),
            }
        });
        Ok(None)
    }
}
