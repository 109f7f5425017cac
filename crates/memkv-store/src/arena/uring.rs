//! io_uring for one O_DIRECT drive: a ring with the drive registered as a fixed file, a pool of
//! registered, 4 KiB-aligned buffers, and one thread that submits requests and hands back
//! completions, so that several requests per drive are in flight at once.
//!
//! Callers take a buffer ([`BufferLease`]), fill it (writes) and submit it with an offset and a
//! length; the lease travels with the request and comes back from [`InFlight::wait`] once the
//! kernel is done with it. That is the invariant the `unsafe` below rests on: while the kernel
//! owns a buffer, no Rust reference to its bytes exists (the lease is inside the request, and
//! an [`InFlight`] dropped without waiting still waits before the buffer can be reused).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fs::File;
use std::io;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use io_uring::{IoUring, opcode, types};

/// O_DIRECT alignment of offsets, lengths and memory (4 KiB covers 512-byte and 4 KiB sectors).
pub const DIRECT_ALIGN: usize = 4096;

/// Registered buffers: one aligned allocation cut into `count` buffers of `size` bytes.
struct Buffers {
    base: NonNull<u8>,
    layout: Layout,
    size: usize,
    count: usize,
}

// SAFETY: the allocation is plain memory; which thread touches which buffer is governed by the
// lease protocol (a buffer index is owned by exactly one lease or one in-flight request).
unsafe impl Send for Buffers {}
// SAFETY: as above; shared access only reads `base` and the geometry.
unsafe impl Sync for Buffers {}

impl Buffers {
    fn new(count: usize, size: usize) -> io::Result<Buffers> {
        let total = count
            .checked_mul(size)
            .filter(|&t| t > 0 && size % DIRECT_ALIGN == 0)
            .ok_or_else(|| io::Error::other("direct buffers: bad geometry"))?;
        let layout = Layout::from_size_align(total, DIRECT_ALIGN).map_err(io::Error::other)?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let base = NonNull::new(unsafe { alloc_zeroed(layout) })
            .ok_or_else(|| io::Error::other("direct buffers: out of memory"))?;
        Ok(Buffers {
            base,
            layout,
            size,
            count,
        })
    }

    fn ptr(&self, index: usize) -> *mut u8 {
        assert!(index < self.count);
        // SAFETY: `index < count`, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add(index * self.size) }
    }

    fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count)
            .map(|i| libc::iovec {
                iov_base: self.ptr(i).cast(),
                iov_len: self.size,
            })
            .collect()
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; dropped once, after the ring thread has
        // ended (the ring owns an `Arc` to the buffers until then).
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// Whether a request reads the drive into the buffer or writes the buffer to the drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

struct Request {
    direction: Direction,
    buffer: usize,
    /// Where in the buffer the bytes go or come from.
    at: usize,
    offset: u64,
    len: u32,
    done: SyncSender<i32>,
}

struct Shared {
    buffers: Buffers,
    free: Mutex<Vec<usize>>,
    freed: Condvar,
}

/// One drive's ring, its buffers and its submission thread.
pub struct DirectRing {
    shared: Arc<Shared>,
    submit: Mutex<Option<Sender<Request>>>,
    wake: Arc<File>,
    thread: Option<JoinHandle<()>>,
}

impl DirectRing {
    /// A ring over `file` (opened with O_DIRECT) with `count` registered buffers of `size` bytes
    /// (a multiple of [`DIRECT_ALIGN`]): at most `count` requests in flight.
    pub fn new(file: &File, count: usize, size: usize) -> io::Result<DirectRing> {
        let buffers = Buffers::new(count, size)?;
        // One entry per buffer and one for the wake-up poll.
        let entries = u32::try_from((count + 1).next_power_of_two()).map_err(io::Error::other)?;
        let ring = IoUring::new(entries)?;
        ring.submitter().register_files(&[file.as_raw_fd()])?;
        let iovecs = buffers.iovecs();
        // SAFETY: the iovecs describe memory owned by `buffers`, which the ring thread keeps
        // alive (through `Shared`) for as long as the ring, so the registration never outlives it.
        unsafe { ring.submitter().register_buffers(&iovecs)? };
        let shared = Arc::new(Shared {
            buffers,
            free: Mutex::new((0..count).rev().collect()),
            freed: Condvar::new(),
        });
        let (tx, rx) = channel();
        let wake = Arc::new(eventfd()?);
        let thread_shared = Arc::clone(&shared);
        let thread_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("memkv-uring".into())
            .spawn(move || run(ring, rx, thread_shared, thread_wake))?;
        Ok(DirectRing {
            shared,
            submit: Mutex::new(Some(tx)),
            wake,
            thread: Some(thread),
        })
    }

