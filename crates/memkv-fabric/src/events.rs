//! Runtime port state: the cached LID and port state, kept current by the device's
//! asynchronous event queue so a LID the subnet manager reassigns is used without a restart.

use crate::error::FabricError;
use crate::policy::{AddressPlan, PeerEndpoint, PortPlan, build_address};
use crate::sysfs::SysfsReader;
use crate::types::{LinkLayer, PortState};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The asynchronous events memkv acts on; everything else is `Other` (its verbs code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEventKind {
    LidChange,
    SmChange,
    ClientReregister,
    PortActive,
    PortError,
    PkeyChange,
    GidChange,
    DeviceFatal,
    Other(u32),
}

/// One event from a device; `port` is set for port events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    pub port: Option<u8>,
    pub kind: AsyncEventKind,
}

/// A device's async event queue. The verbs implementation is
/// [`crate::verbs_events::VerbsEventSource`]; tests use the labelled test double
/// [`crate::doubles::SimulatedEventSource`].
pub trait AsyncEventSource: Send {
    fn device(&self) -> &str;
    /// Waits up to `timeout` (zero: do not wait) for the next event.
    fn next_event(&mut self, timeout: Duration) -> Result<Option<AsyncEvent>, FabricError>;
}

/// Re-reads a port's LID and state (sysfs in production and in fixture tests).
pub trait LidReader: Send + Sync {
    fn read_lid(&self, device: &str, port: u8) -> Result<Option<u16>, FabricError>;
    fn read_state(&self, device: &str, port: u8) -> Result<PortState, FabricError>;
}

impl LidReader for SysfsReader {
    fn read_lid(&self, device: &str, port: u8) -> Result<Option<u16>, FabricError> {
        SysfsReader::read_lid(self, device, port)
    }

    fn read_state(&self, device: &str, port: u8) -> Result<PortState, FabricError> {
        SysfsReader::read_state(self, device, port)
    }
}

#[derive(Debug, Clone, Copy)]
struct PortStatus {
    link_layer: LinkLayer,
    /// None: unknown, read again on next use.
    lid: Option<u16>,
    state: PortState,
    /// The device reported a fatal error: its ports stay down whatever sysfs says (the device
    /// must be opened again, which needs a restart).
    fatal: bool,
}

/// Shared, thread-safe view of every port's LID and state.
pub struct PortRuntime {
    reader: Arc<dyn LidReader>,
    ports: Mutex<HashMap<(String, u8), PortStatus>>,
    lid_reads: AtomicU64,
}

impl PortRuntime {
    pub fn new(reader: Arc<dyn LidReader>) -> Self {
        Self {
            reader,
            ports: Mutex::new(HashMap::new()),
            lid_reads: AtomicU64::new(0),
        }
    }

    /// Starts tracking a port with the facts read at startup.
    pub fn register(&self, plan: &PortPlan) {
        let f = &plan.facts;
        self.lock().insert(
            (f.device.clone(), f.port),
            PortStatus {
                link_layer: f.link_layer,
                lid: f.lid,
                state: f.state,
                fatal: false,
            },
        );
    }

    /// How many times a LID was read from the reader (the cache missed).
    pub fn lid_reads(&self) -> u64 {
        self.lid_reads.load(Ordering::Relaxed)
    }

    /// The port's LID: cached, or re-read when unknown. Fails with
    /// [`FabricError::NoLid`] while the subnet manager has not assigned one.
    pub fn lid(&self, device: &str, port: u8) -> Result<u16, FabricError> {
        let key = (device.to_owned(), port);
        let mut ports = self.lock();
        let status = ports
            .get_mut(&key)
            .ok_or_else(|| FabricError::UnknownPort {
                device: device.to_owned(),
                port,
            })?;
        if let Some(lid) = status.lid {
            return Ok(lid);
        }
        self.lid_reads.fetch_add(1, Ordering::Relaxed);
        let lid = self.reader.read_lid(device, port)?;
        if lid.is_some() && !status.state.is_active() {
            // A LID arriving means the SM swept the port; take the state it reports now.
            status.state = self.reader.read_state(device, port)?;
        }
        status.lid = lid;
        lid.ok_or_else(|| FabricError::NoLid {
            device: device.to_owned(),
            port,
        })
    }

    pub fn state(&self, device: &str, port: u8) -> Option<PortState> {
        self.lock().get(&(device.to_owned(), port)).map(|s| s.state)
    }

