//! Facts about the Soft-RoCE ports, read three ways and compared: the kernel's sysfs tree
//! (/sys/class/infiniband), `ibv_devinfo -v` (rdma-core's own tool) and verbs through sideway.
//! The sysfs reader here is the test's own; memkv-fabric's reader should take its place once it
//! exists. Outside the VM these tests report themselves skipped.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{LinkLayer, Mtu, PortState};

const PORT: u8 = 1;

/// One port's facts, in the form both sources can be brought to.
#[derive(Debug, PartialEq)]
struct PortFacts {
    state: (u32, String),
    phys_state: u32,
    link_layer: String,
    lid: u32,
    sm_lid: u32,
    /// Non-zero GIDs by index, with their type ("RoCE v2").
    gids: BTreeMap<u32, (Ipv6Addr, String)>,
    pkey_table_len: usize,
}

fn read_trimmed(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// "4: ACTIVE" -> (4, "ACTIVE")
fn numbered(text: &str) -> (u32, String) {
    let (number, name) = text
        .split_once(": ")
        .unwrap_or_else(|| panic!("not 'N: NAME': {text:?}"));
    (
        number.parse().unwrap_or_else(|e| panic!("{text:?}: {e}")),
        name.to_owned(),
    )
}

fn hex(text: &str) -> u32 {
    let digits = text
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("not hex: {text:?}"));
    u32::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn entry_count(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .count()
}

fn sysfs_port(device: &str) -> (PortFacts, Vec<u32>) {
    let port = Path::new("/sys/class/infiniband")
        .join(device)
        .join("ports")
        .join(PORT.to_string());
    let mut gids = BTreeMap::new();
    for index in 0..entry_count(&port.join("gids")) as u32 {
        let text = read_trimmed(&port.join(format!("gids/{index}")));
        let gid: Ipv6Addr = text
            .parse()
            .unwrap_or_else(|e| panic!("gid {index} {text:?}: {e}"));
        if !gid.is_unspecified() {
            gids.insert(
                index,
                (
                    gid,
                    read_trimmed(&port.join(format!("gid_attrs/types/{index}"))),
                ),
            );
        }
    }
    let pkey_table_len = entry_count(&port.join("pkeys"));
    let pkeys = (0..pkey_table_len).map(|i| hex(&read_trimmed(&port.join(format!("pkeys/{i}")))));
    let facts = PortFacts {
        state: numbered(&read_trimmed(&port.join("state"))),
        phys_state: numbered(&read_trimmed(&port.join("phys_state"))).0,
        link_layer: read_trimmed(&port.join("link_layer")),
        lid: hex(&read_trimmed(&port.join("lid"))),
        sm_lid: hex(&read_trimmed(&port.join("sm_lid"))),
        gids,
        pkey_table_len,
    };
    (facts, pkeys.collect())
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
        state: devinfo_numbered(field("state")),
        phys_state: devinfo_numbered(field("phys_state")).0,
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
fn sysfs_port_facts_match_ibv_devinfo() {
    let Some(vm) = support::rxe_vm_or_skip("sysfs_port_facts_match_ibv_devinfo") else {
        return;
    };
    for (i, device) in vm.devices.iter().enumerate() {
        let (sysfs, pkeys) = sysfs_port(device);
        let (devinfo, _) = devinfo_port(device);
        assert_eq!(sysfs, devinfo, "{device}: sysfs and ibv_devinfo disagree");
        // Facts the VM's setup fixes, so that agreeing on wrong values cannot pass.
        assert_eq!(sysfs.state, (4, "ACTIVE".to_owned()), "{device}");
        assert_eq!(sysfs.link_layer, "Ethernet", "{device}");
        assert_eq!(pkeys, vec![0xffff], "{device}: P_Key table");
        let gid = &sysfs.gids[&u32::from(vm.gid_index)];
        assert_eq!(
            *gid,
            (ipv4_mapped(vm.addrs[i]), "RoCE v2".to_owned()),
            "{device}"
        );
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
        assert_eq!(port.port_state() as u32, devinfo.state.0, "{device}: state");
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
