//! memkv-server: configuration, admin HTTP API and (from the lead) the data plane.

pub mod admin;
pub mod config;
pub mod metrics;
