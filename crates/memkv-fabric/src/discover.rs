//! Discovery: which RDMA ports exist and what they look like, merging sysfs with verbs.

use crate::error::FabricError;
use crate::sysfs::SysfsReader;
use crate::types::{Mtu, PortFacts, PortState};

/// Facts only a verbs port query gives (sysfs lacks active MTU on many kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsPortAttrs {
    pub active_mtu: Mtu,
    pub max_mtu: Mtu,
    pub state: PortState,
    pub lid: Option<u16>,
}

/// Devices verbs can see, or why it sees none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceListing {
    Devices(Vec<String>),
    /// No RDMA here at all (kernel without RDMA: ENOSYS; libibverbs missing); not an error.
    Unavailable(String),
}

/// Questions answered by verbs. Implemented by [`crate::verbs::VerbsReader`] and, for tests, by
/// the fixture-backed test double [`crate::doubles::FixtureVerbs`].
pub trait PortQuery {
    fn device_list(&self) -> Result<DeviceListing, FabricError>;
    fn port_attrs(&self, device: &str, port: u8) -> Result<VerbsPortAttrs, FabricError>;
    /// True when the device is mlx5 and offers Dynamically Connected transport.
    fn dc_supported(&self, device: &str) -> bool;
}

/// The outcome of discovery: ports, or the plain reason there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    Ports(Vec<PortFacts>),
    NoDevices { reason: String },
}

/// Lists every port under the sysfs root and completes it with verbs facts. A port whose verbs
/// query fails keeps `active_mtu: None`, which later refuses RDMA on it with the reason logged.
pub fn discover(sysfs: &SysfsReader, verbs: &dyn PortQuery) -> Result<Discovery, FabricError> {
    let devices = sysfs.devices()?;
    if devices.is_empty() {
        let reason = match verbs.device_list()? {
            DeviceListing::Unavailable(reason) => reason,
            DeviceListing::Devices(names) if names.is_empty() => {
                format!("no devices under {}", sysfs.root().display())
            }
            DeviceListing::Devices(names) => {
                return Err(FabricError::Sysfs {
                    path: sysfs.root().display().to_string(),
                    reason: format!(
                        "verbs lists {} but sysfs shows no devices; is /sys mounted?",
                        names.join(", ")
                    ),
                });
            }
        };
        return Ok(Discovery::NoDevices { reason });
    }
    let mut ports = Vec::new();
    let mut unreadable = Vec::new();
    for device in devices {
        // One device that cannot be read (being removed, a driver in a bad state) costs only
        // its own ports, not every other device's.
        match device_ports(sysfs, verbs, &device) {
            Ok(found) => ports.extend(found),
            Err(e) => {
                tracing::warn!(%device, "skipping an RDMA device that cannot be read: {e}");
                unreadable.push(e);
            }
        }
    }
    match unreadable.into_iter().next() {
        Some(e) if ports.is_empty() => Err(e),
        _ => Ok(Discovery::Ports(ports)),
    }
}

fn device_ports(
    sysfs: &SysfsReader,
    verbs: &dyn PortQuery,
    device: &str,
) -> Result<Vec<PortFacts>, FabricError> {
    let dc = verbs.dc_supported(device);
    let mut ports = Vec::new();
    for port in sysfs.ports(device)? {
        let mut facts = sysfs.port(device, port)?;
        facts.device_info.dc_supported = dc;
        match verbs.port_attrs(device, port) {
            Ok(attrs) => {
                facts.active_mtu = Some(attrs.active_mtu);
                facts.max_mtu = Some(attrs.max_mtu);
                // Read after sysfs: a port that came up (or got its LID) in between would
                // otherwise be planned as down and wait for an event that already passed.
                facts.state = attrs.state;
                if attrs.lid.is_some() {
                    facts.lid = attrs.lid;
                }
            }
            Err(e) => {
                tracing::warn!(%device, port, "verbs port query failed: {e}");
                facts.verbs_error = Some(e.to_string());
            }
        }
        ports.push(facts);
    }
    Ok(ports)
}
