//! Facts about RDMA devices and ports, as read from sysfs and verbs.

use serde::Serialize;
use std::fmt;
use std::net::Ipv6Addr;

/// How a port addresses its peers. Decided once per port at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LinkLayer {
    /// Native InfiniBand: peers are named by LID, no GRH, one subnet.
    InfiniBand,
    /// Ethernet (RoCE): peers are named by GID carried in a GRH.
    Ethernet,
}

impl LinkLayer {
    /// Parses the sysfs `link_layer` file ("InfiniBand" / "Ethernet").
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "InfiniBand" => Some(Self::InfiniBand),
            "Ethernet" => Some(Self::Ethernet),
            _ => None,
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InfiniBand => "InfiniBand",
            Self::Ethernet => "Ethernet",
        })
    }
}

/// Logical port state (IBTA numbering, as in sysfs `state` and `ibv_port_attr.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PortState {
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    /// A value this build does not know (a newer kernel); kept rather than guessed.
    Other(u32),
}

impl PortState {
    pub fn from_code(code: u32) -> Self {
        match code {
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            other => Self::Other(other),
        }
    }

    /// Parses sysfs text such as `4: ACTIVE`.
    pub fn parse_sysfs(text: &str) -> Option<Self> {
        let code = text.split(':').next()?.trim().parse::<u32>().ok()?;
        Some(Self::from_code(code))
    }

    pub fn is_active(self) -> bool {
        self == Self::Active
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Down => f.write_str("DOWN"),
            Self::Init => f.write_str("INIT"),
            Self::Armed => f.write_str("ARMED"),
            Self::Active => f.write_str("ACTIVE"),
            Self::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            Self::Other(code) => write!(f, "state {code}"),
        }
    }
}

/// A 128-bit GID, stored in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Parses the sysfs form `fe80:0000:0000:0000:0202:c9ff:fe01:0203` (any IPv6 text form).
    pub fn parse(text: &str) -> Option<Self> {
        text.trim()
            .parse::<Ipv6Addr>()
            .ok()
            .map(|a| Self(a.octets()))
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The upper 64 bits: the subnet prefix on InfiniBand.
    pub fn subnet_prefix(&self) -> u64 {
        let mut hi = [0u8; 8];
        hi.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(hi)
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// fe80::/10, derived from the MAC; says nothing about the netdev's configured addresses.
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which wire format a GID table entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GidType {
    /// Native InfiniBand GID (on an InfiniBand port the sysfs type text is "IB/RoCE v1").
    InfiniBand,
    RoceV1,
    RoceV2,
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InfiniBand => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
        })
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Gid,
    pub gid_type: GidType,
    /// The netdev the entry belongs to (RoCE only).
    pub netdev: Option<String>,
}

/// An InfiniBand path MTU: one of the five values the IBTA defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "u32")]
pub enum Mtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

impl Mtu {
    pub const DEFAULT: Mtu = Mtu::Mtu4096;

    pub fn bytes(self) -> u32 {
        match self {
            Self::Mtu256 => 256,
            Self::Mtu512 => 512,
            Self::Mtu1024 => 1024,
            Self::Mtu2048 => 2048,
            Self::Mtu4096 => 4096,
        }
    }

    pub fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Self::Mtu256),
            512 => Some(Self::Mtu512),
            1024 => Some(Self::Mtu1024),
            2048 => Some(Self::Mtu2048),
            4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// From the verbs enum `ibv_mtu` (1 = 256 ... 5 = 4096).
    pub fn from_verbs(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Mtu256),
            2 => Some(Self::Mtu512),
            3 => Some(Self::Mtu1024),
            4 => Some(Self::Mtu2048),
            5 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// The verbs enum value, for `ibv_qp_attr.path_mtu`.
    pub fn verbs_code(self) -> u32 {
        match self {
            Self::Mtu256 => 1,
            Self::Mtu512 => 2,
            Self::Mtu1024 => 3,
            Self::Mtu2048 => 4,
            Self::Mtu4096 => 5,
        }
    }
}

impl From<Mtu> for u32 {
    fn from(mtu: Mtu) -> u32 {
        mtu.bytes()
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// Partition membership, from the top bit of a P_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Membership {
    Full,
    Limited,
}

impl Membership {
    pub fn of_pkey(pkey: u16) -> Self {
        if pkey & 0x8000 != 0 {
            Self::Full
        } else {
            Self::Limited
        }
    }
}

impl fmt::Display for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "full",
            Self::Limited => "limited",
        })
    }
}

