//! Addressing policy on fixture trees (TEST DOUBLES): every refusal produces its named error.

mod common;

use common::plan;
use memkv_fabric::policy::{PeerEndpoint, ROCE_HOP_LIMIT, build_address};
use memkv_fabric::types::{Gid, Membership, Mtu, PortState};
use memkv_fabric::{FabricConfig, FabricError};

fn cfg() -> FabricConfig {
    FabricConfig::default()
}

fn with_pkey(index: u16) -> FabricConfig {
    FabricConfig {
        pkey_index: Some(index),
        ..Default::default()
    }
}

/// The endpoint an InfiniBand fixture port advertises (its LID from sysfs).
fn ib_endpoint(tree: &str, device: &str, c: &FabricConfig) -> PeerEndpoint {
    let p = plan(tree, device, c);
    p.local_endpoint(p.facts.lid).unwrap()
}

#[test]
fn infiniband_addresses_by_lid_without_grh() {
    let local = plan("ib-lid", "mlx5_0", &cfg());
    let peer = PeerEndpoint {
        lid: Some(0x22),
        mtu: Mtu::Mtu2048,
        ..ib_endpoint("ib-lid", "mlx5_0", &cfg())
    };
    let a = build_address(&local, local.facts.lid, PortState::Active, &peer).unwrap();
    assert_eq!(a.dest_lid, 0x22);
    assert_eq!(a.grh, None);
    assert_eq!(a.service_level, 0);
    assert_eq!(a.path_mtu, Mtu::Mtu2048, "path MTU is the smaller side");
    assert_eq!(a.pkey_index, 0);
}

#[test]
fn infiniband_uses_configured_service_level_and_ignores_roce_knobs() {
    let c = FabricConfig {
        service_level: Some(2),
        traffic_class: Some(104),
        gid_index: Some(3),
        ..Default::default()
    };
    let local = plan("ib-lid", "mlx5_0", &c);
    let peer = ib_endpoint("ib-lid", "mlx5_0", &c);
    let a = build_address(&local, local.facts.lid, PortState::Active, &peer).unwrap();
    assert_eq!((a.service_level, a.grh), (2, None));
}

#[test]
fn no_lid_fails_at_once_naming_device_and_port() {
    let local = plan("ib-no-lid", "mlx5_0", &cfg());
    let peer = ib_endpoint("ib-lid", "mlx5_0", &cfg());
    let err = build_address(&local, None, PortState::Init, &peer).unwrap_err();
    assert_eq!(
        err,
        FabricError::NoLid {
            device: "mlx5_0".into(),
            port: 1
        }
    );
    assert!(
        err.to_string()
            .contains("subnet manager has not assigned a LID to mlx5_0 port 1")
    );
    assert_eq!(local.local_endpoint(None).unwrap_err(), err);
}

#[test]
fn peer_without_lid_on_infiniband_is_refused() {
    let local = plan("ib-lid", "mlx5_0", &cfg());
    let peer = PeerEndpoint {
        lid: None,
        ..ib_endpoint("ib-lid", "mlx5_0", &cfg())
    };
    assert_eq!(
        build_address(&local, local.facts.lid, PortState::Active, &peer),
        Err(FabricError::PeerSentNoLidOnInfiniband)
    );
}

