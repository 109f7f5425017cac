//! Path MTU policy.

use crate::config::ValueSource;
use crate::error::FabricError;
use crate::types::{Mtu, PortFacts};
use serde::Serialize;

/// The MTU a port uses, before meeting a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MtuChoice {
    pub active: Mtu,
    /// What configuration asked for (None: the default, 4096, capped at the active MTU).
    pub configured: Option<Mtu>,
    /// What this side offers: the configured value, or min(4096, active).
    pub effective: Mtu,
    pub source: ValueSource,
}

/// An explicit `mtu` above the port's negotiated active MTU refuses RDMA on the port. Without
/// one, memkv uses the default 4096 capped at the active MTU, so a Soft-RoCE port on a
/// 1500-byte netdev (active 1024) works without configuration.
pub fn resolve_mtu(facts: &PortFacts, configured: Option<Mtu>) -> Result<MtuChoice, FabricError> {
    let active = facts
        .active_mtu
        .ok_or_else(|| FabricError::ActiveMtuUnknown {
            device: facts.device.clone(),
            port: facts.port,
            reason: facts
                .verbs_error
                .clone()
                .unwrap_or_else(|| "no verbs port query was made".into()),
        })?;
    match configured {
        Some(c) if c > active => Err(FabricError::MtuAboveActive {
            configured: c,
            active,
        }),
        Some(c) => Ok(MtuChoice {
            active,
            configured,
            effective: c,
            source: ValueSource::Config,
        }),
        None => Ok(MtuChoice {
            active,
            configured: None,
            effective: Mtu::DEFAULT.min(active),
            source: ValueSource::Default,
        }),
    }
}

/// Path MTU with a peer: the smaller of both sides' offers.
pub fn path_mtu(local: Mtu, remote: Mtu) -> Mtu {
    local.min(remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LinkLayer, test_port};

    #[test]
    fn default_is_4096_capped_at_active_and_explicit_above_active_refuses() {
        let mut f = test_port(LinkLayer::Ethernet, &[], &[0xffff]);
        f.active_mtu = Some(Mtu::Mtu1024);
        let d = resolve_mtu(&f, None).unwrap();
        assert_eq!(
            (d.effective, d.source),
            (Mtu::Mtu1024, ValueSource::Default)
        );
        assert_eq!(
            resolve_mtu(&f, Some(Mtu::Mtu2048)),
            Err(FabricError::MtuAboveActive {
                configured: Mtu::Mtu2048,
                active: Mtu::Mtu1024
            })
        );
        assert_eq!(
            resolve_mtu(&f, Some(Mtu::Mtu1024)).unwrap().effective,
            Mtu::Mtu1024
        );
        f.active_mtu = None;
        f.verbs_error = Some("ibv_open_device: permission denied".into());
        let e = resolve_mtu(&f, None).unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
    }

    #[test]
    fn path_mtu_is_the_smaller_side() {
        assert_eq!(path_mtu(Mtu::Mtu4096, Mtu::Mtu1024), Mtu::Mtu1024);
        assert_eq!(path_mtu(Mtu::Mtu512, Mtu::Mtu2048), Mtu::Mtu512);
    }
}
