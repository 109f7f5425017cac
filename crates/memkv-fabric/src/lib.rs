//! memkv-fabric: how memkv talks to a peer on a given RDMA port.
//!
//! - Discovery ([`discover`], [`sysfs`], [`verbs`]): devices and ports from
//!   `/sys/class/infiniband` plus a verbs port query; a host without RDMA has zero devices.
//! - Policy ([`policy`], [`gid`], [`pkey`], [`mtu`], [`dcb`]): pure decisions per port
//!   ([`plan_port`]) and per peer ([`build_address`]), each refusal a named [`FabricError`].
//! - Runtime ([`events`], [`verbs_events`]): cached LID and port state kept current by the
//!   device's async event queue.
//! - [`Fabric`]: the startup entry point tying these together for the server, client and
//!   data plane.
//! - `net show` ([`show`], [`report`], [`render`]).
//! - [`doubles`]: labelled test doubles for hardware the project's machines lack.

pub mod address;
pub mod config;
pub mod dcb;
pub mod discover;
pub mod doctor;
pub mod doubles;
pub mod error;
pub mod events;
pub mod fabric;
pub mod gid;
pub mod mtu;
pub mod pkey;
pub mod policy;
pub mod render;
pub mod report;
mod route_socket;
pub mod show;
pub mod sysfs;
pub mod types;
pub mod verbs;
pub mod verbs_events;

pub use config::{
    FabricConfig, ValueSource, client_pkey_index_from_env, resolve_client_pkey_index,
};
pub use dcb::parse_dcb_reply;
pub use error::FabricError;
pub use events::{AsyncEvent, AsyncEventKind, AsyncEventSource, EventWatcher, PortRuntime};
pub use fabric::Fabric;
pub use policy::{
    AddressPlan, GrhPlan, PeerEndpoint, PortPlan, Transport, build_address, plan_port,
};
pub use render::{render_json, render_text};
pub use report::PortReport;
pub use show::{
    EXIT_NO_MATCHING_PORT, EXIT_NO_RDMA_DEVICES, FabricSources, NetShow, Planned, ShowError,
    ShowFilter, net_show, net_show_system, plan_all,
};
pub use types::{Gid, LinkLayer, Membership, Mtu, PortFacts, PortState};
