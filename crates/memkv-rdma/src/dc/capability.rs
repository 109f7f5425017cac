//! Whether an opened device can run Dynamically Connected transport, and if not, why.
//!
//! Only mlx5 devices can (through mlx5dv), and mlx5dv must never be handed another provider's
//! context (older rdma-core releases do not check), so the driver is checked first. Then
//! `mlx5dv_query_device` says how many DC RDMA READs the device allows; a library too old to
//! report that is answered by creating (and destroying) one DC initiator.

use std::fmt;

use crate::dc::unavailable::DcUnavailable;
use crate::dc::verbs::{self, Mlx5DcAttrs};
use crate::device::RdmaDevice;
use crate::error::RdmaError;

/// What a DC-capable device offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcCaps {
    /// RDMA READs a DC target answers at once (clamped to 1..=16).
    pub max_dc_rd_atom: u8,
    /// RDMA READs a DC initiator may have outstanding (clamped to 1..=16).
    pub max_dc_init_rd_atom: u8,
    /// True when the library did not report DC resources and a probe DCI was created instead.
    pub probed: bool,
}

/// The answer of [`RdmaDevice::dc_support`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DcSupport {
    Supported(DcCaps),
    Unsupported(DcUnavailable),
}

impl DcSupport {
    pub fn is_supported(&self) -> bool {
        matches!(self, Self::Supported(_))
    }
}

impl fmt::Display for DcSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Supported(caps) => write!(
                f,
                "DC supported (max_dc_rd_atom {}, max_dc_init_rd_atom {}{})",
                caps.max_dc_rd_atom,
                caps.max_dc_init_rd_atom,
                if caps.probed { ", probed" } else { "" }
            ),
            Self::Unsupported(why) => write!(f, "DC unsupported: {why}"),
        }
    }
}

/// What the mlx5dv query says, before any probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Decided(DcSupport),
    /// mlx5 device, query fine, DC resources not reported: try creating a DCI.
    Probe {
        fallback_rd_atom: u8,
    },
}

/// Interprets the device facts and the result of `mlx5dv_query_device`. Pure.
/// `query` is only consulted for mlx5 devices.
pub(crate) fn interpret(
    device: &str,
    driver: Option<&str>,
    is_mlx5: bool,
    query: impl FnOnce() -> Result<Mlx5DcAttrs, i32>,
    rc_rd_atom: u8,
) -> Verdict {
    if !is_mlx5 {
        return Verdict::Decided(DcSupport::Unsupported(DcUnavailable::NotMlx5 {
            device: device.to_owned(),
            driver: driver.map(str::to_owned),
        }));
    }
    let attrs = match query() {
        Ok(attrs) => attrs,
        Err(errno) => {
            return Verdict::Decided(DcSupport::Unsupported(DcUnavailable::QueryFailed {
                device: device.to_owned(),
                errno,
            }));
        }
    };
    let clamp = |v: u64| v.clamp(1, 16) as u8;
    match (attrs.max_dc_rd_atom, attrs.max_dc_init_rd_atom) {
        (Some(0), _) => Verdict::Decided(DcSupport::Unsupported(DcUnavailable::NoDcResources {
            device: device.to_owned(),
        })),
        (Some(rd), init) => Verdict::Decided(DcSupport::Supported(DcCaps {
            max_dc_rd_atom: clamp(rd),
            max_dc_init_rd_atom: clamp(init.filter(|v| *v > 0).unwrap_or(rd)),
            probed: false,
        })),
        (None, _) => Verdict::Probe {
            fallback_rd_atom: rc_rd_atom.max(1),
        },
    }
}

impl RdmaDevice {
    /// Whether this device can run DC ([`crate::DcTarget`], [`crate::DciPool`]), and if not
    /// the named reason, e.g. "device rxe0 is not an mlx5 device (driver rdma_rxe)".
    pub fn dc_support(&self) -> DcSupport {
        let info = &self.plan().facts.device_info;
        let verdict = interpret(
            self.name(),
            info.driver.as_deref(),
            info.is_mlx5(self.name()),
            || verbs::query_dc_attrs(self),
            self.limits().max_rd_atomic,
        );
        match verdict {
            Verdict::Decided(support) => support,
            Verdict::Probe { fallback_rd_atom } => match verbs::probe_dci(self) {
                Ok(()) => DcSupport::Supported(DcCaps {
                    max_dc_rd_atom: fallback_rd_atom,
                    max_dc_init_rd_atom: fallback_rd_atom,
                    probed: true,
                }),
                Err(errno) => DcSupport::Unsupported(DcUnavailable::ProbeFailed {
                    device: self.name().to_owned(),
                    errno,
                }),
            },
        }
    }
}

