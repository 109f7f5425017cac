//! memkv-server: the TCP data plane, the admin HTTP API and their configuration.
//!
//! [`Server::start`] opens the store ([`memkv_store`]), listens on `network.address` and
//! serves the wire protocol ([`memkv_proto`]) to authenticated clients; the admin API listens
//! on port + 1. [`run_until_signal`] is what `memkv start` runs.

#![forbid(unsafe_code)]

pub mod admin;
mod clients;
pub mod config;
mod congestion;
mod data;
mod local;
pub mod metrics;
pub mod otel;
mod rdma;
mod server;
mod staging;
mod state;
mod store_config;

pub use server::{Server, StartError, run_until_signal};
pub use store_config::{store_config, wire_limits};
