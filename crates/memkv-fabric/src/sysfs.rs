//! Reads device and port facts from `/sys/class/infiniband` (or a fixture tree with that layout).
//!
//! Active MTU is not in sysfs on every kernel, so it comes from a verbs port query
//! (see `crate::verbs` (`PortQuery`)); everything else here is plain text files.

use crate::error::FabricError;
use crate::types::{DeviceInfo, Gid, GidEntry, GidType, LinkLayer, PortFacts, PortState};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The real sysfs class directory.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// Upper bound on table entries read from one directory, so a corrupt tree cannot make us
/// allocate without limit (real tables hold at most a few hundred entries).
pub const MAX_TABLE_ENTRIES: usize = 4096;

/// A reader rooted at a directory laid out like `/sys/class/infiniband`.
#[derive(Debug, Clone)]
pub struct SysfsReader {
    root: PathBuf,
}

impl Default for SysfsReader {
    fn default() -> Self {
        Self::new(SYSFS_INFINIBAND)
    }
}

impl SysfsReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when the class directory exists (the kernel has RDMA support loaded).
    pub fn class_present(&self) -> bool {
        self.root.is_dir()
    }

    /// Device names, sorted. A missing class directory means no devices.
    pub fn devices(&self) -> Result<Vec<String>, FabricError> {
        let mut names = match fs::read_dir(&self.root) {
            Ok(dir) => dir
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .take(MAX_TABLE_ENTRIES)
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(sysfs_err(&self.root, &e)),
        };
        names.sort();
        Ok(names)
    }

    /// Port numbers of a device, ascending.
    pub fn ports(&self, device: &str) -> Result<Vec<u8>, FabricError> {
        let dir = self.root.join(device).join("ports");
        let mut ports = numbered_entries(&dir)?
            .into_iter()
            .filter_map(|n| u8::try_from(n).ok())
            .filter(|n| *n > 0)
            .collect::<Vec<_>>();
        ports.sort_unstable();
        Ok(ports)
    }

    pub fn device_info(&self, device: &str) -> DeviceInfo {
        let dir = self.root.join(device);
        let driver = fs::read_link(dir.join("device").join("driver"))
            .ok()
            .and_then(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned));
        DeviceInfo {
            node_type: read_opt(&dir.join("node_type")),
            fw_ver: read_opt(&dir.join("fw_ver")),
            hca_type: read_opt(&dir.join("hca_type")),
            driver,
            dc_supported: false,
        }
    }

    /// Reads one port. `active_mtu`, `max_mtu` and `dc_supported` are left for verbs to fill.
    pub fn port(&self, device: &str, port: u8) -> Result<PortFacts, FabricError> {
        let dir = self.port_dir(device, port);
        if !dir.is_dir() {
            return Err(FabricError::UnknownPort {
                device: device.to_owned(),
                port,
            });
        }
        let link_text = read_required(&dir.join("link_layer"))?;
        let link_layer = LinkLayer::parse(&link_text).ok_or_else(|| FabricError::Sysfs {
            path: dir.join("link_layer").display().to_string(),
            reason: format!("unknown link layer {:?}", truncate(&link_text)),
        })?;
        let state_text = read_required(&dir.join("state"))?;
        let state = PortState::parse_sysfs(&state_text).ok_or_else(|| FabricError::Sysfs {
            path: dir.join("state").display().to_string(),
            reason: format!("unparsable port state {:?}", truncate(&state_text)),
        })?;
        let phys_state = read_opt(&dir.join("phys_state")).map(|t| {
            t.split_once(':')
                .map_or(t.as_str(), |(_, s)| s)
                .trim()
                .to_owned()
        });
        let lid = match link_layer {
            LinkLayer::InfiniBand => self.read_lid(device, port)?,
            LinkLayer::Ethernet => None,
        };
        let sm_lid = read_opt(&dir.join("sm_lid"))
            .and_then(|t| parse_hex_u16(&t))
            .filter(|l| *l != 0);
        Ok(PortFacts {
            device: device.to_owned(),
            port,
            link_layer,
            state,
            phys_state,
            lid,
            sm_lid,
            gids: self.gid_table(device, port, link_layer)?,
            pkeys: self.pkey_table(device, port)?,
            active_mtu: None,
            max_mtu: None,
            verbs_error: None,
            device_info: self.device_info(device),
        })
    }

    /// The port's current LID; `None` while the subnet manager has not assigned one (0x0).
    pub fn read_lid(&self, device: &str, port: u8) -> Result<Option<u16>, FabricError> {
        let path = self.port_dir(device, port).join("lid");
        let text = read_required(&path)?;
        let lid = parse_hex_u16(&text).ok_or_else(|| FabricError::Sysfs {
            path: path.display().to_string(),
            reason: format!("unparsable LID {:?}", truncate(&text)),
        })?;
        Ok(Some(lid).filter(|l| *l != 0))
    }

    /// Current logical state of a port.
    pub fn read_state(&self, device: &str, port: u8) -> Result<PortState, FabricError> {
        let path = self.port_dir(device, port).join("state");
        let text = read_required(&path)?;
        PortState::parse_sysfs(&text).ok_or_else(|| FabricError::Sysfs {
            path: path.display().to_string(),
            reason: format!("unparsable port state {:?}", truncate(&text)),
        })
    }

    /// Populated GID entries. Unused entries read as all zeros and their type file fails
    /// (EINVAL on rxe), so both are skipped rather than treated as errors.
    pub fn gid_table(
        &self,
        device: &str,
        port: u8,
        link_layer: LinkLayer,
    ) -> Result<Vec<GidEntry>, FabricError> {
        let dir = self.port_dir(device, port);
        let mut entries = Vec::new();
        for index in numbered_entries(&dir.join("gids"))? {
            let Some(gid) = read_opt(&dir.join("gids").join(index.to_string()))
                .and_then(|t| Gid::parse(&t))
                .filter(|g| !g.is_zero())
            else {
                continue;
            };
            let type_path = dir.join("gid_attrs/types").join(index.to_string());
            let gid_type = match (read_opt(&type_path).as_deref(), link_layer) {
                (Some("RoCE v2"), _) => GidType::RoceV2,
                (Some(_), LinkLayer::Ethernet) => GidType::RoceV1,
                (_, LinkLayer::InfiniBand) => GidType::InfiniBand,
                (None, LinkLayer::Ethernet) => continue,
            };
            let netdev = read_opt(&dir.join("gid_attrs/ndevs").join(index.to_string()));
            entries.push(GidEntry {
                index,
                gid,
                gid_type,
                netdev,
            });
        }
        entries.sort_by_key(|e| e.index);
        Ok(entries)
    }

    /// The P_Key table in index order. Entries are contiguous from 0; a gap ends the table.
    pub fn pkey_table(&self, device: &str, port: u8) -> Result<Vec<u16>, FabricError> {
        let dir = self.port_dir(device, port).join("pkeys");
        let mut indices = numbered_entries(&dir)?;
        indices.sort_unstable();
        let mut table = Vec::with_capacity(indices.len());
        for (expected, index) in indices.into_iter().enumerate() {
            if index as usize != expected {
                break;
            }
            let path = dir.join(index.to_string());
            let text = read_required(&path)?;
            let pkey = parse_hex_u16(&text).ok_or_else(|| FabricError::Sysfs {
                path: path.display().to_string(),
                reason: format!("unparsable P_Key {:?}", truncate(&text)),
            })?;
            table.push(pkey);
        }
        Ok(table)
    }

    pub fn port_dir(&self, device: &str, port: u8) -> PathBuf {
        self.root.join(device).join("ports").join(port.to_string())
    }
}

