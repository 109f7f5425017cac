//! `net show` text and JSON for every fixture tree (TEST DOUBLES), compared with the expected
//! files next to each tree. `MEMKV_BLESS=1` rewrites them after an intended change.

mod common;

use common::{fixture_dcb, fixture_dir, sysfs_root};
use memkv_fabric::doubles::FixtureVerbs;
use memkv_fabric::show::{FabricSources, NetShow, ShowFilter, net_show};
use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::types::Mtu;
use memkv_fabric::{EXIT_NO_RDMA_DEVICES, FabricConfig};

fn show(tree: &str, cfg: &FabricConfig, filter: &ShowFilter) -> NetShow {
    let root = sysfs_root(&fixture_dir(tree));
    let verbs = FixtureVerbs::new(&root);
    let dcb = fixture_dcb();
    let sources = FabricSources {
        sysfs: SysfsReader::new(&root),
        verbs: &verbs,
        dcb: &dcb,
    };
    net_show(&sources, cfg, filter).expect("net show on fixture")
}

fn check(tree: &str, snapshot: &str, actual: &str) {
    let path = fixture_dir(tree).join(snapshot);
    if std::env::var_os("MEMKV_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with MEMKV_BLESS=1 to create)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs from net show output",
        path.display()
    );
}

fn snapshot(tree: &str, name: &str, cfg: FabricConfig) -> NetShow {
    let out = show(tree, &cfg, &ShowFilter::default());
    check(tree, &format!("{name}.txt"), &out.text());
    check(tree, &format!("{name}.json"), &out.json());
    // The JSON is a real document with one entry per port.
    let doc: serde_json::Value = serde_json::from_str(&out.json()).unwrap();
    assert_eq!(doc["ports"].as_array().unwrap().len(), out.ports.len());
    assert_eq!(out.exit_code(), 0);
    out
}

/// The InfiniBand runbook, "Confirm the port is ready": after `memkv net show --device mlx5_0`
/// "the first two lines are the ones that matter", and its example goes on with transport,
/// pkey_index, service_level and path MTU. Those lines come first, in that order and those
/// words; what else net show knows follows them.
#[test]
fn ib_port_with_lid_starts_with_the_runbooks_lines() {
    let out = snapshot("ib-lid", "net-show", FabricConfig::default());
    let text = out.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "device            : mlx5_0  port 1",
            "link layer        : InfiniBand   (LID 33055)",
            "transport         : DC + RC (mlx5)",
            "pkey_index        : 0   (full membership)",
            "service_level     : 0   (virtual lane, via the SM's SL-to-VL map)",
        ],
        "{text}"
    );
    // The runbook's `path MTU : 4096`, then where 4096 comes from.
    assert!(
        lines[5].starts_with("path MTU          : 4096   ("),
        "{text}"
    );
    // Nothing is lost: port state, SM LID, the P_Key itself and the values' sources follow.
    for later in [
        "port state        : ACTIVE   (LinkUp)\n",
        "SM LID            : 1\n",
        "P_Key             : 0xffff\n",
        "values from       : pkey_index default, service_level default\n",
    ] {
        assert!(text.contains(later), "{later}: {text}");
    }
    assert!(out.ports[0].refused.is_none());
}

#[test]
fn ib_port_with_roce_settings_reports_them_ignored() {
    let cfg = FabricConfig {
        service_level: Some(3),
        traffic_class: Some(104),
        gid_index: Some(3),
        ..Default::default()
    };
    let out = snapshot("ib-lid", "net-show-roce-config", cfg);
    let keys: Vec<_> = out.ports[0].ignored.iter().map(|k| k.key).collect();
    assert_eq!(keys, ["traffic_class", "gid_index"]);
    assert!(out.text().contains("virtual lane"));
}

#[test]
fn ib_port_before_the_subnet_manager() {
    let out = snapshot("ib-no-lid", "net-show", FabricConfig::default());
    assert!(
        out.text()
            .contains("no LID: the subnet manager has not configured this port")
    );
    // Not a refusal: the process keeps running and re-reads the LID on use.
    assert!(out.ports[0].refused.is_none());
    assert!(
        out.ports[0]
            .warnings
            .iter()
            .any(|w| w.contains("has not assigned a LID"))
    );
}

