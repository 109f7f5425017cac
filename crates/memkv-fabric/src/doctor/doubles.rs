//! TEST DOUBLES for doctor: a [`HostProbe`] answering from files in a fixture tree, and
//! [`HostFixture`], which writes such trees (sysfs, procfs, /etc and the probe's files) for
//! hosts this project's machines are not: mlx5 RoCE and InfiniBand ports, GPUs behind PCIe
//! switches, ACS bits in configuration space. Nothing here was copied from a real machine.
//!
//! The probe's files live under `<root>/test-doubles/`:
//! - `dcb/<netdev>`: `pfc 0,0,0,1,0,0,0,0` and `dscp2prio 26,3` lines (mlnx_qos's syntax), or
//!   `errno 95`; encoded into dcbnl reply bytes and parsed by the real parser. Missing: the
//!   netdev has no DCB (EOPNOTSUPP).
//! - `neigh`: `ip -4 neigh show` lines. Missing: an empty table.
//! - `ethtool/<netdev>`: `ethtool -S` output. Missing: the host has no ethtool.
//! - `journal`: this boot's journal (`journalctl -b -o short`). Missing: empty.
//! - `unit-journal/<unit>`: this boot's journal of one unit (`journalctl -u <unit> -b`).
//!   Missing: the lines of `journal` that name the unit (without its `.service`), as far as
//!   a fixture without unit fields can select by unit.

use super::host::{HostProbe, NicStats, filter_lines, parse_ethtool_stats, read_trimmed};
use super::neigh::{Neighbour, parse_ip_neigh};
use crate::dcb::{DcbReply, build, parse_dcb_reply};
use std::path::{Component, Path, PathBuf};

const EOPNOTSUPP: i32 = 95;

/// TEST DOUBLE for [`super::SystemProbe`].
#[derive(Debug, Clone)]
pub struct FixtureProbe {
    dir: PathBuf,
}

impl FixtureProbe {
    /// `root` is the fixture tree (the same directory given to `HostRoot`).
    pub fn new(root: impl AsRef<Path>) -> Self {
        Self {
            dir: root.as_ref().join("test-doubles"),
        }
    }
}

/// Encodes a `dcb/<netdev>` fixture file as the kernel's reply bytes.
pub fn dcb_reply_bytes(netdev: &str, spec: &str) -> Result<Vec<u8>, String> {
    let mut pfc = None;
    let mut apps = Vec::new();
    for line in spec.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once(' ')
            .ok_or_else(|| format!("dcb fixture line {line:?}"))?;
        let bad = || format!("dcb fixture for {netdev}: bad line {line:?}");
        match key {
            "errno" => return Ok(build::error_reply(value.trim().parse().map_err(|_| bad())?)),
            "pfc" => {
                let bits: Vec<&str> = value.split(',').collect();
                if bits.len() != 8 {
                    return Err(bad());
                }
                let mut mask = 0u8;
                for (p, b) in bits.iter().enumerate() {
                    match b.trim() {
                        "1" => mask |= 1 << p,
                        "0" => {}
                        _ => return Err(bad()),
                    }
                }
                pfc = Some(mask);
            }
            "dscp2prio" => {
                let (d, p) = value.split_once(',').ok_or_else(bad)?;
                apps.push((
                    d.trim().parse().map_err(|_| bad())?,
                    p.trim().parse().map_err(|_| bad())?,
                ));
            }
            _ => return Err(bad()),
        }
    }
    Ok(build::ieee_reply(netdev, pfc, &apps))
}

impl HostProbe for FixtureProbe {
    fn dcb(&self, netdev: &str) -> Result<DcbReply, String> {
        let bytes = match read_trimmed(&self.dir.join("dcb").join(netdev)) {
            Some(spec) => dcb_reply_bytes(netdev, &spec)?,
            None => build::error_reply(EOPNOTSUPP),
        };
        parse_dcb_reply(&bytes).map_err(|e| e.to_string())
    }

    fn neighbours(&self) -> Result<Vec<Neighbour>, String> {
        parse_ip_neigh(&read_trimmed(&self.dir.join("neigh")).unwrap_or_default())
    }

    fn ethtool_stats(&self, netdev: &str) -> Result<Option<NicStats>, String> {
        Ok(read_trimmed(&self.dir.join("ethtool").join(netdev)).map(|t| parse_ethtool_stats(&t)))
    }

    fn boot_journal(&self, patterns: &[&str]) -> Result<Vec<String>, String> {
        Ok(filter_lines(
            &read_trimmed(&self.dir.join("journal")).unwrap_or_default(),
            patterns,
        ))
    }

    fn unit_journal(&self, unit: &str) -> Result<Vec<String>, String> {
        match std::fs::read_to_string(self.dir.join("unit-journal").join(unit)) {
            Ok(text) => Ok(text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect()),
            Err(_) => self.boot_journal(&[unit.trim_end_matches(".service")]),
        }
    }
}

/// TEST DOUBLE writer: builds a host tree under a directory. Paths are given as on a real host
/// (`/sys/class/net/...`).
#[derive(Debug, Clone)]
pub struct HostFixture {
    root: PathBuf,
}

