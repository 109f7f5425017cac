//! Facts about the Soft-RoCE ports, read three ways and compared: memkv-fabric's sysfs reader
//! (/sys/class/infiniband), `ibv_devinfo -v` (rdma-core's own tool) and verbs through sideway.
//! Outside the VM these tests report themselves skipped.

mod support;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::types::{GidType, LinkLayer as FabricLinkLayer, PortState as FabricPortState};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{LinkLayer, Mtu, PortState};

const PORT: u8 = 1;

/// One port's facts in the form both memkv-fabric and ibv_devinfo can be brought to.
#[derive(Debug, PartialEq)]
struct PortFacts {
    state: u32,
    /// Lower case without separators: sysfs says "LinkUp", ibv_devinfo "LINK_UP".
    phys_state: String,
    link_layer: String,
    lid: u32,
    sm_lid: u32,
    /// Non-zero GIDs by index, with their type ("RoCE v2").
    gids: BTreeMap<u32, (Ipv6Addr, String)>,
    pkey_table_len: usize,
}

fn squash(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase()
}

fn state_code(state: FabricPortState) -> u32 {
    match state {
        FabricPortState::Down => 1,
        FabricPortState::Init => 2,
        FabricPortState::Armed => 3,
        FabricPortState::Active => 4,
        FabricPortState::ActiveDefer => 5,
        FabricPortState::Other(code) => code,
    }
}

/// memkv-fabric's reading of the port, and its P_Key table.
fn fabric_port(device: &str) -> (PortFacts, Vec<u16>) {
    let port = SysfsReader::default()
        .port(device, PORT)
        .unwrap_or_else(|e| panic!("memkv-fabric reading {device} port {PORT}: {e}"));
    let facts = PortFacts {
        state: state_code(port.state),
        phys_state: squash(port.phys_state.as_deref().unwrap_or("")),
        link_layer: match port.link_layer {
            FabricLinkLayer::Ethernet => "Ethernet".to_owned(),
            FabricLinkLayer::InfiniBand => "InfiniBand".to_owned(),
        },
        // memkv-fabric reports an unassigned LID (0x0, always on RoCE) as none.
        lid: port.lid.map_or(0, u32::from),
        sm_lid: port.sm_lid.map_or(0, u32::from),
        gids: port
            .gids
            .iter()
            .map(|entry| {
                (
                    entry.index,
                    (Ipv6Addr::from(entry.gid.0), entry.gid_type.to_string()),
                )
            })
            .collect(),
        pkey_table_len: port.pkeys.len(),
    };
    (facts, port.pkeys)
}

/// "PORT_ACTIVE (4)" -> (4, "ACTIVE"); "LINK_UP (5)" -> (5, "LINK_UP")
fn devinfo_numbered(text: &str) -> (u32, String) {
    let (name, rest) = text
        .split_once(" (")
        .unwrap_or_else(|| panic!("not 'NAME (N)': {text:?}"));
    let number = rest
        .strip_suffix(')')
        .unwrap_or_else(|| panic!("not 'NAME (N)': {text:?}"));
    let name = name.strip_prefix("PORT_").unwrap_or(name);
    (
        number.parse().unwrap_or_else(|e| panic!("{text:?}: {e}")),
        name.to_owned(),
    )
}

/// Parses the port section of `ibv_devinfo -v -d DEVICE -i PORT`; also returns its active MTU.
fn devinfo_port(device: &str) -> (PortFacts, u32) {
    let output = Command::new("ibv_devinfo")
        .args(["-v", "-d", device, "-i", &PORT.to_string()])
        .output()
        .expect("running ibv_devinfo (Debian package ibverbs-utils)");
    assert!(output.status.success(), "ibv_devinfo failed: {output:?}");
    let text = String::from_utf8(output.stdout).expect("ibv_devinfo output is UTF-8");
    let port_section = text
        .split_once(&format!("port:\t{PORT}\n"))
        .unwrap_or_else(|| panic!("no port {PORT} section in:\n{text}"))
        .1;
    let mut fields = BTreeMap::new();
    let mut gids = BTreeMap::new();
    for line in port_section.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        if let Some(index) = key.strip_prefix("GID[").and_then(|k| k.strip_suffix(']')) {
            let index: u32 = index
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{line:?}: {e}"));
            let (gid, kind) = value.split_once(", ").unwrap_or_else(|| panic!("{line:?}"));
            let gid = gid.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
            gids.insert(index, (gid, kind.to_owned()));
        } else {
            fields.insert(key.to_owned(), value.to_owned());
        }
    }
    let field = |name: &str| -> &str {
        fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{port_section}"))
    };
    let facts = PortFacts {
        state: devinfo_numbered(field("state")).0,
        phys_state: squash(&devinfo_numbered(field("phys_state")).1),
        link_layer: field("link_layer").to_owned(),
        lid: field("port_lid").parse().expect("port_lid"),
        sm_lid: field("sm_lid").parse().expect("sm_lid"),
        gids,
        pkey_table_len: field("pkey_tbl_len").parse().expect("pkey_tbl_len"),
    };
    let active_mtu = field("active_mtu")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .expect("active_mtu");
    (facts, active_mtu)
}

