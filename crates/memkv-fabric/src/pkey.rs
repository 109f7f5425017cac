//! Partition (P_Key) resolution.

use crate::config::ValueSource;
use crate::error::FabricError;
use crate::types::{Membership, PortFacts};
use serde::Serialize;

/// The partition a port's queue pairs join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PkeyChoice {
    pub index: u16,
    pub pkey: u16,
    pub membership: Membership,
    pub source: ValueSource,
}

/// Reads entry `pkey_index` (default 0) of the port's P_Key table. An entry with no partition
/// bits (0x0000, or 0x8000 which the IBTA also reserves as invalid) or an index past the table's
/// end refuses RDMA on the port: queue pairs there would send into a partition that discards
/// every packet with no error at the sender.
pub fn resolve_pkey(facts: &PortFacts, configured: Option<u16>) -> Result<PkeyChoice, FabricError> {
    let (index, source) = match configured {
        Some(i) => (i, ValueSource::Config),
        None => (0, ValueSource::Default),
    };
    let pkey =
        *facts
            .pkeys
            .get(usize::from(index))
            .ok_or_else(|| FabricError::PkeyIndexOutOfRange {
                index,
                len: facts.pkeys.len(),
                device: facts.device.clone(),
                port: facts.port,
            })?;
    if pkey & 0x7fff == 0 {
        return Err(FabricError::PkeyEntryEmpty {
            index,
            device: facts.device.clone(),
            port: facts.port,
        });
    }
    Ok(PkeyChoice {
        index,
        pkey,
        membership: Membership::of_pkey(pkey),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LinkLayer, test_port};

    #[test]
    fn entries_resolve_to_membership_or_named_refusals() {
        let f = test_port(
            LinkLayer::InfiniBand,
            &[],
            &[0xffff, 0x0002, 0x0000, 0x8000],
        );
        let default = resolve_pkey(&f, None).unwrap();
        assert_eq!(
            (default.index, default.membership, default.source),
            (0, Membership::Full, ValueSource::Default)
        );
        assert_eq!(
            resolve_pkey(&f, Some(1)).unwrap().membership,
            Membership::Limited
        );
        for empty in [2, 3] {
            assert!(matches!(
                resolve_pkey(&f, Some(empty)),
                Err(FabricError::PkeyEntryEmpty { index, .. }) if index == empty
            ));
        }
        assert!(matches!(
            resolve_pkey(&f, Some(4)),
            Err(FabricError::PkeyIndexOutOfRange {
                index: 4,
                len: 4,
                ..
            })
        ));
        let no_table = test_port(LinkLayer::Ethernet, &[], &[]);
        assert!(matches!(
            resolve_pkey(&no_table, None),
            Err(FabricError::PkeyIndexOutOfRange {
                index: 0,
                len: 0,
                ..
            })
        ));
    }
}