#[test]
fn different_subnets_are_refused_naming_both_prefixes() {
    let local = plan("ib-two-subnets", "mlx5_0", &cfg());
    let peer = ib_endpoint("ib-two-subnets", "mlx5_1", &cfg());
    let err = build_address(&local, local.facts.lid, PortState::Active, &peer).unwrap_err();
    assert_eq!(
        err,
        FabricError::SubnetMismatch {
            local: 0xfe80_0000_0000_0000,
            remote: 0xfec0_0000_0000_0001
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("0xfe80000000000000") && text.contains("0xfec0000000000001"),
        "{text}"
    );
}

#[test]
fn two_limited_members_cannot_talk_but_limited_and_full_can() {
    let limited = plan("ib-pkeys", "mlx5_0", &with_pkey(2));
    let limited_peer = ib_endpoint("ib-pkeys", "mlx5_0", &with_pkey(2));
    assert_eq!(limited_peer.pkey_membership, Membership::Limited);
    assert_eq!(
        build_address(
            &limited,
            limited.facts.lid,
            PortState::Active,
            &limited_peer
        ),
        Err(FabricError::BothLimitedMembers { pkey_index: 2 })
    );
    let full_peer = ib_endpoint("ib-pkeys", "mlx5_0", &with_pkey(1));
    assert_eq!(full_peer.pkey_membership, Membership::Full);
    let a = build_address(&limited, limited.facts.lid, PortState::Active, &full_peer).unwrap();
    assert_eq!(a.pkey_index, 2);
}

#[test]
fn empty_pkey_entry_refuses_rdma_on_the_port() {
    let p = plan("ib-pkeys", "mlx5_0", &with_pkey(3));
    let expected = FabricError::PkeyEntryEmpty {
        index: 3,
        device: "mlx5_0".into(),
        port: 1,
    };
    assert_eq!(p.usable(), Err(expected.clone()));
    let peer = ib_endpoint("ib-pkeys", "mlx5_0", &cfg());
    assert_eq!(
        build_address(&p, p.facts.lid, PortState::Active, &peer),
        Err(expected)
    );
}

#[test]
fn pkey_index_past_the_table_refuses_rdma_on_the_port() {
    let p = plan("ib-pkeys", "mlx5_0", &with_pkey(4));
    assert_eq!(
        p.usable(),
        Err(FabricError::PkeyIndexOutOfRange {
            index: 4,
            len: 4,
            device: "mlx5_0".into(),
            port: 1
        })
    );
    let rxe = plan("rxe-mtu1024", "rxe0", &with_pkey(1));
    assert!(matches!(
        rxe.usable(),
        Err(FabricError::PkeyIndexOutOfRange {
            index: 1,
            len: 1,
            ..
        })
    ));
}

#[test]
fn mtu_above_active_refuses_naming_both_values() {
    let c = FabricConfig {
        mtu: Some(Mtu::Mtu4096),
        ..Default::default()
    };
    let p = plan("rxe-mtu1024", "rxe0", &c);
    let err = p.usable().unwrap_err();
    assert_eq!(
        err,
        FabricError::MtuAboveActive {
            configured: Mtu::Mtu4096,
            active: Mtu::Mtu1024
        }
    );
    assert!(err.to_string().contains("4096") && err.to_string().contains("1024"));
    let ok = plan(
        "rxe-mtu1024",
        "rxe0",
        &FabricConfig {
            mtu: Some(Mtu::Mtu512),
            ..cfg()
        },
    );
    assert_eq!(ok.mtu.as_ref().unwrap().effective, Mtu::Mtu512);
}

#[test]
fn roce_addresses_by_gid_with_grh_and_detected_class() {
    let local = plan("roce-mixed", "mlx5_2", &cfg());
    let peer = plan("rxe-mtu1024", "rxe0", &cfg())
        .local_endpoint(None)
        .unwrap();
    let a = build_address(&local, None, PortState::Active, &peer).unwrap();
    let grh = a.grh.expect("RoCE needs a GRH");
    assert_eq!(grh.dgid, Gid::parse("::ffff:192.0.2.1").unwrap());
    assert_eq!(grh.sgid_index, 3);
    assert_eq!(grh.traffic_class, 26 << 2);
    assert_eq!(grh.hop_limit, ROCE_HOP_LIMIT);
    assert_eq!((a.dest_lid, a.service_level), (0, 3));
    assert_eq!(
        a.path_mtu,
        Mtu::Mtu1024,
        "min of 4096 and the rxe peer's 1024"
    );
}

#[test]
fn roce_peer_without_gid_is_refused() {
    let local = plan("roce-mixed", "mlx5_2", &cfg());
    let peer = PeerEndpoint {
        gid: Gid::default(),
        ..plan("rxe-mtu1024", "rxe0", &cfg())
            .local_endpoint(None)
            .unwrap()
    };
    assert_eq!(
        build_address(&local, None, PortState::Active, &peer),
        Err(FabricError::PeerSentNoGid)
    );
}

#[test]
fn inactive_port_is_refused() {
    let local = plan("ib-lid", "mlx5_0", &cfg());
    let peer = ib_endpoint("ib-lid", "mlx5_0", &cfg());
    assert_eq!(
        build_address(&local, local.facts.lid, PortState::Down, &peer),
        Err(FabricError::PortNotActive {
            device: "mlx5_0".into(),
            port: 1,
            state: PortState::Down
        })
    );
}

#[test]
fn gid_choice_prefers_v2_ipv4_then_ipv6_and_refuses_link_local_only() {
    assert_eq!(
        plan("roce-mixed", "mlx5_2", &cfg())
            .gid
            .unwrap()
            .unwrap()
            .index,
        3
    );
    let v6 = plan("roce-mixed", "mlx5_3", &cfg()).gid.unwrap().unwrap();
    assert_eq!(v6.index, 3);
    assert!(v6.reason.contains("IPv6"));
    assert_eq!(
        plan("roce-mixed", "mlx5_4", &cfg()).usable(),
        Err(FabricError::NoUsableGid {
            device: "mlx5_4".into(),
            port: 1
        })
    );
}

#[test]
fn configured_gid_index_must_be_populated_and_overrides_choice() {
    let c = FabricConfig {
        gid_index: Some(7),
        ..Default::default()
    };
    assert_eq!(
        plan("roce-mixed", "mlx5_2", &c).usable(),
        Err(FabricError::GidIndexNotPopulated {
            index: 7,
            device: "mlx5_2".into(),
            port: 1
        })
    );
    let link_local = FabricConfig {
        gid_index: Some(1),
        ..Default::default()
    };
    let p = plan("roce-mixed", "mlx5_4", &link_local);
    assert!(
        p.usable().is_ok(),
        "explicit gid_index overrides the default refusal"
    );
    assert!(p.warnings.iter().any(|w| w.contains("link-local")));
}

#[test]
fn explicit_roce_values_override_detection_and_report_sources() {
    use memkv_fabric::ValueSource;
    let c = FabricConfig {
        traffic_class: Some(40),
        ..Default::default()
    };
    let p = plan("roce-mixed", "mlx5_2", &c);
    assert_eq!(p.service_level.value, 3);
    assert_eq!(p.service_level.source, ValueSource::Detected);
    let tc = p.traffic_class.unwrap();
    assert_eq!((tc.value, tc.source), (40, ValueSource::Config));
    let best_effort = plan("roce-mixed", "mlx5_3", &cfg());
    assert_eq!(best_effort.service_level.source, ValueSource::Default);
    assert_eq!(best_effort.traffic_class.unwrap().value, 0);
}

#[test]
fn invalid_service_level_refuses_with_the_limit() {
    let c = FabricConfig {
        service_level: Some(16),
        ..Default::default()
    };
    let err = plan("ib-lid", "mlx5_0", &c).usable().unwrap_err();
    assert!(matches!(
        err,
        FabricError::InvalidSetting {
            key: "service_level",
            ..
        }
    ));
}
