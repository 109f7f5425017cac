//! TEST DOUBLES for hardware this project's machines lack. Nothing here talks to a device:
//! - [`FixtureVerbs`] answers verbs port queries from files in a fixture sysfs tree;
//! - [`SimulatedEventSource`] delivers async events a test injects;
//! - [`StaticDcb`] answers DCB detection from hand-built dcbnl reply bytes.
//!
//! They are public so integration tests (and the CLI's own tests) can drive the real policy.

use crate::dcb::{DcbDetection, DcbSource, interpret_reply, parse_dcb_reply};
use crate::discover::{DeviceListing, PortQuery, VerbsPortAttrs};
use crate::error::FabricError;
use crate::events::{AsyncEvent, AsyncEventSource};
use crate::sysfs::SysfsReader;
use crate::types::{Mtu, PortState};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::Duration;

/// TEST DOUBLE for [`crate::verbs::VerbsReader`]. Reads what `ibv_query_port` would report from
/// `<root>/<dev>/ports/<n>/verbs/{active_mtu,max_mtu}` (bytes, e.g. `1024`) and DC support from
/// `<root>/<dev>/verbs/dc_supported` (`1`). These files exist only in fixture trees.
#[derive(Debug, Clone)]
pub struct FixtureVerbs {
    root: PathBuf,
}

impl FixtureVerbs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn read(path: &Path) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
    }
}

impl PortQuery for FixtureVerbs {
    fn device_list(&self) -> Result<DeviceListing, FabricError> {
        let names = SysfsReader::new(&self.root).devices()?;
        if names.is_empty() {
            // What the verbs reader reports on a kernel without RDMA.
            return Ok(DeviceListing::Unavailable(
                "this kernel has no RDMA support (ibv_get_device_list: ENOSYS)".into(),
            ));
        }
        Ok(DeviceListing::Devices(names))
    }

    fn port_attrs(&self, device: &str, port: u8) -> Result<VerbsPortAttrs, FabricError> {
        let sysfs = SysfsReader::new(&self.root);
        let dir = sysfs.port_dir(device, port).join("verbs");
        let mtu = |name: &str| {
            Self::read(&dir.join(name))
                .and_then(|t| t.parse::<u32>().ok())
                .and_then(Mtu::from_bytes)
                .ok_or_else(|| FabricError::Verbs {
                    call: "ibv_query_port",
                    device: device.to_owned(),
                    reason: format!("fixture has no valid verbs/{name} for port {port}"),
                })
        };
        Ok(VerbsPortAttrs {
            active_mtu: mtu("active_mtu")?,
            max_mtu: mtu("max_mtu")?,
            state: sysfs.read_state(device, port).unwrap_or(PortState::Down),
            lid: sysfs.read_lid(device, port).ok().flatten(),
        })
    }

    fn dc_supported(&self, device: &str) -> bool {
        Self::read(&self.root.join(device).join("verbs/dc_supported")).as_deref() == Some("1")
    }
}

/// TEST DOUBLE for [`crate::verbs_events::VerbsEventSource`]: events come from the paired
/// [`SimulatedEventSender`].
pub struct SimulatedEventSource {
    device: String,
    events: Receiver<AsyncEvent>,
}

/// Injects events into a [`SimulatedEventSource`].
#[derive(Clone)]
pub struct SimulatedEventSender(Sender<AsyncEvent>);

impl SimulatedEventSender {
    pub fn send(&self, event: AsyncEvent) {
        // The source may already be gone in a test that stopped its watcher; nothing to do.
        let _ = self.0.send(event);
    }
}

impl SimulatedEventSource {
    pub fn new(device: &str) -> (Self, SimulatedEventSender) {
        let (tx, rx) = channel();
        (
            Self {
                device: device.to_owned(),
                events: rx,
            },
            SimulatedEventSender(tx),
        )
    }
}

impl AsyncEventSource for SimulatedEventSource {
    fn device(&self) -> &str {
        &self.device
    }

    fn next_event(&mut self, timeout: Duration) -> Result<Option<AsyncEvent>, FabricError> {
        if timeout.is_zero() {
            return match self.events.try_recv() {
                Ok(e) => Ok(Some(e)),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => Ok(None),
            };
        }
        match self.events.recv_timeout(timeout) {
            Ok(e) => Ok(Some(e)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                // Mirror a quiet queue rather than spinning.
                std::thread::sleep(timeout);
                Ok(None)
            }
        }
    }
}

/// TEST DOUBLE for [`crate::dcb::NetlinkDcb`]: per-netdev dcbnl reply bytes, parsed by the
/// real parser. A netdev without an entry answers like one without DCB support.
#[derive(Debug, Clone, Default)]
pub struct StaticDcb {
    replies: HashMap<String, Vec<u8>>,
}

impl StaticDcb {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_reply(mut self, netdev: &str, reply: Vec<u8>) -> Self {
        self.replies.insert(netdev.to_owned(), reply);
        self
    }
}

impl DcbSource for StaticDcb {
    fn detect(&self, netdev: &str) -> DcbDetection {
        match self.replies.get(netdev) {
            Some(bytes) => match parse_dcb_reply(bytes) {
                Ok(reply) => interpret_reply(netdev, reply),
                Err(e) => DcbDetection::Failed {
                    reason: e.to_string(),
                },
            },
            None => DcbDetection::NotSupported {
                netdev: netdev.to_owned(),
            },
        }
    }
}
