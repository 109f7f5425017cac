//! IPv4 neighbour (ARP) entries, as the kernel reports them and as `ip neigh show` prints them
//! (the text form is what fixture trees hold).

use serde::Serialize;
use std::fmt;
use std::net::Ipv4Addr;

/// `ndm_state` bits (linux/neighbour.h).
pub mod nud {
    pub const INCOMPLETE: u16 = 0x01;
    pub const REACHABLE: u16 = 0x02;
    pub const STALE: u16 = 0x04;
    pub const DELAY: u16 = 0x08;
    pub const PROBE: u16 = 0x10;
    pub const FAILED: u16 = 0x20;
    pub const NOARP: u16 = 0x40;
    pub const PERMANENT: u16 = 0x80;
    /// Names in `ip neigh` order.
    pub const NAMES: [(u16, &str); 8] = [
        (INCOMPLETE, "INCOMPLETE"),
        (REACHABLE, "REACHABLE"),
        (STALE, "STALE"),
        (DELAY, "DELAY"),
        (PROBE, "PROBE"),
        (FAILED, "FAILED"),
        (NOARP, "NOARP"),
        (PERMANENT, "PERMANENT"),
    ];
}

/// One neighbour-table entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Neighbour {
    pub ip: Ipv4Addr,
    pub dev: String,
    /// Lower-case `aa:bb:cc:dd:ee:ff`; None for an unresolved entry.
    pub mac: Option<String>,
    pub state: u16,
}

impl Neighbour {
    /// Entries `ip neigh flush` leaves in place.
    pub fn is_static(&self) -> bool {
        self.state & (nud::PERMANENT | nud::NOARP) != 0
    }

    pub fn state_names(&self) -> String {
        let names: Vec<&str> = nud::NAMES
            .iter()
            .filter(|(bit, _)| self.state & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "NONE".into()
        } else {
            names.join(",")
        }
    }
}

impl fmt::Display for Neighbour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dev {}", self.ip, self.dev)?;
        if let Some(mac) = &self.mac {
            write!(f, " lladdr {mac}")?;
        }
        write!(f, " {}", self.state_names())
    }
}

/// Formats link-layer address bytes as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `ip -4 neigh show` output, one entry per line:
/// `192.0.2.2 dev vethA lladdr 02:00:00:00:00:02 PERMANENT`. Lines that are not IPv4 entries
/// are errors naming the line, so a broken fixture is noticed.
pub fn parse_ip_neigh(text: &str) -> Result<Vec<Neighbour>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("neighbour line {}: {why}: {line:?}", n + 1);
        let mut words = line.split_whitespace();
        let ip = words
            .next()
            .and_then(|w| w.parse::<Ipv4Addr>().ok())
            .ok_or_else(|| bad("no IPv4 address first"))?;
        let (mut dev, mut mac, mut state) = (None, None, 0u16);
        while let Some(word) = words.next() {
            match word {
                "dev" => dev = words.next().map(str::to_owned),
                "lladdr" => mac = words.next().map(str::to_ascii_lowercase),
                "router" | "proxy" | "extern_learn" => {}
                other => match nud::NAMES.iter().find(|(_, name)| *name == other) {
                    Some((bit, _)) => state |= bit,
                    None => return Err(bad(&format!("unknown word {other:?}"))),
                },
            }
        }
        out.push(Neighbour {
            ip,
            dev: dev.ok_or_else(|| bad("no dev"))?,
            mac,
            state,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_neigh_lines_parse() {
        let n = parse_ip_neigh(
            "192.0.2.2 dev vethA lladdr 02:AA:00:00:00:02 PERMANENT\n\
             198.51.100.9 dev eth0 FAILED\n\
             10.0.0.1 dev eth0 lladdr 02:00:00:00:00:01 router REACHABLE\n",
        )
        .unwrap();
        assert_eq!(n.len(), 3);
        assert_eq!(n[0].mac.as_deref(), Some("02:aa:00:00:00:02"));
        assert!(n[0].is_static());
        assert!(!n[1].is_static());
        assert_eq!(n[1].mac, None);
        assert_eq!(
            n[0].to_string(),
            "192.0.2.2 dev vethA lladdr 02:aa:00:00:00:02 PERMANENT"
        );
    }

    #[test]
    fn broken_lines_are_named() {
        let e = parse_ip_neigh("fe80::1 dev eth0 STALE").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        assert!(parse_ip_neigh("10.0.0.1 lladdr 02:00:00:00:00:01 STALE").is_err());
        assert!(parse_ip_neigh("10.0.0.1 dev e WOBBLY").is_err());
    }
}
