//! Per-peer addressing: from this port's plan and a peer's advertised endpoint to the fields
//! of `ibv_ah_attr` and the RTR transition, or a named refusal. Pure.

use crate::error::FabricError;
use crate::mtu::path_mtu;
use crate::policy::{PortPlan, no_usable_gid};
use crate::types::{Gid, LinkLayer, Membership, Mtu, PortState};
use serde::Serialize;

/// Hop limit for RoCEv2 GRHs: enough for any data-centre fabric.
pub const ROCE_HOP_LIMIT: u8 = 64;

/// What a peer advertises about its port (carried by the RDMA bootstrap message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PeerEndpoint {
    /// InfiniBand LID; None on RoCE, or from a peer that sends none.
    pub lid: Option<u16>,
    pub gid: Gid,
    /// The peer's own source GID index (it uses it; we only check it is plausible).
    pub gid_index: u32,
    pub subnet_prefix: u64,
    pub mtu: Mtu,
    pub pkey_membership: Membership,
}

/// RoCEv2 global routing header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GrhPlan {
    pub dgid: Gid,
    pub sgid_index: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// Everything the data plane needs for `ibv_ah_attr` and the RTR transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AddressPlan {
    pub port: u8,
    /// 0 on RoCE (the GRH carries the address).
    pub dest_lid: u16,
    pub service_level: u8,
    pub grh: Option<GrhPlan>,
    pub path_mtu: Mtu,
    pub pkey_index: u16,
}

/// Builds the address of `peer` as seen from this port. `local_lid` and `state` come from the
/// runtime cache (see [`crate::events::PortRuntime`]).
pub fn build_address(
    plan: &PortPlan,
    local_lid: Option<u16>,
    state: PortState,
    peer: &PeerEndpoint,
) -> Result<AddressPlan, FabricError> {
    plan.usable()?;
    let facts = &plan.facts;
    let pkey = plan.pkey.as_ref().map_err(Clone::clone)?;
    let mtu = plan.mtu.as_ref().map_err(Clone::clone)?;
    let ib = facts.link_layer == LinkLayer::InfiniBand;
    if ib && local_lid.filter(|l| *l != 0).is_none() {
        return Err(plan.no_lid());
    }
    if !state.is_active() {
        return Err(FabricError::PortNotActive {
            device: facts.device.clone(),
            port: facts.port,
            state,
        });
    }
    if pkey.membership == Membership::Limited && peer.pkey_membership == Membership::Limited {
        return Err(FabricError::BothLimitedMembers {
            pkey_index: pkey.index,
        });
    }
    let path_mtu = path_mtu(mtu.effective, peer.mtu);
    if ib {
        let dest_lid = peer
            .lid
            .filter(|l| *l != 0)
            .ok_or(FabricError::PeerSentNoLidOnInfiniband)?;
        let local = facts.subnet_prefix().unwrap_or_default();
        if local != peer.subnet_prefix {
            tracing::error!(
                device = %facts.device,
                port = facts.port,
                "refusing InfiniBand peer in another subnet: local prefix {local:#018x}, \
                 remote prefix {:#018x}",
                peer.subnet_prefix
            );
            return Err(FabricError::SubnetMismatch {
                local,
                remote: peer.subnet_prefix,
            });
        }
        return Ok(AddressPlan {
            port: facts.port,
            dest_lid,
            service_level: plan.service_level.value,
            grh: None,
            path_mtu,
            pkey_index: pkey.index,
        });
    }
    let Some(Ok(sgid)) = &plan.gid else {
        return Err(no_usable_gid(facts));
    };
    if peer.gid.is_zero() {
        return Err(FabricError::PeerSentNoGid);
    }
    Ok(AddressPlan {
        port: facts.port,
        dest_lid: 0,
        service_level: plan.service_level.value,
        grh: Some(GrhPlan {
            dgid: peer.gid,
            sgid_index: sgid.index,
            traffic_class: plan.traffic_class.map_or(0, |t| t.value),
            hop_limit: ROCE_HOP_LIMIT,
            flow_label: 0,
        }),
        path_mtu,
        pkey_index: pkey.index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FabricConfig;
    use crate::dcb::{DcbDetection, DcbSource};
    use crate::policy::plan_port;
    use crate::types::{GidType, test_port};
    use proptest::prelude::*;

    struct NoDcb;
    impl DcbSource for NoDcb {
        fn detect(&self, netdev: &str) -> DcbDetection {
            DcbDetection::NotSupported {
                netdev: netdev.to_owned(),
            }
        }
    }

    fn mtu() -> impl Strategy<Value = Mtu> {
        prop_oneof![
            Just(Mtu::Mtu256),
            Just(Mtu::Mtu512),
            Just(Mtu::Mtu1024),
            Just(Mtu::Mtu2048),
            Just(Mtu::Mtu4096)
        ]
    }

    fn peer() -> impl Strategy<Value = PeerEndpoint> {
        (
            proptest::option::of(any::<u16>()),
            any::<[u8; 16]>(),
            any::<u32>(),
            prop_oneof![Just(0xfe80_0000_0000_0000u64), any::<u64>()],
            mtu(),
            any::<bool>(),
        )
            .prop_map(
                |(lid, gid, gid_index, subnet_prefix, mtu, full)| PeerEndpoint {
                    lid,
                    gid: Gid(gid),
                    gid_index,
                    subnet_prefix,
                    mtu,
                    pkey_membership: if full {
                        Membership::Full
                    } else {
                        Membership::Limited
                    },
                },
            )
    }

    proptest! {
        /// Whatever a peer sends, addressing answers with a plan or a named error; a plan on
        /// InfiniBand uses the peer's LID and no GRH, on RoCE a GRH to the peer's GID, and
        /// the path MTU never exceeds either side.
        #[test]
        fn any_peer_gets_a_plan_or_a_named_error(p in peer(), ib in any::<bool>()) {
            let link = if ib { LinkLayer::InfiniBand } else { LinkLayer::Ethernet };
            let facts = test_port(
                link,
                &[(0, "fe80::1", GidType::InfiniBand), (1, "::ffff:10.0.0.1", GidType::RoceV2)],
                &[0xffff],
            );
            let plan = plan_port(facts, &FabricConfig::default(), &NoDcb);
            match build_address(&plan, Some(7), PortState::Active, &p) {
                Ok(a) => {
                    prop_assert!(a.path_mtu <= p.mtu && a.path_mtu <= Mtu::Mtu4096);
                    if ib {
                        prop_assert_eq!(Some(a.dest_lid), p.lid);
                        prop_assert!(a.grh.is_none());
                        prop_assert_eq!(p.subnet_prefix, 0xfe80_0000_0000_0000);
                    } else {
                        let grh = a.grh.unwrap();
                        prop_assert_eq!(grh.dgid, p.gid);
                        prop_assert_eq!(grh.sgid_index, 1);
                        prop_assert_eq!(grh.hop_limit, ROCE_HOP_LIMIT);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