/// Everything memkv needs to know about one port, gathered at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortFacts {
    pub device: String,
    pub port: u8,
    pub link_layer: LinkLayer,
    pub state: PortState,
    /// Physical state text as the kernel prints it ("LinkUp"), if known.
    pub phys_state: Option<String>,
    /// None when the subnet manager has not assigned one (sysfs reads 0x0), and always on RoCE.
    pub lid: Option<u16>,
    pub sm_lid: Option<u16>,
    pub gids: Vec<GidEntry>,
    /// The P_Key table in index order; 0x0000 entries are kept (they mean "not a member").
    pub pkeys: Vec<u16>,
    /// Negotiated MTU, from a verbs port query. None when verbs could not be asked.
    pub active_mtu: Option<Mtu>,
    pub max_mtu: Option<Mtu>,
    /// Why the verbs port query failed, when it did (active MTU is then unknown).
    pub verbs_error: Option<String>,
    pub device_info: DeviceInfo,
}

impl PortFacts {
    /// The populated GID table entry at `index`, if any.
    pub fn gid(&self, index: u32) -> Option<&GidEntry> {
        self.gids.iter().find(|g| g.index == index)
    }

    /// The port's own subnet prefix: that of GID 0 on InfiniBand.
    pub fn subnet_prefix(&self) -> Option<u64> {
        self.gid(0).map(|g| g.gid.subnet_prefix())
    }
}

/// Device-level facts (shared by all ports of a device).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    pub node_type: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    /// Kernel driver bound to the device ("mlx5_core", "rdma_rxe"), when sysfs shows one.
    pub driver: Option<String>,
    /// Whether the device supports Dynamically Connected transport; only ever true on mlx5.
    pub dc_supported: bool,
}

impl DeviceInfo {
    pub fn is_mlx5(&self, device: &str) -> bool {
        self.driver.as_deref() == Some("mlx5_core") || device.starts_with("mlx5_")
    }
}

/// A minimal port for unit tests of the policy modules.
#[cfg(test)]
pub(crate) fn test_port(
    link_layer: LinkLayer,
    gids: &[(u32, &str, GidType)],
    pkeys: &[u16],
) -> PortFacts {
    PortFacts {
        device: "dev0".into(),
        port: 1,
        link_layer,
        state: PortState::Active,
        phys_state: None,
        lid: (link_layer == LinkLayer::InfiniBand).then_some(7),
        sm_lid: None,
        gids: gids
            .iter()
            .map(|(index, gid, gid_type)| GidEntry {
                index: *index,
                gid: Gid::parse(gid).unwrap(),
                gid_type: *gid_type,
                netdev: (link_layer == LinkLayer::Ethernet).then(|| "eth0".to_owned()),
            })
            .collect(),
        pkeys: pkeys.to_vec(),
        active_mtu: Some(Mtu::Mtu4096),
        max_mtu: Some(Mtu::Mtu4096),
        verbs_error: None,
        device_info: DeviceInfo::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_parses_sysfs_form_and_finds_prefix_and_ipv4() {
        let gid = Gid::parse("fe80:0000:0000:0000:0202:c9ff:fe01:0203").unwrap();
        assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert!(gid.is_link_local());
        let v4 = Gid::parse("0000:0000:0000:0000:0000:ffff:c000:0201").unwrap();
        assert_eq!(v4.ipv4(), Some(std::net::Ipv4Addr::new(192, 0, 2, 1)));
        assert!(Gid::parse("zz").is_none());
    }

    #[test]
    fn port_state_parses_kernel_text() {
        assert_eq!(
            PortState::parse_sysfs("4: ACTIVE\n"),
            Some(PortState::Active)
        );
        assert_eq!(PortState::parse_sysfs("2: INIT"), Some(PortState::Init));
        assert_eq!(PortState::parse_sysfs("9: NEW"), Some(PortState::Other(9)));
        assert_eq!(PortState::parse_sysfs("garbage"), None);
    }

    #[test]
    fn membership_is_the_top_bit() {
        assert_eq!(Membership::of_pkey(0xffff), Membership::Full);
        assert_eq!(Membership::of_pkey(0x7fff), Membership::Limited);
        assert_eq!(Membership::of_pkey(0x8001), Membership::Full);
    }

    #[test]
    fn mtu_round_trips_bytes_and_verbs_codes() {
        for bytes in [256, 512, 1024, 2048, 4096] {
            let mtu = Mtu::from_bytes(bytes).unwrap();
            assert_eq!(mtu.bytes(), bytes);
            assert_eq!(Mtu::from_verbs(mtu.verbs_code()), Some(mtu));
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_verbs(0), None);
    }
}