    /// Bytes per buffer.
    pub fn buffer_size(&self) -> usize {
        self.shared.buffers.size
    }

    /// Takes a free buffer if one is free now. A caller that already has requests in flight
    /// should wait for one of those rather than block here: buffers go back to the pool only
    /// when their owners take them back.
    pub fn try_acquire(&self) -> Option<BufferLease> {
        let index = self
            .shared
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()?;
        Some(BufferLease {
            shared: Arc::clone(&self.shared),
            index,
        })
    }

    /// Takes a free buffer only while more than `keep` others stay free: for a caller that
    /// holds buffers for as long as a remote peer takes to fill them, so that a slow peer
    /// never leaves the drive's other requests without buffers.
    pub fn try_acquire_keeping(&self, keep: usize) -> Option<BufferLease> {
        let mut free = self.shared.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() <= keep {
            return None;
        }
        let index = free.pop()?;
        Some(BufferLease {
            shared: Arc::clone(&self.shared),
            index,
        })
    }

    /// Takes a free buffer, waiting for one when all are in use. Only for callers with nothing
    /// in flight (see [`Self::try_acquire`]).
    pub fn acquire(&self) -> BufferLease {
        let mut free = self.shared.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(index) = free.pop() {
                return BufferLease {
                    shared: Arc::clone(&self.shared),
                    index,
                };
            }
            free = self
                .shared
                .freed
                .wait(free)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Starts moving `len` bytes between `lease[at..at + len]` and the drive at `offset`; all
    /// three aligned, the range inside the buffer.
    pub fn submit(
        &self,
        lease: BufferLease,
        direction: Direction,
        offset: u64,
        len: usize,
        at: usize,
    ) -> io::Result<InFlight> {
        let aligned =
            offset % DIRECT_ALIGN as u64 == 0 && len % DIRECT_ALIGN == 0 && at % DIRECT_ALIGN == 0;
        if !aligned
            || at
                .checked_add(len)
                .is_none_or(|end| end > self.buffer_size())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "direct I/O of {len} bytes at {offset}: not aligned to {DIRECT_ALIGN} or larger than a buffer"
                ),
            ));
        }
        let (done, result) = sync_channel(1);
        let request = Request {
            direction,
            buffer: lease.index,
            at,
            offset,
            len: len as u32,
            done,
        };
        let sender = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        let sent = sender.as_ref().map(|s| s.send(request));
        drop(sender);
        match sent {
            Some(Ok(())) => {
                self.wake_thread();
                Ok(InFlight {
                    lease: Some(lease),
                    result,
                    len,
                })
            }
            _ => Err(io::Error::other("the drive's I/O thread has stopped")),
        }
    }

    fn wake_thread(&self) {
        // Fails only when the counter would overflow, and then a wake-up is pending anyway.
        let _ = (&*self.wake).write(&1u64.to_ne_bytes());
    }
}

impl Drop for DirectRing {
    fn drop(&mut self) {
        // Closing the channel ends the thread once its requests have completed.
        self.submit.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.wake_thread();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A registered buffer, owned by the caller until it is submitted.
pub struct BufferLease {
    shared: Arc<Shared>,
    index: usize,
}

impl BufferLease {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: this lease is the sole owner of buffer `index` (it left the free list when the
        // lease was made and returns to it when the lease drops); no request holds it now.
        unsafe {
            std::slice::from_raw_parts(
                self.shared.buffers.ptr(self.index),
                self.shared.buffers.size,
            )
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.shared.buffers.ptr(self.index),
                self.shared.buffers.size,
            )
        }
    }
}

impl Drop for BufferLease {
    fn drop(&mut self) {
        self.shared
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.index);
        self.shared.freed.notify_one();
    }
}

/// A submitted request. Its buffer comes back from [`InFlight::wait`].
pub struct InFlight {
    lease: Option<BufferLease>,
    result: Receiver<i32>,
    len: usize,
}

