//! Direct mode's put in place: a value read from a socket straight into the drives' registered
//! buffers and written from there. The usual path reads it into a buffer of its own (zeroed
//! first) and copies it into registered buffers; here both go, and each piece is hashed while
//! it is still in cache and written as soon as it is full, so the drive takes the front of a
//! value while the rest is still arriving.
//!
//! The buffers are leased before a byte is read, all of them at once, or not at all (the caller
//! then takes the usual path): a put never waits for a buffer halfway through its value, and a
//! drive keeps half its buffers for everyone else however slowly a client sends.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::commit::{Op, WriteGuard};
use super::extents::split_extent;
use super::{DriveError, FileBackend, FileSpace};
use crate::arena::{BufferLease, DIRECT_ALIGN, InFlight, Xxh3Stream};
use crate::error::{Result, StoreError};

/// A leased buffer and where its bytes go.
struct Piece {
    drive: usize,
    /// Drive offset (extent-aligned, so 4 KiB-aligned).
    offset: u64,
    /// Value bytes it holds: the buffer's size, less at the end of an extent or the value.
    len: usize,
    lease: BufferLease,
}

/// A value being filled in place; commit it with [`FileBackend::commit_filled`].
pub(crate) struct FillInPlace {
    // Declared first so that it drops first: a write still in flight ends (dropping an
    // `InFlight` waits) before `space` returns its extents to the free list.
    in_flight: Vec<(usize, InFlight)>,
    pending: VecDeque<Piece>,
    space: FileSpace,
    hasher: Xxh3Stream,
    failed: Option<DriveError>,
}

impl FillInPlace {
    /// The next piece of the value to fill, in order; `None` once all are filled.
    pub fn next_piece(&mut self) -> Option<&mut [u8]> {
        let piece = self.pending.front_mut()?;
        Some(&mut piece.lease.bytes_mut()[..piece.len])
    }

    /// The piece [`Self::next_piece`] gave is full: hash it and start writing it.
    pub fn piece_filled(&mut self, backend: &FileBackend) {
        let Some(mut piece) = self.pending.pop_front() else {
            return;
        };
        let bytes = piece.lease.bytes_mut();
        self.hasher.update(&bytes[..piece.len]);
        let aligned = piece.len.next_multiple_of(DIRECT_ALIGN);
        // Past the value's end: zeros rather than whatever the buffer last held.
        bytes[piece.len..aligned].fill(0);
        if self.failed.is_some() {
            return;
        }
        match backend.drives[piece.drive].write_leased(piece.lease, piece.offset, aligned) {
            Ok(flight) => self.in_flight.push((piece.drive, flight)),
            Err(error) => {
                self.failed = Some(DriveError {
                    drive: piece.drive,
                    error,
                })
            }
        }
    }

    pub fn len(&self) -> u64 {
        self.space.len
    }
}

impl FileBackend {
    /// Room for `len` bytes and a registered buffer for every piece of them. `None` when there
    /// is no free room (the usual path evicts), or a drive has no buffers to spare now, or its
    /// drives have none at all (direct mode only).
    pub(crate) fn fill_in_place(&self, len: u64) -> Option<FillInPlace> {
        let space = self.try_allocate(len)?;
        let mut pending = VecDeque::new();
        for (k, &id) in space.extents.ids.iter().enumerate() {
            let (drive, slot) = split_extent(id);
            let start = k as u64 * self.block_size;
            let end = (start + self.block_size).min(len);
            let mut offset = self.data_offset + u64::from(slot) * self.block_size;
            let mut left = end - start;
            while left > 0 {
                let lease = self.drives[drive].try_lease()?;
                let n = (lease.bytes().len() as u64).min(left);
                pending.push_back(Piece {
                    drive,
                    offset,
                    len: n as usize,
                    lease,
                });
                offset += n;
                left -= n;
            }
        }
        Some(FillInPlace {
            in_flight: Vec::with_capacity(pending.len()),
            pending,
            space,
            hasher: Xxh3Stream::new(),
            failed: None,
        })
    }

    /// Publishes a value filled in place once its bytes hash to `checksum` and have landed,
    /// journaled as any put (its record goes out while the last writes land).
    pub(crate) fn commit_filled(&self, key: &[u8], fill: FillInPlace, checksum: u64) -> Result<()> {
        let FillInPlace {
            in_flight,
            pending,
            space,
            hasher,
            failed,
        } = fill;
        let refusal = if !pending.is_empty() {
            Some(StoreError::BadRequest(format!(
                "commit of a value filled in place with {} of its pieces still empty",
                pending.len()
            )))
        } else if let Some(e) = failed {
            Some(self.count_write_error(e))
        } else {
            let actual = hasher.digest();
            (actual != checksum).then_some(StoreError::ChecksumMismatch {
                expected: checksum,
                actual,
            })
        };
        if let Some(refused) = refusal {
            // The extents go back (with `space`) only after their writes end.
            drop(in_flight);
            return Err(refused);
        }
        let entry = space.into_entry(key, checksum);
        let (guard, written) = WriteGuard::new();
        let ticket = self.enqueue(Op::Commit {
            entry,
            written: Some(written),
        });
        let mut landed = Ok(());
        for (drive, flight) in in_flight {
            if let Err(error) = flight.wait() {
                if landed.is_ok() {
                    landed = Err(DriveError { drive, error });
                }
            }
        }
        let landed = match landed {
            Ok(()) => {
                guard.landed();
                Ok(())
            }
            // Dropping the guard tells the group commit the bytes did not land. It must go
            // before we wait for our ticket: a leader (we, perhaps) waits for those bytes.
            Err(e) => {
                drop(guard);
                Err(self.count_write_error(e))
            }
        };
        let committed = self.wait_for(ticket);
        landed.and(committed.map(|_| ()))
    }

    /// A failed data write, counted against its drive as any other.
    fn count_write_error(&self, e: DriveError) -> StoreError {
        let drive = &self.drives[e.drive];
        self.health.fail(e.drive, drive.path(), &e.error);
        self.health.write_errors[e.drive].fetch_add(1, Ordering::Relaxed);
        e.into()
    }
}
