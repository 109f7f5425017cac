//! A pool of registered buffers for moving caller data that is not registered itself: the
//! bytes are copied into (or out of) a staging buffer, which the NIC reads (or writes).

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::device::RdmaDevice;
use crate::error::RdmaError;
use crate::memory::{LocalMemory, RegisteredBuffer};

/// `count` buffers of `buf_size` bytes carved out of one registered mapping (one MR).
pub struct StagingPool {
    buffer: RegisteredBuffer,
    /// `buffer`'s first byte; slots are derived from it without borrowing the buffer.
    base: usize,
    buf_size: usize,
    count: usize,
    free: Mutex<Vec<usize>>,
    returned: Notify,
}

impl StagingPool {
    pub fn new(device: &RdmaDevice, buf_size: usize, count: usize) -> Result<Arc<Self>, RdmaError> {
        if buf_size == 0 || count == 0 {
            return Err(RdmaError::InvalidArgument {
                name: "staging pool",
                value: format!("{count} buffers of {buf_size} bytes"),
                limit: "needs at least one buffer of at least one byte",
            });
        }
        let total = buf_size.checked_mul(count).ok_or(RdmaError::TooLarge {
            what: "staging pool size in bytes",
            requested: u64::MAX,
            limit: usize::MAX as u64,
        })?;
        let mut buffer = RegisteredBuffer::new(device, total)?;
        let base = buffer.as_mut_slice().as_mut_ptr() as usize;
        Ok(Arc::new(Self {
            buffer,
            base,
            buf_size,
            count,
            free: Mutex::new((0..count).rev().collect()),
            returned: Notify::new(),
        }))
    }

    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn available(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// A free buffer, or `None` when all are in use.
    pub fn try_acquire(self: &Arc<Self>) -> Option<StagingBuffer> {
        let index = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        Some(StagingBuffer {
            pool: self.clone(),
            index,
        })
    }

    /// Waits for a free buffer.
    pub async fn acquire(self: &Arc<Self>) -> StagingBuffer {
        loop {
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some(b) = self.try_acquire() {
                return b;
            }
            returned.await;
        }
    }

    fn give_back(&self, index: usize) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(index);
        self.returned.notify_one();
    }
}

/// One buffer of a [`StagingPool`], returned to the pool when dropped.
pub struct StagingBuffer {
    pool: Arc<StagingPool>,
    index: usize,
}

impl StagingBuffer {
    fn start(&self) -> usize {
        self.pool.base + self.index * self.pool.buf_size
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: slot `index` lies inside the pool's mapping, which the `Arc` keeps alive, and
        // belongs to this buffer alone until it is dropped (it left the free list).
        unsafe { std::slice::from_raw_parts(self.start() as *const u8, self.pool.buf_size) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start() as *mut u8, self.pool.buf_size) }
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        self.pool.give_back(self.index);
    }
}

// SAFETY: the slot lies inside the pool's registered region (same lkey), stays mapped while
// the pool lives, and is used by this buffer alone; operations borrow the buffer.
unsafe impl LocalMemory for StagingBuffer {
    fn addr(&self) -> u64 {
        self.start() as u64
    }
    fn len(&self) -> usize {
        self.pool.buf_size
    }
    fn lkey(&self) -> u32 {
        self.pool.buffer.region().lkey()
    }
}
