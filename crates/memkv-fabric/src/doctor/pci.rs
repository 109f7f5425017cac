//! The PCI bus as sysfs shows it: devices, the bridges above each one (from the canonical path
//! of `/sys/bus/pci/devices/<bdf>`), and the ACS control register read from configuration space.

use super::host::HostRoot;

pub const VENDOR_NVIDIA: u16 = 0x10de;
pub const VENDOR_MELLANOX: u16 = 0x15b3;
/// PCI class of a PCI-to-PCI bridge (switch ports and root ports), as `0x0604xx`.
const CLASS_PCI_BRIDGE: u32 = 0x0604;
/// Extended capability ID of Access Control Services.
const ECAP_ACS: u32 = 0x000d;
/// Extended configuration space starts here; without root, sysfs returns only the first 64 bytes.
const EXTENDED_START: usize = 0x100;
/// Bounds the capability walk, so a looping list in corrupt bytes ends.
const MAX_CAPABILITIES: usize = 128;

/// ACS control bits (PCIe base spec, ACS Control Register), in `lspci`'s order and names.
pub const ACS_BITS: [(u16, &str); 7] = [
    (1 << 0, "SrcValid"),
    (1 << 1, "TransBlk"),
    (1 << 2, "ReqRedir"),
    (1 << 3, "CmpltRedir"),
    (1 << 4, "UpstreamFwd"),
    (1 << 5, "EgressCtrl"),
    (1 << 6, "DirectTrans"),
];
pub const ACS_REQ_REDIR: u16 = 1 << 2;
pub const ACS_CMPLT_REDIR: u16 = 1 << 3;
pub const ACS_DIRECT_TRANS: u16 = 1 << 6;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    pub bdf: String,
    pub vendor: u16,
    /// 24-bit class code, e.g. 0x030200 for a 3D controller.
    pub class: u32,
    /// Bridges and devices above this one, root first (from the canonical sysfs path).
    pub ancestors: Vec<String>,
}

impl PciDevice {
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor == VENDOR_NVIDIA && self.class >> 16 == 0x03
    }

    pub fn is_mellanox_nic(&self) -> bool {
        self.vendor == VENDOR_MELLANOX && self.class >> 16 == 0x02
    }

    pub fn is_bridge(&self) -> bool {
        self.class >> 8 == CLASS_PCI_BRIDGE
    }
}

/// `0000:03:00.0`.
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|i| b[*i].is_ascii_hexdigit())
        && (b'0'..=b'7').contains(&b[11])
}

fn parse_hex(text: &str) -> Option<u32> {
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// Every device under `/sys/bus/pci/devices`.
pub fn devices(root: &HostRoot) -> Vec<PciDevice> {
    root.list("/sys/bus/pci/devices")
        .into_iter()
        .filter(|n| is_bdf(n))
        .filter_map(|bdf| device(root, &bdf))
        .collect()
}

pub fn device(root: &HostRoot, bdf: &str) -> Option<PciDevice> {
    let dir = format!("/sys/bus/pci/devices/{bdf}");
    let vendor = parse_hex(&root.read(&format!("{dir}/vendor"))?)? as u16;
    let class = parse_hex(&root.read(&format!("{dir}/class"))?)?;
    Some(PciDevice {
        bdf: bdf.to_owned(),
        vendor,
        class,
        ancestors: ancestors(root, bdf),
    })
}

/// BDFs on the canonical path of the device, root first, without the device itself.
fn ancestors(root: &HostRoot, bdf: &str) -> Vec<String> {
    let Ok(real) = std::fs::canonicalize(root.path(&format!("/sys/bus/pci/devices/{bdf}"))) else {
        return Vec::new();
    };
    let mut chain: Vec<String> = real
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| is_bdf(c))
        .map(str::to_owned)
        .collect();
    if chain.last().map(String::as_str) == Some(bdf) {
        chain.pop();
    }
    chain
}

/// The PCI function behind an RDMA device (`/sys/class/infiniband/<dev>/device`), if any.
pub fn rdma_device_bdf(root: &HostRoot, device: &str) -> Option<String> {
    let real =
        std::fs::canonicalize(root.path(&format!("/sys/class/infiniband/{device}/device"))).ok()?;
    let name = real.file_name()?.to_str()?;
    is_bdf(name).then(|| name.to_owned())
}

/// What configuration space says about ACS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcsState {
    /// The ACS control register.
    Control(u16),
    /// The extended capability list has no ACS entry.
    NoCapability,
    /// Extended configuration space could not be read (only `n` bytes: not root).
    Unreadable(String),
}

/// Walks the extended capability list for ACS. Never panics, whatever the bytes.
pub fn acs_from_config(config: &[u8]) -> AcsState {
    if config.len() < EXTENDED_START + 8 {
        return AcsState::Unreadable(format!(
            "only {} bytes of configuration space are readable (the extended space needs root)",
            config.len()
        ));
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(config.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = EXTENDED_START;
    for _ in 0..MAX_CAPABILITIES {
        let Some(header) = u32_at(at) else {
            return AcsState::NoCapability;
        };
        if header == 0 || header == u32::MAX {
            return AcsState::NoCapability;
        }
        if header & 0xffff == ECAP_ACS {
            return match config.get(at + 6..at + 8) {
                Some(b) => AcsState::Control(u16::from_le_bytes([b[0], b[1]])),
                None => AcsState::Unreadable("ACS capability cut off".into()),
            };
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < EXTENDED_START {
            return AcsState::NoCapability;
        }
        at = next;
    }
    AcsState::NoCapability
}

/// `SrcValid+ TransBlk- ReqRedir+ ...`, as `lspci -vvv` prints ACSCtl.
pub fn acs_text(control: u16) -> String {
    ACS_BITS
        .iter()
        .map(|(bit, name)| format!("{name}{}", if control & bit != 0 { '+' } else { '-' }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Builds configuration-space bytes with one ACS capability; for tests and fixtures.
pub fn config_with_acs(control: u16) -> Vec<u8> {
    let mut config = vec![0u8; 4096];
    // A first capability (AER, id 0x0001) pointing at ACS, so the walk follows a link.
    let aer: u32 = 0x0001 | (1 << 16) | (0x140 << 20);
    config[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
    let acs: u32 = ECAP_ACS | (1 << 16);
    config[0x140..0x144].copy_from_slice(&acs.to_le_bytes());
    config[0x144..0x146].copy_from_slice(&0x007fu16.to_le_bytes());
    config[0x146..0x148].copy_from_slice(&control.to_le_bytes());
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acs_control_is_found_through_the_capability_list() {
        assert_eq!(
            acs_from_config(&config_with_acs(0x1d)),
            AcsState::Control(0x1d)
        );
        assert_eq!(
            acs_text(0x1d),
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
        );
        assert_eq!(acs_from_config(&vec![0u8; 4096]), AcsState::NoCapability);
        assert!(matches!(
            acs_from_config(&[0u8; 64]),
            AcsState::Unreadable(_)
        ));
    }

    #[test]
    fn a_looping_capability_list_ends() {
        let mut config = vec![0u8; 4096];
        let looping: u32 = 0x0001 | (0x100 << 20);
        config[0x100..0x104].copy_from_slice(&looping.to_le_bytes());
        assert_eq!(acs_from_config(&config), AcsState::NoCapability);
    }

    #[test]
    fn bdfs_are_recognised() {
        assert!(is_bdf("0000:03:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:03:00.8"));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_config_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4200)) {
            let _ = acs_from_config(&bytes);
        }
    }
}
