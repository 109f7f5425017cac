//! Discovery over private copies of fixture sysfs trees (TEST DOUBLES), with the fixture verbs
//! double (TEST DOUBLE) standing in for `ibv_query_port`.

mod common;

use common::TempTree;
use memkv_fabric::FabricError;
use memkv_fabric::discover::{Discovery, PortQuery, VerbsPortAttrs, discover};
use memkv_fabric::doubles::FixtureVerbs;
use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::types::PortState;

fn devices(found: &Discovery) -> Vec<&str> {
    match found {
        Discovery::Ports(ports) => ports.iter().map(|p| p.device.as_str()).collect(),
        Discovery::NoDevices { reason } => panic!("no devices: {reason}"),
    }
}

/// A device being removed (or a driver in a bad state) used to fail discovery for every device.
#[test]
fn one_unreadable_device_costs_only_its_own_ports() {
    let tree = TempTree::copy_of("roce-mixed");
    tree.set_port_file("mlx5_3", "state", "garbage");
    let sysfs = SysfsReader::new(tree.sysfs());
    let found = discover(&sysfs, &FixtureVerbs::new(tree.sysfs())).unwrap();
    let mut seen = devices(&found);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, ["mlx5_2", "mlx5_4"]);

    for device in ["mlx5_2", "mlx5_4"] {
        tree.set_port_file(device, "state", "garbage");
    }
    let err = discover(&sysfs, &FixtureVerbs::new(tree.sysfs())).unwrap_err();
    assert!(matches!(err, FabricError::Sysfs { .. }), "{err}");
}

/// Verbs answers after sysfs was read: what it says of the port is the later word.
struct CameUpMeanwhile(FixtureVerbs);

impl PortQuery for CameUpMeanwhile {
    fn device_list(&self) -> Result<memkv_fabric::discover::DeviceListing, FabricError> {
        self.0.device_list()
    }

    fn port_attrs(&self, device: &str, port: u8) -> Result<VerbsPortAttrs, FabricError> {
        let attrs = self.0.port_attrs(device, port)?;
        Ok(VerbsPortAttrs {
            state: PortState::Active,
            ..attrs
        })
    }

    fn dc_supported(&self, device: &str) -> bool {
        self.0.dc_supported(device)
    }
}

/// A port that became ACTIVE between the sysfs read and the verbs query used to be planned as
/// down, waiting for a PORT_ACTIVE event that had already passed.
#[test]
fn a_port_that_came_up_while_it_was_read_is_active() {
    let tree = TempTree::copy_of("roce-mixed");
    tree.set_port_file("mlx5_3", "state", "1: DOWN");
    let sysfs = SysfsReader::new(tree.sysfs());
    let verbs = CameUpMeanwhile(FixtureVerbs::new(tree.sysfs()));
    let Discovery::Ports(ports) = discover(&sysfs, &verbs).unwrap() else {
        panic!("no ports");
    };
    let port = ports.iter().find(|p| p.device == "mlx5_3").unwrap();
    assert!(port.state.is_active(), "{:?}", port.state);
}