    /// Applies one event from `device`'s queue.
    pub fn apply(&self, device: &str, event: AsyncEvent) {
        let mut ports = self.lock();
        let mut on_port = |port: u8, f: &mut dyn FnMut(&mut PortStatus)| {
            if let Some(status) = ports.get_mut(&(device.to_owned(), port)) {
                f(status);
            }
        };
        match (event.kind, event.port) {
            (
                AsyncEventKind::LidChange
                | AsyncEventKind::SmChange
                | AsyncEventKind::ClientReregister,
                Some(port),
            ) => {
                tracing::info!(device, port, kind = ?event.kind, "dropping cached LID");
                on_port(port, &mut |s| s.lid = None);
            }
            (AsyncEventKind::PortActive, Some(port)) => {
                tracing::info!(device, port, "port is ACTIVE");
                // The SM may have re-swept the port while it was down: read the LID afresh.
                on_port(port, &mut |s| {
                    s.state = PortState::Active;
                    s.lid = None;
                });
            }
            (AsyncEventKind::PortError, Some(port)) => {
                tracing::warn!(
                    device,
                    port,
                    "port error: new connections fail until ACTIVE"
                );
                on_port(port, &mut |s| s.state = PortState::Down);
            }
            (AsyncEventKind::PkeyChange | AsyncEventKind::GidChange, Some(port)) => {
                tracing::warn!(
                    device,
                    port,
                    kind = ?event.kind,
                    "table changed; the partition and GID choice made at startup may be stale"
                );
            }
            (AsyncEventKind::DeviceFatal, _) => {
                tracing::error!(device, "device fatal error: all its ports are down");
                for ((d, _), s) in ports.iter_mut() {
                    if d == device {
                        s.state = PortState::Down;
                        s.fatal = true;
                    }
                }
            }
            _ => tracing::debug!(device, ?event, "async event ignored"),
        }
    }

    /// Applies every event already queued, without waiting. Returns how many were applied.
    pub fn drain(&self, source: &mut dyn AsyncEventSource) -> Result<usize, FabricError> {
        let mut n = 0;
        while let Some(event) = source.next_event(Duration::ZERO)? {
            self.apply(source.device(), event);
            n += 1;
        }
        Ok(n)
    }

    /// What this port advertises to a peer (the LID is read now if it was unknown).
    pub fn local_endpoint(&self, plan: &PortPlan) -> Result<PeerEndpoint, FabricError> {
        let lid = self.current_lid(plan)?;
        plan.local_endpoint(lid)
    }

    /// [`build_address`] with this port's current LID and state.
    pub fn address_for(
        &self,
        plan: &PortPlan,
        peer: &PeerEndpoint,
    ) -> Result<AddressPlan, FabricError> {
        let lid = self.current_lid(plan)?;
        build_address(plan, lid, self.current_state(plan), peer)
    }

    /// The port's state: cached, and read again while it is not ACTIVE. The cache moves on
    /// events, and a PORT_ACTIVE can be missed (the watcher failed to start, or the port came
    /// up before it did); without the read such a port would refuse every connection forever,
    /// and a sysfs read costs nothing next to a connection that fails.
    fn current_state(&self, plan: &PortPlan) -> PortState {
        let f = &plan.facts;
        let mut ports = self.lock();
        let Some(status) = ports.get_mut(&(f.device.clone(), f.port)) else {
            return f.state;
        };
        if !status.state.is_active()
            && !status.fatal
            && let Ok(now) = self.reader.read_state(&f.device, f.port)
        {
            status.state = now;
        }
        status.state
    }

    fn current_lid(&self, plan: &PortPlan) -> Result<Option<u16>, FabricError> {
        let f = &plan.facts;
        let ib = self
            .lock()
            .get(&(f.device.clone(), f.port))
            .map_or(f.link_layer, |s| s.link_layer)
            == LinkLayer::InfiniBand;
        if !ib {
            return Ok(None);
        }
        match self.lid(&f.device, f.port) {
            Ok(lid) => Ok(Some(lid)),
            Err(FabricError::NoLid { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u8), PortStatus>> {
        self.ports.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A background thread applying one device's events to a [`PortRuntime`].
pub struct EventWatcher {
    stop: Arc<AtomicBool>,
    applied: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

/// How long the watcher waits per poll; bounds how long `stop` takes.
const WATCH_POLL: Duration = Duration::from_millis(200);

impl EventWatcher {
    pub fn spawn(mut source: Box<dyn AsyncEventSource>, runtime: Arc<PortRuntime>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicU64::new(0));
        let (stop2, applied2) = (stop.clone(), applied.clone());
        let handle = std::thread::Builder::new()
            .name(format!("memkv-async-{}", source.device()))
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    match source.next_event(WATCH_POLL) {
                        Ok(Some(event)) => {
                            runtime.apply(source.device(), event);
                            applied2.fetch_add(1, Ordering::Release);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(device = source.device(), "async events: {e}");
                            break;
                        }
                    }
                }
            })
            .ok();
        Self {
            stop,
            applied,
            handle,
        }
    }

    /// Events applied so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for EventWatcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}
