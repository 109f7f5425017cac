//! Direct mode's gets from the drives' own buffers: a value is read into registered buffers,
//! verified there, and handed out as those buffers, so a server writes it to its socket
//! without copying it first. The usual read zeroes a buffer of its own and copies every piece
//! into it while hashing: two passes over the value that this path does not make.
//!
//! The buffers are leased before the first read, all of them or none (the caller then reads
//! the usual way), and only while the drive keeps half its buffers free, as for puts filled in
//! place: a client slow to take its answer holds buffers the drive can do without. Values of
//! more than [`MAX_PIECES`] buffers always take the usual path, so one get never holds a
//! drive's spare buffers alone.

use std::sync::atomic::AtomicU64;

use super::extents::split_extent;
use super::{DriveError, FileBackend, FileBlock};
use crate::arena::{BufferLease, DIRECT_ALIGN, InFlight, Xxh3Stream};
use crate::config::check_key;
use crate::error::Result;
use crate::index::Entry;

/// The most buffers (1 MiB each) one leased get may hold: values up to 4 MiB.
const MAX_PIECES: usize = 4;

/// A verified value in a drive's registered buffers, in order; the buffers go back to the
/// drive when it drops.
pub struct LeasedValue {
    pieces: Vec<(BufferLease, usize)>,
    len: u64,
    checksum: u64,
}

impl LeasedValue {
    /// The value's bytes, one slice per buffer.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().map(|(lease, n)| &lease.bytes()[..*n])
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// xxh3-64 of the value, as given at commit (and checked against the bytes read).
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
}

impl std::fmt::Debug for LeasedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedValue")
            .field("len", &self.len)
            .field("buffers", &self.pieces.len())
            .field("checksum", &self.checksum)
            .finish()
    }
}

pub(crate) enum LeasedRead {
    Found(LeasedValue),
    /// No such key, or the value could not be read (counted and handled as by any read).
    Missing,
    /// No buffers to spare now, a drive without registered buffers, or a value too large for
    /// this path: read it the usual way.
    Unavailable,
}

/// One read: its drive, the aligned drive offset, and the value bytes it carries.
struct Piece {
    drive: usize,
    offset: u64,
    take: usize,
}

/// A leased read whose requests are on their way: finish it with [`FileBackend::finish_leased`].
struct Started {
    block: Entry<FileBlock>,
    /// Per read: its drive, the value bytes it carries, and the request.
    flights: Vec<(usize, usize, InFlight)>,
}

enum Start {
    Started(Started),
    Done(LeasedRead),
}

impl FileBackend {
    /// Reads and verifies each key's value into registered buffers leased for the purpose,
    /// every value's reads started before the first is awaited, so the drives work on the
    /// whole batch at once. A key the store refuses gets its error.
    pub(crate) fn read_leased_many(
        &self,
        keys: &[&[u8]],
        failures: &AtomicU64,
    ) -> Vec<Result<LeasedRead>> {
        let started: Vec<Result<Start>> = keys
            .iter()
            .map(|k| {
                check_key(k)?;
                self.start_leased(k)
            })
            .collect();
        keys.iter()
            .zip(started)
            .map(|(key, start)| match start? {
                Start::Started(s) => self.finish_leased(key, s, failures),
                Start::Done(read) => Ok(read),
            })
            .collect()
    }

    /// Leases the buffers for `key`'s value and submits its reads.
    fn start_leased(&self, key: &[u8]) -> Result<Start> {
        let Some(block) = self.index.get(key) else {
            return Ok(Start::Done(LeasedRead::Missing));
        };
        if self.offline_drive(&block).is_some() {
            return Ok(Start::Done(LeasedRead::Missing));
        }
        let Some(plan) = self.plan(&block.extents.ids, block.len) else {
            return Ok(Start::Done(LeasedRead::Unavailable));
        };
        let mut leases = Vec::with_capacity(plan.len());
        for p in &plan {
            match self.drives[p.drive].try_lease() {
                Some(lease) => leases.push(lease),
                None => return Ok(Start::Done(LeasedRead::Unavailable)),
            }
        }
        let mut flights: Vec<(usize, usize, InFlight)> = Vec::with_capacity(plan.len());
        for (p, lease) in plan.iter().zip(leases) {
            let len = p.take.next_multiple_of(DIRECT_ALIGN);
            match self.drives[p.drive].read_leased(lease, p.offset, len) {
                Ok(flight) => flights.push((p.drive, p.take, flight)),
                Err(error) => {
                    let e = DriveError {
                        drive: p.drive,
                        error,
                    };
                    // Dropping the flights waits for the reads already started.
                    drop(flights);
                    return self
                        .read_failed(key, block, e)
                        .map(|()| Start::Done(LeasedRead::Missing));
                }
            }
        }
        Ok(Start::Started(Started { block, flights }))
    }

    /// Waits for a started read's requests in order, hashing each buffer as it lands (the
    /// drive works on the later ones meanwhile), and checks the value.
    fn finish_leased(
        &self,
        key: &[u8],
        started: Started,
        failures: &AtomicU64,
    ) -> Result<LeasedRead> {
        let Started { block, flights } = started;
        let mut hasher = Xxh3Stream::new();
        let mut pieces = Vec::with_capacity(flights.len());
        let mut flights = flights.into_iter();
        for (drive, take, flight) in flights.by_ref() {
            match flight.wait() {
                Ok(lease) => {
                    hasher.update(&lease.bytes()[..take]);
                    pieces.push((lease, take));
                }
                Err(error) => {
                    let e = DriveError { drive, error };
                    drop(flights);
                    return self
                        .read_failed(key, block, e)
                        .map(|()| LeasedRead::Missing);
                }
            }
        }
        if hasher.digest() != block.checksum {
            drop(pieces);
            return self
                .corrupt(key, block, failures)
                .map(|()| LeasedRead::Missing);
        }
        Ok(LeasedRead::Found(LeasedValue {
            pieces,
            len: block.len,
            checksum: block.checksum,
        }))
    }

    /// The reads that bring a `len`-byte value on `extents` into buffers, one per buffer-sized
    /// run of an extent; `None` when it needs more than [`MAX_PIECES`].
    fn plan(&self, extents: &[u64], len: u64) -> Option<Vec<Piece>> {
        let buffer = super::direct::BUFFER_SIZE as u64;
        let mut plan = Vec::new();
        for (k, &id) in extents.iter().enumerate() {
            let (drive, slot) = split_extent(id);
            let start = k as u64 * self.block_size;
            let mut offset = self.data_offset + u64::from(slot) * self.block_size;
            let mut left = (start + self.block_size).min(len).saturating_sub(start);
            while left > 0 {
                if plan.len() == MAX_PIECES {
                    return None;
                }
                let take = left.min(buffer);
                plan.push(Piece {
                    drive,
                    offset,
                    take: take as usize,
                });
                offset += take;
                left -= take;
            }
        }
        Some(plan)
    }
}