#[test]
fn pkey_tables() {
    snapshot("ib-pkeys", "net-show", FabricConfig::default());
    let limited = snapshot(
        "ib-pkeys",
        "net-show-index2-limited",
        FabricConfig {
            pkey_index: Some(2),
            ..Default::default()
        },
    );
    let text = limited.text();
    for want in [
        "pkey_index        : 2   (limited membership)\n",
        "P_Key             : 0x0002\n",
        "values from       : pkey_index config,",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let empty = snapshot(
        "ib-pkeys",
        "net-show-index3-empty",
        FabricConfig {
            pkey_index: Some(3),
            ..Default::default()
        },
    );
    assert!(
        empty.ports[0]
            .refused
            .as_deref()
            .unwrap()
            .contains("entry 3")
    );
    snapshot(
        "ib-pkeys",
        "net-show-index9-past-end",
        FabricConfig {
            pkey_index: Some(9),
            ..Default::default()
        },
    );
}

#[test]
fn two_subnets() {
    let out = snapshot("ib-two-subnets", "net-show", FabricConfig::default());
    assert_eq!(out.ports.len(), 2);
}

#[test]
fn roce_mixed_gid_tables() {
    let out = snapshot("roce-mixed", "net-show", FabricConfig::default());
    let gids: Vec<_> = out
        .ports
        .iter()
        .map(|p| p.gid.as_ref().unwrap().index)
        .collect();
    assert_eq!(gids, [Some(3), Some(3), None]);
    let text = out.text();
    for want in [
        "service_level     : 3   (lossless PFC priority)\n",
        "traffic_class     : 104   (DSCP 26)\n",
        "values from       : pkey_index default, service_level detected, traffic_class detected\n",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

#[test]
fn roce_config_overrides_detection() {
    let cfg = FabricConfig {
        gid_index: Some(2),
        service_level: Some(5),
        traffic_class: Some(40),
        ..Default::default()
    };
    let out = show(
        "roce-mixed",
        &cfg,
        &ShowFilter {
            device: Some("mlx5_2".into()),
            port: Some(1),
        },
    );
    check("roce-mixed", "net-show-mlx5_2-config.txt", &out.text());
    check("roce-mixed", "net-show-mlx5_2-config.json", &out.json());
    assert_eq!(out.ports.len(), 1);
    assert!(
        out.ports[0]
            .warnings
            .iter()
            .any(|w| w.contains("differs from the PFC-enabled priority 3"))
    );
}

#[test]
fn rxe_port_with_active_mtu_1024() {
    let out = snapshot("rxe-mtu1024", "net-show", FabricConfig::default());
    assert_eq!(out.ports[0].mtu.effective, Some(1024));
    let refused = snapshot(
        "rxe-mtu1024",
        "net-show-mtu4096",
        FabricConfig {
            mtu: Some(Mtu::Mtu4096),
            ..Default::default()
        },
    );
    let why = refused.ports[0].refused.as_deref().unwrap();
    assert!(why.contains("4096") && why.contains("1024"), "{why}");
    snapshot(
        "rxe-mtu1024",
        "net-show-pkey1",
        FabricConfig {
            pkey_index: Some(1),
            ..Default::default()
        },
    );
}

#[test]
fn filters_select_ports_and_unknown_ones_fail_with_their_exit_code() {
    let out = show(
        "ib-two-subnets",
        &FabricConfig::default(),
        &ShowFilter {
            device: Some("mlx5_1".into()),
            port: None,
        },
    );
    assert_eq!(out.ports.len(), 1);
    assert_eq!(out.ports[0].device, "mlx5_1");
    let root = sysfs_root(&fixture_dir("ib-two-subnets"));
    let verbs = FixtureVerbs::new(&root);
    let dcb = fixture_dcb();
    let sources = FabricSources {
        sysfs: SysfsReader::new(&root),
        verbs: &verbs,
        dcb: &dcb,
    };
    let err = net_show(
        &sources,
        &FabricConfig::default(),
        &ShowFilter {
            device: Some("mlx5_9".into()),
            port: Some(2),
        },
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("--device mlx5_9 --port 2"),
        "{err}"
    );
    assert!(
        err.to_string().contains("mlx5_0 port 1, mlx5_1 port 1"),
        "{err}"
    );
    assert_eq!(err.exit_code(), memkv_fabric::EXIT_NO_MATCHING_PORT);
}

#[test]
fn no_rdma_devices_is_a_plain_message_and_a_distinct_exit_code() {
    let root = std::path::Path::new("/nonexistent/memkv-fabric/sys/class/infiniband");
    let verbs = FixtureVerbs::new(root);
    let dcb = fixture_dcb();
    let sources = FabricSources {
        sysfs: SysfsReader::new(root),
        verbs: &verbs,
        dcb: &dcb,
    };
    let out = net_show(&sources, &FabricConfig::default(), &ShowFilter::default()).unwrap();
    assert_eq!(out.exit_code(), EXIT_NO_RDMA_DEVICES);
    assert_eq!(
        out.text(),
        "no RDMA devices: this kernel has no RDMA support (ibv_get_device_list: ENOSYS)\n"
    );
    let doc: serde_json::Value = serde_json::from_str(&out.json()).unwrap();
    assert_eq!(doc["ports"].as_array().unwrap().len(), 0);
    assert!(doc["no_rdma_devices"].as_str().unwrap().contains("ENOSYS"));
}

/// The real readers on this machine. Without RDMA (no class directory) it must say "no
/// devices", not fail; with RDMA it must list ports.
#[test]
fn real_system_net_show_does_not_fail() {
    let out = memkv_fabric::net_show_system(&FabricConfig::default(), &ShowFilter::default())
        .expect("net show on this host");
    eprint!("{}", out.text());
    if !std::path::Path::new("/sys/class/infiniband").is_dir() {
        assert_eq!(out.exit_code(), EXIT_NO_RDMA_DEVICES);
        let reason = out.no_devices.as_deref().unwrap();
        assert!(
            reason.contains("ENOSYS") || reason.contains("libibverbs"),
            "{reason}"
        );
        assert!(out.ports.is_empty());
    } else {
        assert!(out.no_devices.is_some() || !out.ports.is_empty());
    }
}
