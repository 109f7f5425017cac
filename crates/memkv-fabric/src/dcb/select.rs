//! Chooses the lossless class (PFC priority + DSCP) from a netdev's DCB configuration.

use super::wire::IeeeDcb;
use serde::Serialize;

/// The NVIDIA convention the runbook uses: DSCP 26 on priority 3.
pub const PREFERRED_PRIORITY: u8 = 3;
pub const PREFERRED_DSCP: u8 = 26;

/// Result of DCB detection for one RoCE netdev.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DcbDetection {
    /// A PFC-enabled priority; `dscp` is the DSCP the app table maps to it, if any.
    Lossless { priority: u8, dscp: Option<u8> },
    /// The netdev supports DCB but no priority has PFC enabled.
    NoPfc,
    /// The netdev (or kernel) has no DCB support.
    NotSupported { netdev: String },
    /// The query failed for another reason (no such netdev, permission, malformed reply).
    Failed { reason: String },
}

impl DcbDetection {
    /// (service level, traffic class) this detection implies. Best effort is (0, 0).
    pub fn class(&self) -> Option<(u8, u8)> {
        match self {
            Self::Lossless { priority, dscp } => Some((*priority, dscp.map_or(0, |d| d << 2))),
            _ => None,
        }
    }

    /// A warning for the operator, when the result is not a complete lossless class.
    pub fn warning(&self, netdev: &str) -> Option<String> {
        match self {
            Self::Lossless {
                priority,
                dscp: None,
            } => Some(format!(
                "PFC is enabled on priority {priority} of {netdev} but no DSCP maps to it; \
                 traffic class left at 0, so packets reach the lossless class only if the \
                 netdev trusts PCP"
            )),
            Self::Lossless { .. } => None,
            Self::NoPfc => Some(format!(
                "no PFC priority is enabled on {netdev}; RoCE runs best effort (service_level 0, \
                 traffic_class 0) and will drop under incast"
            )),
            Self::NotSupported { netdev } => Some(format!(
                "{netdev} does not support DCB; RoCE runs best effort (service_level 0, \
                 traffic_class 0)"
            )),
            Self::Failed { reason } => Some(format!(
                "DCB detection on {netdev} failed ({reason}); RoCE runs best effort \
                 (service_level 0, traffic_class 0)"
            )),
        }
    }
}

/// Picks the lossless class: among PFC-enabled priorities prefer one a DSCP maps to, then
/// priority 3, then the lowest; within it prefer DSCP 26, then the lowest DSCP.
pub fn select_lossless_class(dcb: &IeeeDcb) -> DcbDetection {
    let enabled = dcb.pfc_enabled.unwrap_or(0);
    if enabled == 0 {
        return DcbDetection::NoPfc;
    }
    let dscp_for = |prio: u8| -> Option<u8> {
        let mut dscps: Vec<u8> = dcb
            .dscp_map()
            .filter(|(_, p)| *p == prio)
            .map(|(d, _)| d)
            .collect();
        dscps.sort_unstable();
        if dscps.contains(&PREFERRED_DSCP) {
            Some(PREFERRED_DSCP)
        } else {
            dscps.first().copied()
        }
    };
    let mut priorities: Vec<u8> = (0..8).filter(|p| enabled & (1 << p) != 0).collect();
    priorities.sort_by_key(|p| (dscp_for(*p).is_none(), *p != PREFERRED_PRIORITY, *p));
    let priority = priorities[0];
    DcbDetection::Lossless {
        priority,
        dscp: dscp_for(priority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcb::build;
    use crate::dcb::wire::{DcbReply, parse_dcb_reply};

    fn detect(pfc: Option<u8>, apps: &[(u8, u8)]) -> DcbDetection {
        let bytes = build::ieee_reply("eth0", pfc, apps);
        match parse_dcb_reply(&bytes).unwrap() {
            DcbReply::Ieee(dcb) => select_lossless_class(&dcb),
            DcbReply::KernelError(e) => panic!("errno {e}"),
        }
    }

    #[test]
    fn pfc_on_priority_3_with_dscp_26_gives_tc_104_sl_3() {
        let d = detect(Some(1 << 3), &[(26, 3)]);
        assert_eq!(d.class(), Some((3, 104)));
        assert_eq!(d.warning("eth0"), None);
    }

    #[test]
    fn pfc_on_another_priority_uses_its_dscp() {
        let d = detect(Some(1 << 5), &[(26, 3), (40, 5)]);
        assert_eq!(
            d,
            DcbDetection::Lossless {
                priority: 5,
                dscp: Some(40)
            }
        );
        assert_eq!(d.class(), Some((5, 160)));
    }

    #[test]
    fn no_pfc_is_best_effort_with_warning() {
        for d in [detect(Some(0), &[(26, 3)]), detect(None, &[])] {
            assert_eq!(d, DcbDetection::NoPfc);
            assert_eq!(d.class(), None);
            assert!(d.warning("eth0").unwrap().contains("best effort"));
        }
    }

    #[test]
    fn several_dscps_prefer_26_then_lowest() {
        let d = detect(Some(1 << 3), &[(30, 3), (26, 3), (24, 3), (46, 5)]);
        assert_eq!(d.class(), Some((3, 26 << 2)));
        let d = detect(Some(1 << 3), &[(30, 3), (28, 3)]);
        assert_eq!(d.class(), Some((3, 28 << 2)));
    }

    #[test]
    fn several_pfc_priorities_prefer_mapped_then_3() {
        let d = detect(Some((1 << 3) | (1 << 4)), &[(26, 3), (34, 4)]);
        assert_eq!(d.class(), Some((3, 104)));
        let d = detect(Some((1 << 3) | (1 << 4)), &[(34, 4)]);
        assert_eq!(d.class(), Some((4, 136)));
        let d = detect(Some((1 << 2) | (1 << 6)), &[]);
        assert_eq!(
            d,
            DcbDetection::Lossless {
                priority: 2,
                dscp: None
            }
        );
        assert!(d.warning("eth0").unwrap().contains("no DSCP maps"));
    }

    #[test]
    fn non_dscp_selectors_and_out_of_range_values_are_ignored() {
        let dcb = IeeeDcb {
            pfc_enabled: Some(1 << 3),
            apps: vec![
                crate::dcb::wire::DcbApp {
                    selector: 1,
                    priority: 3,
                    protocol: 0x8915,
                },
                crate::dcb::wire::DcbApp {
                    selector: 5,
                    priority: 3,
                    protocol: 99,
                },
            ],
        };
        assert_eq!(
            select_lossless_class(&dcb),
            DcbDetection::Lossless {
                priority: 3,
                dscp: None
            }
        );
    }
}
