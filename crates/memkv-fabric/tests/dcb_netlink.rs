//! A real rtnetlink dcbnl query on this machine. Loopback has no DCB operations, so the kernel
//! answers "not supported" (EOPNOTSUPP, whether or not the kernel has CONFIG_DCB) and memkv
//! falls back to best effort.

use memkv_fabric::dcb::{DcbDetection, DcbReply, DcbSource, NetlinkDcb, query_ieee_dcb};

#[test]
fn loopback_has_no_dcb_and_yields_best_effort() {
    assert_eq!(
        query_ieee_dcb("lo"),
        Ok(DcbReply::KernelError(libc_eopnotsupp()))
    );
    let detection = NetlinkDcb.detect("lo");
    assert_eq!(
        detection,
        DcbDetection::NotSupported {
            netdev: "lo".into()
        }
    );
    assert_eq!(
        detection.class(),
        None,
        "best effort: service level 0, traffic class 0"
    );
    assert!(detection.warning("lo").unwrap().contains("best effort"));
}

#[test]
fn invalid_interface_name_is_refused_before_any_query() {
    let d = NetlinkDcb.detect("not/a/netdev");
    assert!(matches!(d, DcbDetection::Failed { .. }), "{d:?}");
}

fn libc_eopnotsupp() -> i32 {
    95
}
