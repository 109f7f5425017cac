//! Which queue pair transport a connection uses: DC when this side and the peer both can and
//! configuration allows it, RC otherwise. Pure; both ends of a Connect run it on the same
//! inputs and so agree.

use std::fmt;

use crate::dc::capability::DcSupport;

/// The transport a connection's one-sided operations go over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Dynamically Connected (mlx5): a [`crate::DciPool`] towards the peer's [`crate::DcTarget`].
    Dc,
    /// Reliable Connected: an [`crate::RcQueuePair`] per connection.
    Rc,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dc => "DC",
            Self::Rc => "RC",
        })
    }
}

/// What configuration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportPreference {
    /// DC where both sides can do it, RC otherwise.
    #[default]
    Auto,
    /// Always RC, even between two DC-capable sides.
    RcOnly,
}

/// The transport chosen and why, for the one log line (and `memkv net verify`) that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportDecision {
    pub transport: Transport,
    pub reason: String,
}

impl fmt::Display for TransportDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.transport, self.reason)
    }
}

/// Chooses DC or RC for one connection. `local` is this side's [`DcSupport`] (for a server:
/// whether it runs a DC target; for a client: whether its DCI pool exists), `peer_dc_capable`
/// the `dc_capable` flag of the peer's Connect endpoint.
pub fn choose_transport(
    local: &DcSupport,
    peer_dc_capable: bool,
    preference: TransportPreference,
) -> TransportDecision {
    let rc = |reason: String| TransportDecision {
        transport: Transport::Rc,
        reason,
    };
    if preference == TransportPreference::RcOnly {
        return rc("configuration asks for RC only".into());
    }
    match (local, peer_dc_capable) {
        (DcSupport::Supported(_), true) => TransportDecision {
            transport: Transport::Dc,
            reason: "both sides support DC".into(),
        },
        (DcSupport::Supported(_), false) => rc("the peer does not offer DC".into()),
        (DcSupport::Unsupported(why), true) => rc(format!("this side cannot do DC: {why}")),
        (DcSupport::Unsupported(why), false) => {
            rc(format!("neither side offers DC (this side: {why})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dc::capability::DcCaps;
    use crate::dc::unavailable::DcUnavailable;

    fn supported() -> DcSupport {
        DcSupport::Supported(DcCaps {
            max_dc_rd_atom: 16,
            max_dc_init_rd_atom: 16,
            probed: false,
        })
    }

    fn not_mlx5() -> DcSupport {
        DcSupport::Unsupported(DcUnavailable::NotMlx5 {
            device: "rxe0".into(),
            driver: Some("rdma_rxe".into()),
        })
    }

    #[test]
    fn dc_only_when_both_sides_can_and_configuration_allows() {
        use Transport::{Dc, Rc};
        use TransportPreference::{Auto, RcOnly};
        let cases = [
            (supported(), true, Auto, Dc),
            (supported(), false, Auto, Rc),
            (not_mlx5(), true, Auto, Rc),
            (not_mlx5(), false, Auto, Rc),
            (supported(), true, RcOnly, Rc),
            (not_mlx5(), true, RcOnly, Rc),
        ];
        for (local, peer, preference, expected) in cases {
            let d = choose_transport(&local, peer, preference);
            assert_eq!(
                d.transport, expected,
                "{local:?} peer={peer} {preference:?}"
            );
            assert!(!d.reason.is_empty());
        }
    }

    #[test]
    fn every_rc_decision_names_its_reason() {
        let d = choose_transport(&not_mlx5(), true, TransportPreference::Auto);
        assert_eq!(
            d.to_string(),
            "RC (this side cannot do DC: device rxe0 is not an mlx5 device (driver rdma_rxe))"
        );
        let d = choose_transport(&supported(), false, TransportPreference::Auto);
        assert!(d.reason.contains("peer does not offer DC"), "{d}");
        let d = choose_transport(&supported(), true, TransportPreference::RcOnly);
        assert!(d.reason.contains("RC only"), "{d}");
        let d = choose_transport(&supported(), true, TransportPreference::Auto);
        assert_eq!(d.to_string(), "DC (both sides support DC)");
    }
}