fn ipv4_mapped(addr: Ipv4Addr) -> Ipv6Addr {
    addr.to_ipv6_mapped()
}

#[test]
fn fabric_sysfs_port_facts_match_ibv_devinfo() {
    let test = "fabric_sysfs_port_facts_match_ibv_devinfo";
    let Some(vm) = support::rxe_vm_or_skip(test) else {
        return;
    };
    for (i, device) in vm.devices.iter().enumerate() {
        let (fabric, pkeys) = fabric_port(device);
        let (devinfo, _) = devinfo_port(device);
        assert_eq!(
            fabric, devinfo,
            "{device}: memkv-fabric and ibv_devinfo disagree"
        );
        // Facts the VM's setup fixes, so that agreeing on wrong values cannot pass.
        assert_eq!(fabric.state, 4, "{device}: state ACTIVE");
        assert_eq!(fabric.phys_state, "linkup", "{device}");
        assert_eq!(fabric.link_layer, "Ethernet", "{device}");
        assert_eq!(pkeys, vec![0xffff], "{device}: P_Key table");
        let gid = &fabric.gids[&u32::from(vm.gid_index)];
        let expected = (ipv4_mapped(vm.addrs[i]), GidType::RoceV2.to_string());
        assert_eq!(*gid, expected, "{device}: GID {}", vm.gid_index);
    }
}

#[test]
fn verbs_port_query_matches_ibv_devinfo() {
    let Some(vm) = support::rxe_vm_or_skip("verbs_port_query_matches_ibv_devinfo") else {
        return;
    };
    let expected_mtu = match std::env::var("MEMKV_RXE_MTU").as_deref() {
        Ok("9000") => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    };
    let list = DeviceList::new().expect("ibv_get_device_list");
    for (i, device) in vm.devices.iter().enumerate() {
        let context = list
            .iter()
            .find(|d| d.name() == *device)
            .unwrap_or_else(|| panic!("{device} not in the verbs device list"))
            .open()
            .expect("ibv_open_device");
        let port = context.query_port(PORT).expect("ibv_query_port");
        let (devinfo, devinfo_mtu) = devinfo_port(device);
        assert_eq!(port.port_state(), PortState::Active, "{device}");
        assert_eq!(port.port_state() as u32, devinfo.state, "{device}: state");
        assert_eq!(port.link_layer(), LinkLayer::Ethernet, "{device}");
        assert_eq!(u32::from(port.lid()), devinfo.lid, "{device}: LID");
        assert_eq!(port.active_mtu(), expected_mtu, "{device}: active MTU");
        assert_eq!(
            256u32 << (port.active_mtu() as u32 - 1),
            devinfo_mtu,
            "{device}: active MTU"
        );

        let table: BTreeMap<u32, Ipv6Addr> = context
            .query_gid_table()
            .expect("ibv_query_gid_table")
            .iter()
            .filter(|entry| entry.port_num() == u32::from(PORT))
            .map(|entry| (entry.gid_index(), Ipv6Addr::from(entry.gid())))
            .collect();
        let devinfo_gids: BTreeMap<u32, Ipv6Addr> = devinfo
            .gids
            .iter()
            .map(|(index, (gid, _))| (*index, *gid))
            .collect();
        assert_eq!(table, devinfo_gids, "{device}: GID table");
        assert_eq!(
            table[&u32::from(vm.gid_index)],
            ipv4_mapped(vm.addrs[i]),
            "{device}"
        );
    }
}
