//! Turning requested transfers into work requests: bounds checks against the local region, and
//! splitting anything larger than the port's maximum message size into several requests. Pure.

use crate::error::RdmaError;

/// Most work requests one operation may expand to (a bound on the memory an operation uses,
/// not on throughput: 65536 requests of 8 MiB is 512 GiB).
pub const MAX_WORK_REQUESTS_PER_OPERATION: usize = 65_536;

/// Largest message one work request carries, below the device's own limit (8 MiB on rxe, 1 or
/// 2 GiB on ConnectX): RC recovers a lost packet by going back to it, so each loss costs the
/// rest of its message again, and on a lossy wire one 8 MiB READ almost never completes
/// (Soft-RoCE with netem at 0.1 % loss: no completion in 22 s; rxe_lossy_wire.rs). 1 MiB
/// messages already run at line rate.
pub const MAX_MESSAGE_BYTES: u32 = 1 << 20;

/// The message size to plan chunks with on a device whose port allows `device_max`.
pub(crate) fn message_limit(device_max: u32) -> u32 {
    device_max.min(MAX_MESSAGE_BYTES)
}

/// One block to move: `len` bytes between `local_offset` in the local region and `remote_addr`
/// in the peer's region named by `rkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub local_offset: usize,
    pub len: usize,
    pub remote_addr: u64,
    pub rkey: u32,
}

/// One work request's worth of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub local_addr: u64,
    pub lkey: u32,
    pub len: u32,
    pub remote_addr: u64,
    pub rkey: u32,
}

/// Checks every transfer against the local region `region_addr..+region_len` and splits it
/// into chunks of at most `max_msg_size` bytes. Zero-length transfers produce nothing.
pub(crate) fn plan_chunks(
    region_addr: u64,
    region_len: usize,
    lkey: u32,
    transfers: &[Transfer],
    max_msg_size: u32,
) -> Result<Vec<Chunk>, RdmaError> {
    let max = max_msg_size.max(1) as usize;
    let mut count = 0usize;
    for t in transfers {
        let end = t.local_offset.checked_add(t.len);
        if end.is_none_or(|end| end > region_len) {
            return Err(RdmaError::OutOfBounds {
                offset: t.local_offset,
                len: t.len,
                region_len,
            });
        }
        if t.remote_addr.checked_add(t.len as u64).is_none() {
            return Err(RdmaError::InvalidArgument {
                name: "remote_addr",
                value: format!("{:#x} + {} bytes", t.remote_addr, t.len),
                limit: "the remote range must not wrap around the address space",
            });
        }
        count = count.saturating_add(t.len.div_ceil(max));
    }
    if count > MAX_WORK_REQUESTS_PER_OPERATION {
        return Err(RdmaError::TooLarge {
            what: "work requests in one operation",
            requested: count as u64,
            limit: MAX_WORK_REQUESTS_PER_OPERATION as u64,
        });
    }
    let mut chunks = Vec::with_capacity(count);
    for t in transfers {
        let mut done = 0usize;
        while done < t.len {
            let len = (t.len - done).min(max);
            chunks.push(Chunk {
                local_addr: region_addr + (t.local_offset + done) as u64,
                lkey,
                // `len <= max_msg_size`, a u32.
                len: len as u32,
                remote_addr: t.remote_addr + done as u64,
                rkey: t.rkey,
            });
            done += len;
        }
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn sixteen_mib_takes_two_requests_on_an_8_mib_port() {
        let t = Transfer {
            local_offset: 0,
            len: 16 * MIB,
            remote_addr: 0x1000,
            rkey: 7,
        };
        let chunks = plan_chunks(0x10_0000, 16 * MIB, 3, &[t], 8 * MIB as u32).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].local_addr, 0x10_0000 + 8 * MIB as u64);
        assert_eq!(chunks[1].remote_addr, 0x1000 + 8 * MIB as u64);
        assert!(
            chunks
                .iter()
                .all(|c| c.len == 8 * MIB as u32 && c.rkey == 7)
        );
    }

    #[test]
    fn out_of_region_and_wrapping_ranges_are_named() {
        let t = |local_offset, len, remote_addr| Transfer {
            local_offset,
            len,
            remote_addr,
            rkey: 1,
        };
        let e = plan_chunks(0, 100, 3, &[t(90, 11, 0)], 64).unwrap_err();
        assert_eq!(
            e,
            RdmaError::OutOfBounds {
                offset: 90,
                len: 11,
                region_len: 100
            }
        );
        assert!(plan_chunks(0, 100, 3, &[t(usize::MAX, 2, 0)], 64).is_err());
        let e = plan_chunks(0, 100, 3, &[t(0, 10, u64::MAX - 3)], 64).unwrap_err();
        assert!(e.to_string().contains("remote_addr"), "{e}");
        assert_eq!(plan_chunks(0, 100, 3, &[t(0, 0, 0)], 64).unwrap(), vec![]);
        let e = plan_chunks(0, usize::MAX, 3, &[t(0, usize::MAX / 2, 0)], 1).unwrap_err();
        assert!(matches!(e, RdmaError::TooLarge { .. }), "{e}");
    }

    proptest! {
        /// Chunks tile every transfer exactly, in order, none larger than the limit.
        #[test]
        fn chunks_tile_the_transfers(
            max in 1u32..5000,
            lens in proptest::collection::vec((0usize..3000, 0usize..20_000), 0..8),
        ) {
            let region_len = 30_000;
            let transfers: Vec<Transfer> = lens.iter().enumerate()
                .filter(|(_, (off, len))| off + len <= region_len)
                .map(|(i, (off, len))| Transfer {
                    local_offset: *off, len: *len, remote_addr: 1 << 40 | (i as u64) << 20, rkey: i as u32,
                })
                .collect();
            let requests: usize = transfers.iter().map(|t| t.len.div_ceil(max as usize)).sum();
            let planned = plan_chunks(4096, region_len, 3, &transfers, max);
            if requests > MAX_WORK_REQUESTS_PER_OPERATION {
                // Tiny messages make too many work requests: refused, never cut short.
                prop_assert!(matches!(planned, Err(RdmaError::TooLarge { .. })), "{planned:?}");
                return Ok(());
            }
            let chunks = planned.unwrap();
            let mut it = chunks.iter();
            for t in &transfers {
                let mut covered = 0usize;
                while covered < t.len {
                    let c = it.next().unwrap();
                    prop_assert!(c.len >= 1 && c.len <= max);
                    prop_assert_eq!(c.local_addr, 4096 + (t.local_offset + covered) as u64);
                    prop_assert_eq!(c.remote_addr, t.remote_addr + covered as u64);
                    prop_assert_eq!(c.rkey, t.rkey);
                    covered += c.len as usize;
                }
                prop_assert_eq!(covered, t.len);
            }
            prop_assert!(it.next().is_none());
        }
    }
}