/// Names of a directory's entries that are decimal numbers (table indices).
fn numbered_entries(dir: &Path) -> Result<Vec<u32>, FabricError> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(rd
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
            .take(MAX_TABLE_ENTRIES)
            .collect()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(sysfs_err(dir, &e)),
    }
}

fn read_required(path: &Path) -> Result<String, FabricError> {
    fs::read_to_string(path)
        .map(|t| t.trim().to_owned())
        .map_err(|e| sysfs_err(path, &e))
}

fn read_opt(path: &Path) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

fn sysfs_err(path: &Path, e: &std::io::Error) -> FabricError {
    FabricError::Sysfs {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Parses `0x80ff` (sysfs LIDs and P_Keys are hex with a prefix).
pub fn parse_hex_u16(text: &str) -> Option<u16> {
    let t = text.trim();
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
    u16::from_str_radix(digits, 16).ok()
}

fn truncate(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing_accepts_kernel_forms_only() {
        assert_eq!(parse_hex_u16("0x80ff\n"), Some(0x80ff));
        assert_eq!(parse_hex_u16("0x0"), Some(0));
        assert_eq!(parse_hex_u16("80ff"), None);
        assert_eq!(parse_hex_u16("0x1ffff"), None);
    }

    #[test]
    fn missing_class_directory_means_no_devices() {
        let reader = SysfsReader::new("/nonexistent/memkv-fabric-test/infiniband");
        assert!(!reader.class_present());
        assert_eq!(reader.devices().unwrap(), Vec::<String>::new());
    }
}
