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
