//! The client's RoCE/InfiniBand overrides `traffic_class`, `service_level` and `gid_index`, with
//! the meaning, ranges and `auto` of the server's `rdma.*` keys (memkv-server's config
//! validation): clients start every one-sided WRITE and READ, so their queue pairs' traffic
//! class, not the server's, decides whether put and get traffic rides the lossless class. Each
//! is detected (or chosen) per port by memkv-fabric unless set here; set one only to override
//! what detection finds (RoCE runbook, "You do not hardcode a DSCP value").

use memkv_fabric::FabricConfig;
use serde::Deserialize;

use super::{ClientConfig, ConfigSources};
use crate::{Error, Result};

/// `MEMKV_RDMA_TRAFFIC_CLASS`: the GRH traffic class (DSCP << 2) over the file's `traffic_class`.
pub const TRAFFIC_CLASS_ENV: &str = "MEMKV_RDMA_TRAFFIC_CLASS";
/// `MEMKV_RDMA_SERVICE_LEVEL`: the service level over the file's `service_level`.
pub const SERVICE_LEVEL_ENV: &str = "MEMKV_RDMA_SERVICE_LEVEL";
/// `MEMKV_RDMA_GID_INDEX`: the source GID index over the file's `gid_index`.
pub const GID_INDEX_ENV: &str = "MEMKV_RDMA_GID_INDEX";

/// Every variable that changes the fabric settings a client's queue pairs use (the file's
/// `mtu` has none), for tools that say where the client's settings came from (`memkv net`).
pub const FABRIC_ENV_VARS: [&str; 4] = [
    memkv_fabric::config::PKEY_INDEX_ENV,
    TRAFFIC_CLASS_ENV,
    SERVICE_LEVEL_ENV,
    GID_INDEX_ENV,
];

/// One override: its key in `MEMKV_CONFIG`, its variable and its largest value.
struct Knob {
    key: &'static str,
    env: &'static str,
    max: u64,
}

/// The server's `rdma.traffic_class`: 0..=255, where 0 means detect, as `auto` does.
const TRAFFIC_CLASS: Knob = Knob {
    key: "traffic_class",
    env: TRAFFIC_CLASS_ENV,
    max: 255,
};
/// The server's `rdma.service_level`: the 4-bit SL (memkv_fabric's MAX_SERVICE_LEVEL).
const SERVICE_LEVEL: Knob = Knob {
    key: "service_level",
    env: SERVICE_LEVEL_ENV,
    max: memkv_fabric::config::MAX_SERVICE_LEVEL as u64,
};
/// The server's `rdma.gid_index`: 0..=255.
const GID_INDEX: Knob = Knob {
    key: "gid_index",
    env: GID_INDEX_ENV,
    max: 255,
};

/// A knob as `MEMKV_CONFIG` writes it: `auto` or an integer (kept as text and checked with the
/// environment's value by [`parse_knob`], so both give the same error naming the limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawKnob(String);

impl<'de> Deserialize<'de> for RawKnob {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = RawKnob;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`auto` or a non-negative integer")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawKnob, E> {
                Ok(RawKnob(v.to_string()))
            }

            // Negative and huge numbers reach parse_knob too, which names the range they are
            // outside.
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawKnob, E> {
                Ok(RawKnob(v.to_string()))
            }

            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<RawKnob, E> {
                Ok(RawKnob(v.to_string()))
            }

            fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<RawKnob, E> {
                Ok(RawKnob(v.to_string()))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawKnob, E> {
                Ok(RawKnob(v.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The file's three overrides.
#[derive(Debug, Default)]
pub(super) struct RawKnobs<'a> {
    pub traffic_class: Option<&'a RawKnob>,
    pub service_level: Option<&'a RawKnob>,
    pub gid_index: Option<&'a RawKnob>,
}

/// `auto` (any case): `None`, detect. An integer in `0..=max`: that value.
fn parse_knob(text: &str, origin: &str, max: u64) -> Result<Option<u8>> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    // i128 holds every integer YAML gives (a u128 past it is not a number here either).
    match text.parse::<i128>() {
        Ok(n) if (0..=i128::from(max)).contains(&n) => Ok(Some(n as u8)),
        Ok(n) => Err(Error::Config(format!(
            "{origin}: {n} is out of range 0..={max} (or auto)"
        ))),
        Err(_) => Err(Error::Config(format!(
            "{origin}: {:?} is neither auto nor an integer in 0..={max}",
            text.chars().take(32).collect::<String>()
        ))),
    }
}

/// The resolved overrides; `None` is detect (or, for `gid_index`, memkv-fabric's choice).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Knobs {
    pub traffic_class: Option<u8>,
    pub service_level: Option<u8>,
    pub gid_index: Option<u8>,
}

impl ConfigSources<'_> {
    /// The variable over the file's key over detection.
    fn knob(&self, knob: &Knob, file: Option<&RawKnob>) -> Result<Option<u8>> {
        match self.env(knob.env)? {
            Some(setting) => parse_knob(&setting.value, &setting.origin, knob.max),
            None => match file {
                Some(RawKnob(text)) => parse_knob(text, &self.key(knob.key), knob.max),
                None => Ok(None),
            },
        }
    }

    pub(super) fn fabric_knobs(&self, file: RawKnobs<'_>) -> Result<Knobs> {
        Ok(Knobs {
            // As on the server (and the RoCE runbook's MINIO_RDMA_INTERNODE_TRAFFIC_CLASS=0):
            // traffic class 0 means detect, not "best effort".
            traffic_class: self
                .knob(&TRAFFIC_CLASS, file.traffic_class)?
                .filter(|tc| *tc != 0),
            service_level: self.knob(&SERVICE_LEVEL, file.service_level)?,
            gid_index: self.knob(&GID_INDEX, file.gid_index)?,
        })
    }
}

impl ClientConfig {
    /// The fabric knobs this client's rails are planned with, so its queue pairs carry them
    /// (what `memkv net show` and `net doctor` report for the client, too). On InfiniBand
    /// memkv-fabric reports `traffic_class` and `gid_index` as ignored (LID addressing has no
    /// GRH). A `traffic_class` of `Some(0)` means detect, as 0 does in the file.
    pub fn fabric_config(&self) -> FabricConfig {
        FabricConfig {
            service_level: self.service_level,
            traffic_class: self.traffic_class.filter(|tc| *tc != 0),
            gid_index: self.gid_index.map(u32::from),
            pkey_index: self.pkey_index,
            mtu: self.rdma_mtu,
        }
    }
}
