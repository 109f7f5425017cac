//! The client's fabric knobs reach the ports its rails are planned on: [`RdmaPath::start_on`]
//! with a TEST DOUBLE fabric (memkv-fabric's fixture host: a RoCE port whose DCB says PFC on
//! priority 3, DSCP 26, and an InfiniBand port), so this runs without RDMA hardware.

use std::sync::Arc;

use memkv_fabric::config::ValueSource;
use memkv_fabric::doctor::doubles::{HostFixture, RocePort, dcb_reply_bytes};
use memkv_fabric::doubles::{FixtureVerbs, StaticDcb};
use memkv_fabric::policy::{PortPlan, Resolved};
use memkv_fabric::show::FabricSources;
use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::{Fabric, FabricConfig, FabricError};
use memkv_proto::AuthKey;

use super::RdmaPath;
use crate::config::{ClientConfig, Transport};

fn fixture_host(name: &str) -> HostFixture {
    let dir = std::env::temp_dir().join(format!(
        "memkv-client-path-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let h = HostFixture::create(dir).unwrap();
    h.roce_port(&RocePort {
        device: "fixroce0",
        netdev: "fixeth0",
        mac: "02:00:00:00:00:0a",
        ipv4: Some("192.0.2.1"),
        pci: None,
        driver: "rdma_rxe",
    });
    h.ib_port("fixib0", Some(0x21), 1, None);
    h
}

/// Starts the client's RDMA path on the fixture host: the knobs it hands the fabric, and the
/// ports the fabric plans with them. The double then refuses (no verbs device can open a
/// fixture port), which `auto` turns into TCP with the double's reason.
fn plan_with(config: &ClientConfig, name: &str) -> (FabricConfig, Vec<PortPlan>) {
    let host = fixture_host(name);
    let sysfs = host.root().join("sys/class/infiniband");
    let dcb = StaticDcb::new().with_reply(
        "fixeth0",
        dcb_reply_bytes("fixeth0", "pfc 0,0,0,1,0,0,0,0\ndscp2prio 26,3\n").unwrap(),
    );
    let mut seen = None;
    let started = RdmaPath::start_on(config, |cfg, devices| {
        let verbs = FixtureVerbs::new(&sysfs);
        let sources = FabricSources {
            sysfs: SysfsReader::new(&sysfs),
            verbs: &verbs,
            dcb: &dcb,
        };
        let fabric = Fabric::plan(&sources, cfg, devices, Arc::new(SysfsReader::new(&sysfs)))?;
        seen = Some((*cfg, fabric.plans().to_vec()));
        Err(FabricError::NoRdmaPort {
            device: "fixroce0".into(),
            reason: "test double".into(),
        })
    })
    .unwrap();
    assert!(
        matches!(&started, Err(reason) if reason.contains("test double")),
        "the path must be started on the double's fabric"
    );
    let _ = std::fs::remove_dir_all(host.root());
    seen.expect("the fabric was never started")
}

fn config() -> ClientConfig {
    let mut c = ClientConfig::new(["127.0.0.1:9900"], AuthKey::from_bytes([7; 32]));
    c.transport = Transport::Auto;
    c
}

fn port<'a>(plans: &'a [PortPlan], device: &str) -> &'a PortPlan {
    plans.iter().find(|p| p.facts.device == device).unwrap()
}

fn configured<T>(value: T) -> Option<Resolved<T>> {
    Some(Resolved {
        value,
        source: ValueSource::Config,
    })
}

#[test]
fn without_overrides_the_rails_use_what_dcb_detection_finds() {
    let (cfg, plans) = plan_with(&config(), "detect");
    assert_eq!(cfg, FabricConfig::default());
    let roce = port(&plans, "fixroce0");
    let detected = |value| Resolved {
        value,
        source: ValueSource::Detected,
    };
    assert_eq!(roce.traffic_class, Some(detected(26 << 2)));
    assert_eq!(roce.service_level, detected(3));
}

#[test]
fn traffic_class_service_level_and_gid_index_reach_the_planned_rails() {
    let mut c = config();
    c.traffic_class = Some(10 << 2);
    c.service_level = Some(5);
    c.gid_index = Some(1);
    c.pkey_index = Some(0);
    let (cfg, plans) = plan_with(&c, "override");
    assert_eq!(
        (cfg.traffic_class, cfg.service_level, cfg.gid_index),
        (Some(40), Some(5), Some(1))
    );
    let roce = port(&plans, "fixroce0");
    assert_eq!(roce.traffic_class, configured(40));
    assert_eq!(roce.service_level.value, 5);
    assert_eq!(roce.service_level.source, ValueSource::Config);
    let gid = roce.gid.as_ref().unwrap().as_ref().unwrap();
    assert_eq!((gid.index, gid.source), (1, ValueSource::Config));
    // InfiniBand addresses by LID without a GRH: the two RoCE knobs are reported ignored there,
    // as for the server, and the service level is kept.
    let ib = port(&plans, "fixib0");
    let ignored: Vec<&str> = ib.ignored.iter().map(|k| k.key).collect();
    assert_eq!(ignored, ["traffic_class", "gid_index"]);
    assert_eq!(ib.traffic_class, None);
    assert_eq!(ib.service_level.value, 5);
}

#[test]
fn traffic_class_zero_means_detect_as_on_the_server() {
    let mut c = config();
    c.traffic_class = Some(0);
    let (cfg, plans) = plan_with(&c, "zero");
    assert_eq!(cfg.traffic_class, None);
    let tc = port(&plans, "fixroce0").traffic_class.unwrap();
    assert_eq!((tc.value, tc.source), (104, ValueSource::Detected));
}
