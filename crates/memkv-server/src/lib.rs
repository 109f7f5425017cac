//! memkv-server: configuration, admin HTTP API and (from the lead) the data plane.

pub mod config;