/// A RoCE port to write: device, netdev, MAC, IPv4 address, PCI function (None: Soft-RoCE).
#[derive(Debug, Clone)]
pub struct RocePort<'a> {
    pub device: &'a str,
    pub netdev: &'a str,
    pub mac: &'a str,
    pub ipv4: Option<&'a str>,
    pub pci: Option<&'a str>,
    pub driver: &'a str,
}

impl HostFixture {
    /// Starts an empty tree at `root` (removing what was there).
    pub fn create(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        std::fs::create_dir_all(&root)?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn at(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    /// Writes a file, creating its directories.
    pub fn file(&self, absolute: &str, content: impl AsRef<[u8]>) -> &Self {
        let path = self.at(absolute);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("fixture directory");
        }
        std::fs::write(&path, content).expect("fixture file");
        self
    }

    /// A relative symlink at `link` pointing at `target` (both host paths), as sysfs has them.
    pub fn symlink(&self, link: &str, target: &str) -> &Self {
        let link_path = self.at(link);
        let dir = link_path.parent().expect("link has a parent");
        std::fs::create_dir_all(dir).expect("fixture directory");
        let up = Path::new(link.trim_start_matches('/'))
            .parent()
            .map_or(0, |p| {
                p.components()
                    .filter(|c| matches!(c, Component::Normal(_)))
                    .count()
            });
        let mut rel = PathBuf::new();
        for _ in 0..up {
            rel.push("..");
        }
        rel.push(target.trim_start_matches('/'));
        let _ = std::fs::remove_file(&link_path);
        std::os::unix::fs::symlink(rel, link_path).expect("fixture symlink");
        self
    }

    pub fn kernel(&self, release: &str) -> &Self {
        self.file("/proc/sys/kernel/osrelease", format!("{release}\n"))
    }

    /// `/proc/modules` with these modules loaded; `at_boot` also lists them in modules-load.d.
    pub fn modules(&self, names: &[&str], at_boot: bool) -> &Self {
        let text: String = names
            .iter()
            .map(|n| format!("{n} 4096 0 - Live 0x0000000000000000\n"))
            .collect();
        self.file("/proc/modules", text);
        if at_boot {
            self.file("/etc/modules-load.d/rdma.conf", names.join("\n") + "\n");
        }
        self
    }

    /// A PCI function below the bridges in `parents` (root port first), with its class,
    /// vendor and configuration space bytes.
    pub fn pci(
        &self,
        parents: &[&str],
        bdf: &str,
        vendor: u16,
        class: u32,
        config: &[u8],
    ) -> &Self {
        let mut dir = String::from("/sys/devices/pci0000:00");
        for p in parents {
            dir.push('/');
            dir.push_str(p);
        }
        dir.push('/');
        dir.push_str(bdf);
        self.file(&format!("{dir}/vendor"), format!("{vendor:#06x}\n"));
        self.file(&format!("{dir}/class"), format!("{class:#08x}\n"));
        self.file(&format!("{dir}/config"), config);
        self.symlink(&format!("/sys/bus/pci/devices/{bdf}"), &dir)
    }

    fn pci_dir(&self, bdf: &str) -> Option<String> {
        let real = std::fs::canonicalize(self.at(&format!("/sys/bus/pci/devices/{bdf}"))).ok()?;
        let rel = real
            .strip_prefix(std::fs::canonicalize(&self.root).ok()?)
            .ok()?;
        Some(format!("/{}", rel.display()))
    }

    fn port_common(
        &self,
        device: &str,
        link_layer: &str,
        driver: &str,
        pci: Option<&str>,
    ) -> String {
        let dev = format!("/sys/class/infiniband/{device}");
        let port = format!("{dev}/ports/1");
        self.file(&format!("{port}/link_layer"), format!("{link_layer}\n"));
        self.file(&format!("{port}/state"), "4: ACTIVE\n");
        self.file(&format!("{port}/phys_state"), "5: LinkUp\n");
        self.file(&format!("{port}/pkeys/0"), "0xffff\n");
        self.file(&format!("{port}/verbs/active_mtu"), "4096\n");
        self.file(&format!("{port}/verbs/max_mtu"), "4096\n");
        self.file(&format!("{port}/hw_counters/out_of_buffer"), "0\n");
        self.file(&format!("{port}/hw_counters/packet_seq_err"), "0\n");
        self.file(&format!("{port}/hw_counters/local_ack_timeout_err"), "0\n");
        self.file(&format!("{port}/counters/port_xmit_data"), "0\n");
        self.file(&format!("{dev}/node_type"), "1: CA\n");
        match pci.and_then(|bdf| self.pci_dir(bdf)) {
            Some(pci_dir) => {
                self.symlink(&format!("{dev}/device"), &pci_dir);
                let drivers = format!("/sys/bus/pci/drivers/{driver}");
                std::fs::create_dir_all(self.at(&drivers)).expect("fixture directory");
                self.symlink(&format!("{pci_dir}/driver"), &drivers);
            }
            None => {
                self.file(&format!("{dev}/parent"), "");
            }
        }
        port
    }

    /// A RoCE port with its netdev (MAC, ifindex, statistics) and, if given, IPv4 GIDs.
    pub fn roce_port(&self, p: &RocePort<'_>) -> &Self {
        let port = self.port_common(p.device, "Ethernet", p.driver, p.pci);
        if p.pci.is_none() {
            self.file(
                &format!("/sys/class/infiniband/{}/parent", p.device),
                format!("{}\n", p.netdev),
            );
        }
        let mac_bytes: Vec<u8> = p
            .mac
            .split(':')
            .filter_map(|b| u8::from_str_radix(b, 16).ok())
            .collect();
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        if mac_bytes.len() == 6 {
            link_local[8..11].copy_from_slice(&mac_bytes[0..3]);
            link_local[8] ^= 2;
            link_local[11] = 0xff;
            link_local[12] = 0xfe;
            link_local[13..16].copy_from_slice(&mac_bytes[3..6]);
        }
        let gid_text = |b: [u8; 16]| {
            b.chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect::<Vec<_>>()
                .join(":")
        };
        let mut gids = vec![(0, gid_text(link_local), "RoCE v2")];
        if let Some(ip) = p.ipv4.and_then(|t| t.parse::<std::net::Ipv4Addr>().ok()) {
            let mut mapped = [0u8; 16];
            mapped[10] = 0xff;
            mapped[11] = 0xff;
            mapped[12..].copy_from_slice(&ip.octets());
            gids.push((1, gid_text(mapped), "RoCE v2"));
        }
        for (i, gid, kind) in gids {
            self.file(&format!("{port}/gids/{i}"), format!("{gid}\n"));
            self.file(&format!("{port}/gid_attrs/types/{i}"), format!("{kind}\n"));
            self.file(
                &format!("{port}/gid_attrs/ndevs/{i}"),
                format!("{}\n", p.netdev),
            );
        }
        let net = format!("/sys/class/net/{}", p.netdev);
        self.file(&format!("{net}/address"), format!("{}\n", p.mac));
        for name in ["rx_dropped", "tx_dropped", "rx_bytes", "tx_bytes"] {
            self.file(&format!("{net}/statistics/{name}"), "0\n");
        }
        self
    }

    /// An InfiniBand port; `lid` None models a port the subnet manager has not reached.
    pub fn ib_port(&self, device: &str, lid: Option<u16>, sm_lid: u16, pci: Option<&str>) -> &Self {
        let port = self.port_common(device, "InfiniBand", "mlx5_core", pci);
        self.file(&format!("{port}/lid"), format!("{:#x}\n", lid.unwrap_or(0)));
        self.file(&format!("{port}/sm_lid"), format!("{sm_lid:#x}\n"));
        if lid.is_none() {
            self.file(&format!("{port}/state"), "2: INIT\n");
        }
        self.file(
            &format!("{port}/gids/0"),
            "fe80:0000:0000:0000:0002:c903:0001:0203\n",
        );
        self
    }

    /// `net.ipv4.conf.<dev>.<key> = value`.
    pub fn sysctl(&self, dev: &str, key: &str, value: u8) -> &Self {
        self.file(
            &format!("/proc/sys/net/ipv4/conf/{dev}/{key}"),
            format!("{value}\n"),
        )
    }

    /// arp_ignore / arp_announce for `all` and each rail.
    pub fn arp_sysctls(&self, rails: &[&str], ignore: u8, announce: u8) -> &Self {
        self.sysctl("all", "arp_ignore", 0)
            .sysctl("all", "arp_announce", 0);
        for r in rails {
            self.sysctl(r, "arp_ignore", ignore)
                .sysctl(r, "arp_announce", announce);
        }
        self
    }

    pub fn ecn(&self, netdev: &str, priority: u8, rp: u8, np: u8) -> &Self {
        self.file(
            &format!("/sys/class/net/{netdev}/ecn/roce_rp/enable/{priority}"),
            format!("{rp}\n"),
        );
        self.file(
            &format!("/sys/class/net/{netdev}/ecn/roce_np/enable/{priority}"),
            format!("{np}\n"),
        )
    }

    pub fn dcb(&self, netdev: &str, spec: &str) -> &Self {
        self.file(&format!("/test-doubles/dcb/{netdev}"), spec)
    }

    pub fn neighbours(&self, ip_neigh: &str) -> &Self {
        self.file("/test-doubles/neigh", ip_neigh)
    }

    pub fn ethtool(&self, netdev: &str, stats: &str) -> &Self {
        self.file(&format!("/test-doubles/ethtool/{netdev}"), stats)
    }

    pub fn journal(&self, text: &str) -> &Self {
        self.file("/test-doubles/journal", text)
    }

    /// What `journalctl -u <unit> -b` prints on this host.
    pub fn unit_journal(&self, unit: &str, text: &str) -> &Self {
        self.file(&format!("/test-doubles/unit-journal/{unit}"), text)
    }
}
