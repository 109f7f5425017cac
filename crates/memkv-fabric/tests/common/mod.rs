//! Helpers shared by the integration tests: fixture trees (TEST DOUBLES, see
//! fixtures/README.md) and the simulated DCB answers for their netdevs.
#![allow(dead_code)]

use memkv_fabric::FabricConfig;
use memkv_fabric::dcb::build;
use memkv_fabric::doubles::{FixtureVerbs, StaticDcb};
use memkv_fabric::policy::{PortPlan, plan_port};
use memkv_fabric::show::{FabricSources, Planned, plan_all};
use memkv_fabric::sysfs::SysfsReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn sysfs_root(tree: &Path) -> PathBuf {
    tree.join("sys/class/infiniband")
}

/// Hand-built dcbnl answers for the fixture netdevs.
pub fn fixture_dcb() -> StaticDcb {
    StaticDcb::new()
        .with_reply(
            "ens1f0np0",
            build::ieee_reply("ens1f0np0", Some(1 << 3), &[(26, 3), (10, 1)]),
        )
        .with_reply("ens2f0np0", build::ieee_reply("ens2f0np0", Some(0), &[]))
        .with_reply("vethA", build::error_reply(libc_eopnotsupp()))
}

pub fn libc_eopnotsupp() -> i32 {
    95
}

/// Plans every port of a fixture tree at `root` with `cfg`.
pub fn plans_at(root: &Path, cfg: &FabricConfig) -> Vec<PortPlan> {
    let verbs = FixtureVerbs::new(root);
    let dcb = fixture_dcb();
    let sources = FabricSources {
        sysfs: SysfsReader::new(root),
        verbs: &verbs,
        dcb: &dcb,
    };
    match plan_all(&sources, cfg).expect("fixture discovery") {
        Planned::Ports(p) => p,
        Planned::NoDevices { reason } => panic!("fixture has no devices: {reason}"),
    }
}

pub fn plans(tree: &str, cfg: &FabricConfig) -> Vec<PortPlan> {
    plans_at(&sysfs_root(&fixture_dir(tree)), cfg)
}

/// The plan of one device's port 1 in a fixture tree.
pub fn plan(tree: &str, device: &str, cfg: &FabricConfig) -> PortPlan {
    plans(tree, cfg)
        .into_iter()
        .find(|p| p.facts.device == device && p.facts.port == 1)
        .unwrap_or_else(|| panic!("{tree} has no {device} port 1"))
}

/// Plans a port directly from its sysfs facts, bypassing discovery.
pub fn plan_from(root: &Path, device: &str, cfg: &FabricConfig) -> PortPlan {
    let mut facts = SysfsReader::new(root).port(device, 1).unwrap();
    facts.active_mtu = Some(memkv_fabric::Mtu::Mtu4096);
    plan_port(facts, cfg, &fixture_dcb())
}

/// A private copy of a fixture tree that tests may modify; removed on drop.
pub struct TempTree {
    pub path: PathBuf,
}

impl TempTree {
    pub fn copy_of(name: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "memkv-fabric-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        copy_dir(&fixture_dir(name), &path);
        Self { path }
    }

    pub fn sysfs(&self) -> PathBuf {
        sysfs_root(&self.path)
    }

    /// Overwrites a file under the port directory of `device` port 1.
    pub fn set_port_file(&self, device: &str, file: &str, text: &str) {
        let p = self.sysfs().join(device).join("ports/1").join(file);
        std::fs::write(p, format!("{text}\n")).unwrap();
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
