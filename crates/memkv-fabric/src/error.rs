//! Named errors: each says what is wrong with the fabric, not just that something failed.

use crate::types::{Mtu, PortState};
use thiserror::Error;

/// Why memkv refuses to address a peer, or to use a port, over RDMA.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FabricError {
    #[error(
        "the subnet manager has not assigned a LID to {device} port {port}; \
         check that an SM is running (sminfo)"
    )]
    NoLid { device: String, port: u8 },

    #[error(
        "the peer sent no LID but this port is InfiniBand, which addresses peers by LID; \
         the peer may run an older memkv release or have no LID yet"
    )]
    PeerSentNoLidOnInfiniband,

    #[error(
        "peer is in another InfiniBand subnet (local prefix {local:#018x}, remote prefix \
         {remote:#018x}); memkv addresses by LID and needs every node in one subnet"
    )]
    SubnetMismatch { local: u64, remote: u64 },

    #[error(
        "both ends are limited members of the partition (pkey_index {pkey_index}); \
         two limited members cannot talk to each other"
    )]
    BothLimitedMembers { pkey_index: u16 },

    #[error(
        "P_Key table entry {index} of {device} port {port} is empty (0x0000): this node is \
         not a member of that partition; refusing RDMA on this port"
    )]
    PkeyEntryEmpty {
        index: u16,
        device: String,
        port: u8,
    },

    #[error(
        "pkey_index {index} is past the end of the P_Key table of {device} port {port} \
         (table length {len}); refusing RDMA on this port"
    )]
    PkeyIndexOutOfRange {
        index: u16,
        len: usize,
        device: String,
        port: u8,
    },

    #[error(
        "configured mtu {configured} exceeds the active MTU {active} of this port; \
         set mtu to {active} or lower"
    )]
    MtuAboveActive { configured: Mtu, active: Mtu },

    #[error("{device} port {port} is {state}, not ACTIVE")]
    PortNotActive {
        device: String,
        port: u8,
        state: PortState,
    },

    #[error("gid_index {index} is not a populated entry of the GID table of {device} port {port}")]
    GidIndexNotPopulated {
        index: u32,
        device: String,
        port: u8,
    },

    #[error(
        "{device} port {port} has no RoCE v2 GID for an address of its netdev; \
         assign an IP address to the netdev or set rdma.gid_index"
    )]
    NoUsableGid { device: String, port: u8 },

    #[error("the peer sent no GID but this port is RoCE, which addresses peers by GID")]
    PeerSentNoGid,

    #[error("active MTU of {device} port {port} is unknown: {reason}")]
    ActiveMtuUnknown {
        device: String,
        port: u8,
        reason: String,
    },

    #[error("invalid fabric setting {key} = {value}: {limit}")]
    InvalidSetting {
        key: &'static str,
        value: String,
        limit: &'static str,
    },

    #[error("cannot read {path}: {reason}")]
    Sysfs { path: String, reason: String },

    #[error("verbs call {call} failed on {device}: {reason}")]
    Verbs {
        call: &'static str,
        device: String,
        reason: String,
    },

    #[error("no RDMA port {device} port {port}")]
    UnknownPort { device: String, port: u8 },

    #[error("no usable RDMA port on {device}: {reason}")]
    NoRdmaPort { device: String, reason: String },
}