/// The device's DC resources, or [`RdmaError::DcUnavailable`] with the reason.
pub(crate) fn require_dc(device: &RdmaDevice) -> Result<DcCaps, RdmaError> {
    match device.dc_support() {
        DcSupport::Supported(caps) => Ok(caps),
        DcSupport::Unsupported(why) => Err(RdmaError::DcUnavailable(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(rd: Option<u64>, init: Option<u64>) -> Result<Mlx5DcAttrs, i32> {
        Ok(Mlx5DcAttrs {
            max_dc_rd_atom: rd,
            max_dc_init_rd_atom: init,
        })
    }

    #[test]
    fn non_mlx5_devices_are_refused_by_name_without_touching_mlx5dv() {
        let v = interpret(
            "rxe0",
            Some("rdma_rxe"),
            false,
            || panic!("mlx5dv must not see a non-mlx5 context"),
            16,
        );
        let Verdict::Decided(DcSupport::Unsupported(why)) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            why.to_string(),
            "device rxe0 is not an mlx5 device (driver rdma_rxe)"
        );
        let v = interpret("siw0", None, false, || attrs(None, None), 16);
        assert_eq!(
            v,
            Verdict::Decided(DcSupport::Unsupported(DcUnavailable::NotMlx5 {
                device: "siw0".into(),
                driver: None
            }))
        );
    }

    #[test]
    fn mlx5_answers_map_to_support_refusal_or_probe() {
        let v = interpret(
            "mlx5_0",
            Some("mlx5_core"),
            true,
            || attrs(Some(64), Some(4)),
            16,
        );
        assert_eq!(
            v,
            Verdict::Decided(DcSupport::Supported(DcCaps {
                max_dc_rd_atom: 16,
                max_dc_init_rd_atom: 4,
                probed: false
            }))
        );
        let v = interpret("mlx5_0", None, true, || attrs(Some(8), None), 16);
        let Verdict::Decided(DcSupport::Supported(caps)) = v else {
            panic!("{v:?}")
        };
        assert_eq!((caps.max_dc_rd_atom, caps.max_dc_init_rd_atom), (8, 8));
        let v = interpret("mlx5_1", None, true, || attrs(Some(0), Some(4)), 16);
        let Verdict::Decided(DcSupport::Unsupported(why)) = v else {
            panic!("{v:?}")
        };
        assert!(why.to_string().contains("mlx5_1 reports no DC"), "{why}");
        let v = interpret("mlx5_0", None, true, || Err(95), 16);
        let Verdict::Decided(DcSupport::Unsupported(why)) = v else {
            panic!("{v:?}")
        };
        assert!(
            why.to_string()
                .starts_with("mlx5dv_query_device failed on mlx5_0")
        );
        assert!(why.to_string().ends_with("(errno 95)"), "{why}");
        assert_eq!(
            interpret("mlx5_0", None, true, || attrs(None, Some(4)), 0),
            Verdict::Probe {
                fallback_rd_atom: 1
            }
        );
    }

    #[test]
    fn support_displays_its_numbers_or_its_reason() {
        let s = DcSupport::Supported(DcCaps {
            max_dc_rd_atom: 16,
            max_dc_init_rd_atom: 16,
            probed: true,
        });
        assert!(s.is_supported());
        assert_eq!(
            s.to_string(),
            "DC supported (max_dc_rd_atom 16, max_dc_init_rd_atom 16, probed)"
        );
        let s = DcSupport::Unsupported(DcUnavailable::ProbeFailed {
            device: "mlx5_2".into(),
            errno: 22,
        });
        assert!(!s.is_supported());
        assert!(
            s.to_string().contains("creating a DC initiator on mlx5_2"),
            "{s}"
        );
    }
}
