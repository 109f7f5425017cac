//! The Connect (0x06) payload: what each side of an RDMA queue pair tells the other over the
//! authenticated TCP connection before the pair moves to ready-to-send.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | layout version (1) |
//! | 1 | 1 | flags: bit 0 LID present, bit 1 RC capable, bit 2 DC capable, bit 3 full P_Key membership, bit 4 DC target (response) |
//! | 2 | 2 | LID (InfiniBand; 0 when absent) |
//! | 4 | 4 | queue pair number (with bit 4: the server's DC target number) |
//! | 8 | 4 | initial packet sequence number (24 bits used) |
//! | 12 | 16 | GID |
//! | 28 | 4 | source GID index the sender uses |
//! | 32 | 8 | GID subnet prefix |
//! | 40 | 4 | path MTU in bytes (256..4096) |
//! | 44 | 2 | P_Key index |
//! | 46 | 2 | reserved, zero |
//! | 48 | 8 | server arena address (response; 0 in a request) |
//! | 56 | 4 | server arena rkey (response; 0 in a request) |
//! | 60 | 4 | reserved, zero |

use crate::ProtoError;
use crate::cursor::Cursor;

/// Layout version of [`RdmaEndpoint`].
pub const CONNECT_LAYOUT_VERSION: u8 = 1;

const FLAG_LID: u8 = 1 << 0;
const FLAG_RC: u8 = 1 << 1;
const FLAG_DC: u8 = 1 << 2;
const FLAG_FULL_MEMBER: u8 = 1 << 3;
const FLAG_DC_TARGET: u8 = 1 << 4;

/// One side's queue pair and port, as advertised in Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaEndpoint {
    /// InfiniBand LID; `None` on RoCE, or from an older peer that sends none.
    pub lid: Option<u16>,
    pub rc_capable: bool,
    pub dc_capable: bool,
    pub full_member: bool,
    /// Response only: the server chose DC for this client; `qp_num` is its DC target (DCT)
    /// number, reached from the client's DC initiators with the access key both sides derive
    /// from the auth key ([`crate::AuthKey::dc_access_key`]). No RC pair was created for it.
    pub dc_target: bool,
    pub qp_num: u32,
    pub psn: u32,
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub subnet_prefix: u64,
    pub mtu: u32,
    pub pkey_index: u16,
    pub arena_addr: u64,
    pub arena_rkey: u32,
}

impl RdmaEndpoint {
    /// Encoded size in bytes.
    pub const LEN: usize = 64;

    /// Encodes the endpoint.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        let flags = (if self.lid.is_some() { FLAG_LID } else { 0 })
            | (if self.rc_capable { FLAG_RC } else { 0 })
            | (if self.dc_capable { FLAG_DC } else { 0 })
            | (if self.full_member {
                FLAG_FULL_MEMBER
            } else {
                0
            })
            | (if self.dc_target { FLAG_DC_TARGET } else { 0 });
        out.push(CONNECT_LAYOUT_VERSION);
        out.push(flags);
        out.extend_from_slice(&self.lid.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.qp_num.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.extend_from_slice(&self.gid_index.to_le_bytes());
        out.extend_from_slice(&self.subnet_prefix.to_le_bytes());
        out.extend_from_slice(&self.mtu.to_le_bytes());
        out.extend_from_slice(&self.pkey_index.to_le_bytes());
        out.extend_from_slice(&[0; 2]);
        out.extend_from_slice(&self.arena_addr.to_le_bytes());
        out.extend_from_slice(&self.arena_rkey.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out
    }

    /// Decodes an endpoint; newer layout versions are refused, unknown flags ignored.
    pub fn decode(payload: &[u8]) -> Result<RdmaEndpoint, ProtoError> {
        let mut c = Cursor::new(payload, "Connect payload");
        let head = c.bytes(2)?;
        let (version, flags) = (head[0], head[1]);
        if version != CONNECT_LAYOUT_VERSION {
            return Err(ProtoError::BadRequest(format!(
                "Connect layout version {version}; this build reads version {CONNECT_LAYOUT_VERSION}"
            )));
        }
        let lid = c.u16()?;
        let qp_num = c.u32()?;
        let psn = c.u32()?;
        let gid: [u8; 16] = c.bytes(16)?.try_into().expect("16 bytes");
        let gid_index = c.u32()?;
        let subnet_prefix = c.u64()?;
        let mtu = c.u32()?;
        let pkey_index = c.u16()?;
        c.bytes(2)?;
        let arena_addr = c.u64()?;
        let arena_rkey = c.u32()?;
        c.bytes(4)?;
        c.finish()?;
        if !matches!(mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(ProtoError::BadRequest(format!(
                "Connect path MTU {mtu} is not one of 256, 512, 1024, 2048, 4096"
            )));
        }
        Ok(RdmaEndpoint {
            lid: (flags & FLAG_LID != 0).then_some(lid),
            rc_capable: flags & FLAG_RC != 0,
            dc_capable: flags & FLAG_DC != 0,
            full_member: flags & FLAG_FULL_MEMBER != 0,
            dc_target: flags & FLAG_DC_TARGET != 0,
            qp_num,
            psn,
            gid,
            gid_index,
            subnet_prefix,
            mtu,
            pkey_index,
            arena_addr,
            arena_rkey,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(lid in proptest::option::of(any::<u16>()), qp in any::<u32>(), psn in any::<u32>(), gid in any::<[u8; 16]>(), addr in any::<u64>(), rkey in any::<u32>(), mtu_i in 0usize..5, dc in any::<bool>()) {
            let e = RdmaEndpoint { lid, rc_capable: true, dc_capable: dc, full_member: true, dc_target: dc, qp_num: qp, psn, gid, gid_index: 1, subnet_prefix: 0xfe80 << 48, mtu: [256, 512, 1024, 2048, 4096][mtu_i], pkey_index: 0, arena_addr: addr, arena_rkey: rkey };
            let bytes = e.encode();
            prop_assert_eq!(bytes.len(), RdmaEndpoint::LEN);
            prop_assert_eq!(RdmaEndpoint::decode(&bytes), Ok(e));
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = RdmaEndpoint::decode(&data);
        }
    }

    #[test]
    fn an_older_peer_without_a_lid_decodes_as_none() {
        let e = RdmaEndpoint {
            lid: None,
            mtu: 1024,
            ..Default::default()
        };
        assert_eq!(RdmaEndpoint::decode(&e.encode()).unwrap().lid, None);
        let mut bad = e.encode();
        bad[40..44].copy_from_slice(&1000u32.to_le_bytes());
        assert!(
            RdmaEndpoint::decode(&bad)
                .unwrap_err()
                .to_string()
                .contains("1000")
        );
    }
}
