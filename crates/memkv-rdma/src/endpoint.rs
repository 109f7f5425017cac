//! Between the Connect payload ([`RdmaEndpoint`]) and the fabric's view of a peer
//! ([`PeerEndpoint`]). Pure.

use memkv_fabric::{Gid, Membership, Mtu, PeerEndpoint};
use memkv_proto::connect::RdmaEndpoint;

use crate::error::RdmaError;

/// What this side advertises: the fabric's endpoint of the port plus the queue pair's own
/// numbers and, on a server, the arena.
pub(crate) fn advertise(
    local: &PeerEndpoint,
    pkey_index: u16,
    qp_num: u32,
    psn: u32,
    arena: Option<(u64, u32)>,
) -> RdmaEndpoint {
    let (arena_addr, arena_rkey) = arena.unwrap_or((0, 0));
    RdmaEndpoint {
        lid: local.lid,
        rc_capable: true,
        // An RC pair's own endpoint; a client with a DCI pool sets this on its Connect, and a
        // server's DC target advertises itself (`dc::DcTarget::local_endpoint`).
        dc_capable: false,
        full_member: local.pkey_membership == Membership::Full,
        dc_target: false,
        qp_num,
        psn,
        gid: local.gid.0,
        gid_index: local.gid_index,
        subnet_prefix: local.subnet_prefix,
        mtu: local.mtu.bytes(),
        pkey_index,
        arena_addr,
        arena_rkey,
    }
}

/// The fabric's view of a peer that sent `peer`. Refuses endpoints this side cannot connect.
pub(crate) fn peer_endpoint(peer: &RdmaEndpoint) -> Result<PeerEndpoint, RdmaError> {
    if !peer.rc_capable {
        return Err(RdmaError::BadPeerEndpoint {
            reason: "the peer does not offer RC, the only transport this build implements".into(),
        });
    }
    if peer.qp_num & !0x00ff_ffff != 0 {
        return Err(RdmaError::BadPeerEndpoint {
            reason: format!("queue pair number {:#x} does not fit 24 bits", peer.qp_num),
        });
    }
    let mtu = Mtu::from_bytes(peer.mtu).ok_or_else(|| RdmaError::BadPeerEndpoint {
        reason: format!(
            "path MTU {} is not one of 256, 512, 1024, 2048, 4096",
            peer.mtu
        ),
    })?;
    Ok(PeerEndpoint {
        lid: peer.lid,
        gid: Gid(peer.gid),
        gid_index: peer.gid_index,
        subnet_prefix: peer.subnet_prefix,
        mtu,
        pkey_membership: if peer.full_member {
            Membership::Full
        } else {
            Membership::Limited
        },
    })
}

/// The name a peer's congestion window and metrics go by: its LID on InfiniBand (the GID is
/// not how it is addressed there), its GID otherwise.
pub(crate) fn peer_key(peer: &PeerEndpoint, infiniband: bool) -> String {
    match (infiniband, peer.lid) {
        (true, Some(lid)) => format!("lid:{lid}"),
        _ => peer.gid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roce_local() -> PeerEndpoint {
        PeerEndpoint {
            lid: None,
            gid: Gid::parse("::ffff:192.0.2.1").unwrap(),
            gid_index: 1,
            subnet_prefix: 0,
            mtu: Mtu::Mtu1024,
            pkey_membership: Membership::Full,
        }
    }

    #[test]
    fn advertised_endpoint_survives_the_wire_and_reads_back_as_the_same_peer() {
        let local = roce_local();
        let sent = advertise(&local, 0, 0x11, 0xabcdef, Some((0x7f00_0000_0000, 0x1234)));
        let received = RdmaEndpoint::decode(&sent.encode()).unwrap();
        assert_eq!(received, sent);
        assert_eq!(peer_endpoint(&received).unwrap(), local);
        assert_eq!(
            (
                received.arena_addr,
                received.arena_rkey,
                received.dc_capable
            ),
            (0x7f00_0000_0000, 0x1234, false)
        );
        assert_eq!(peer_key(&local, false), "::ffff:192.0.2.1");
    }

    #[test]
    fn unusable_peer_endpoints_are_named() {
        let good = advertise(&roce_local(), 0, 1, 1, None);
        let no_rc = RdmaEndpoint {
            rc_capable: false,
            ..good
        };
        assert!(
            peer_endpoint(&no_rc)
                .unwrap_err()
                .to_string()
                .contains("RC")
        );
        let big_qpn = RdmaEndpoint {
            qp_num: 1 << 24,
            ..good
        };
        assert!(
            peer_endpoint(&big_qpn)
                .unwrap_err()
                .to_string()
                .contains("24 bits")
        );
        let bad_mtu = RdmaEndpoint { mtu: 1500, ..good };
        assert!(
            peer_endpoint(&bad_mtu)
                .unwrap_err()
                .to_string()
                .contains("1500")
        );
        let limited = RdmaEndpoint {
            full_member: false,
            lid: Some(9),
            ..good
        };
        let p = peer_endpoint(&limited).unwrap();
        assert_eq!(p.pkey_membership, Membership::Limited);
        assert_eq!(peer_key(&p, true), "lid:9");
    }
}