impl InFlight {
    /// Waits for the request; a short transfer is an error.
    pub fn wait(mut self) -> io::Result<BufferLease> {
        let outcome = self.finish();
        let lease = self
            .lease
            .take()
            .expect("a request holds its buffer until it ends");
        outcome.map(|()| lease)
    }

    fn finish(&mut self) -> io::Result<()> {
        let res = self
            .result
            .recv()
            .map_err(|_| io::Error::other("the drive's I/O thread stopped mid-request"))?;
        if res < 0 {
            return Err(io::Error::from_raw_os_error(-res));
        }
        if res as usize != self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("direct I/O moved {res} of {} bytes", self.len),
            ));
        }
        Ok(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.lease.is_some() {
            // The kernel may still own the buffer: it must not return to the pool before the
            // request ends.
            let _ = self.result.recv();
        }
    }
}

/// `user_data` of the wake-up poll on the eventfd; request completions carry buffer indexes.
const WAKE: u64 = u64::MAX;

/// The submission thread: pushes requests as they come, up to one per buffer, and answers each
/// completion. It sleeps in the kernel until a completion arrives or a caller writes the wake-up
/// eventfd (a poll on it sits in the ring), so a request is submitted at once even while others
/// are in flight. Ends when every `DirectRing` handle is gone and nothing is in flight.
fn run(mut ring: IoUring, requests: Receiver<Request>, shared: Arc<Shared>, wake: Arc<File>) {
    let mut waiting: Vec<Option<SyncSender<i32>>> =
        (0..shared.buffers.count).map(|_| None).collect();
    let mut in_flight = 0usize;
    let mut open = true;
    let mut poll_armed = false;
    loop {
        loop {
            match requests.try_recv() {
                Ok(r) => push(&mut ring, &shared, r, &mut waiting, &mut in_flight),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if !open && in_flight == 0 {
            return;
        }
        if !poll_armed {
            let poll = opcode::PollAdd::new(types::Fd(wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE);
            // SAFETY: a poll references no memory of ours; the eventfd lives (through `wake`)
            // as long as this thread, and the ring is closed, cancelling the poll, before it.
            // The queue has room: one entry per buffer plus this one.
            poll_armed = unsafe { ring.submission().push(&poll) }.is_ok();
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The ring itself failed: fail everything in flight; new requests fail too.
            for done in waiting.iter_mut().filter_map(Option::take) {
                let _ = done.send(-e.raw_os_error().unwrap_or(libc::EIO));
            }
            return;
        }
        for cqe in ring.completion() {
            if cqe.user_data() == WAKE {
                // Reset the counter; the requests themselves are in the channel.
                let _ = (&*wake).read(&mut [0u8; 8]);
                poll_armed = false;
                continue;
            }
            let index = cqe.user_data() as usize;
            if let Some(done) = waiting.get_mut(index).and_then(Option::take) {
                in_flight -= 1;
                let _ = done.send(cqe.result());
            }
        }
    }
}

/// A non-blocking eventfd: callers write it after queueing a request to wake the ring thread.
fn eventfd() -> io::Result<File> {
    // SAFETY: eventfd takes no pointers; a negative result is an error, checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

fn push(
    ring: &mut IoUring,
    shared: &Shared,
    r: Request,
    waiting: &mut [Option<SyncSender<i32>>],
    in_flight: &mut usize,
) {
    // SAFETY: `submit` checked that `at + len` lies inside the buffer.
    let ptr = unsafe { shared.buffers.ptr(r.buffer).add(r.at) };
    let fixed = types::Fixed(0);
    let index = r.buffer as u16;
    let entry = match r.direction {
        Direction::Read => opcode::ReadFixed::new(fixed, ptr, r.len, index)
            .offset(r.offset)
            .build(),
        Direction::Write => opcode::WriteFixed::new(fixed, ptr, r.len, index)
            .offset(r.offset)
            .build(),
    }
    .user_data(r.buffer as u64);
    // SAFETY: the entry points into registered buffer `r.buffer`, which the request's lease
    // keeps out of the pool until its completion is answered (see the module notes); the fixed
    // file stays registered for the ring's life. The queue has room: it holds one entry per
    // buffer and each buffer has at most one request.
    let pushed = unsafe { ring.submission().push(&entry) };
    match pushed {
        Ok(()) => {
            waiting[r.buffer] = Some(r.done);
            *in_flight += 1;
        }
        Err(_) => {
            let _ = r.done.send(-libc::EBUSY);
        }
    }
}
