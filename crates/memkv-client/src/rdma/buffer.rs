//! Caller memory registered with a rail, and the checksum check of values read by RDMA.

use super::path::rdma_err;
use crate::Result;

/// Caller memory registered once with the client's RDMA rail: puts from it and gets into it
/// move bytes between it and the server's arena with no copy.
///
/// Registration is per RDMA device: each buffer belongs to one rail (buffers take the rails in
/// turn). Transfers with servers that rail reaches are zero-copy; otherwise they are staged
/// through another rail.
pub struct RdmaBuffer {
    pub(crate) rail: usize,
    pub(crate) buf: memkv_rdma::RegisteredBuffer,
}

impl RdmaBuffer {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The bytes, to fill before a put.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        memkv_rdma::LocalMemory::len(&self.buf)
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long registering it took (pages populated on one thread per CPU for buffers of
    /// 64 MiB and more, then one `ibv_reg_mr`).
    pub fn registration_time(&self) -> std::time::Duration {
        self.buf.setup_time()
    }
}

pub(crate) fn verify(server: &str, bytes: &[u8], expected: u64) -> Result<()> {
    let actual = memkv_proto::checksum::of(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(rdma_err(
            server,
            format!(
                "value read by RDMA fails its checksum ({actual:#018x}, stored {expected:#018x})"
            ),
        ))
    }
}
