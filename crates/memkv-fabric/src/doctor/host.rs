//! Where doctor reads from. Files (sysfs, procfs, /etc) are read below a root directory, `/` on
//! a real host and a fixture tree in tests; what is not a file (dcbnl, the neighbour table,
//! `ethtool -S`, the journal) comes through [`HostProbe`].

use super::neigh::Neighbour;
use crate::dcb::DcbReply;
use std::path::{Path, PathBuf};

/// A directory standing for `/`.
#[derive(Debug, Clone)]
pub struct HostRoot {
    root: PathBuf,
}

impl Default for HostRoot {
    fn default() -> Self {
        Self::new("/")
    }
}

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `absolute` (e.g. `/sys/class/net`) below the root.
    pub fn path(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    /// The trimmed text of a file, or None when it is missing, unreadable or empty.
    pub fn read(&self, absolute: &str) -> Option<String> {
        read_trimmed(&self.path(absolute))
    }

    pub fn exists(&self, absolute: &str) -> bool {
        self.path(absolute).exists()
    }

    /// Names in a directory, sorted; empty when it is missing.
    pub fn list(&self, absolute: &str) -> Vec<String> {
        list_dir(&self.path(absolute))
    }
}

pub(crate) fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

pub(crate) fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .take(crate::sysfs::MAX_TABLE_ENTRIES)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// NIC statistics as `ethtool -S` prints them: name and value, in the driver's order.
pub type NicStats = Vec<(String, u64)>;

/// Host facts that are not files. [`SystemProbe`] asks the kernel and the system's tools; the
/// test double `doctor::doubles::FixtureProbe` reads files in a fixture tree.
pub trait HostProbe {
    /// The netdev's IEEE DCB configuration (one dcbnl `DCB_CMD_IEEE_GET`).
    fn dcb(&self, netdev: &str) -> Result<DcbReply, String>;
    /// The IPv4 neighbour table (`ip -4 neigh show`).
    fn neighbours(&self) -> Result<Vec<Neighbour>, String>;
    /// `ethtool -S <netdev>`; `Ok(None)` when the host has no ethtool.
    fn ethtool_stats(&self, netdev: &str) -> Result<Option<NicStats>, String>;
    /// This boot's journal lines that mention one of `patterns` (`journalctl -b`).
    fn boot_journal(&self, patterns: &[&str]) -> Result<Vec<String>, String>;
    /// This boot's journal of one unit (`journalctl -u <unit> -b`): selected by the unit,
    /// whatever the text says (systemd may log "Finished <Description>." without the name).
    fn unit_journal(&self, unit: &str) -> Result<Vec<String>, String>;
}

/// The real host: rtnetlink for DCB and neighbours, the `ethtool` and `journalctl` binaries.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemProbe;

impl HostProbe for SystemProbe {
    fn dcb(&self, netdev: &str) -> Result<DcbReply, String> {
        crate::dcb::query_ieee_dcb(netdev)
    }

    fn neighbours(&self) -> Result<Vec<Neighbour>, String> {
        super::netlink::ipv4_neighbours(&HostRoot::default())
    }

    fn ethtool_stats(&self, netdev: &str) -> Result<Option<NicStats>, String> {
        crate::dcb::wire::check_ifname(netdev)?;
        // Private driver counters (per-priority pause, rx_discards_phy) exist only behind the
        // SIOCETHTOOL ioctl, not in ethtool's netlink API; the ethtool binary is the safe way.
        let output = match std::process::Command::new("ethtool")
            .args(["-S", netdev])
            .output()
        {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot run ethtool: {e}")),
        };
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            return Err(format!("ethtool -S {netdev}: {}", err.trim()));
        }
        Ok(Some(parse_ethtool_stats(&String::from_utf8_lossy(
            &output.stdout,
        ))))
    }

    fn boot_journal(&self, patterns: &[&str]) -> Result<Vec<String>, String> {
        let text = journalctl(&["-b", "-q", "--no-pager", "-o", "short"])?;
        Ok(filter_lines(&text, patterns))
    }

    fn unit_journal(&self, unit: &str) -> Result<Vec<String>, String> {
        let text = journalctl(&["-u", unit, "-b", "-q", "--no-pager", "-o", "short"])?;
        Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// `journalctl ARGS`' standard output.
fn journalctl(args: &[&str]) -> Result<String, String> {
    let output = match std::process::Command::new("journalctl").args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("journalctl is not installed".into());
        }
        Err(e) => return Err(format!("cannot run journalctl: {e}")),
    };
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(format!("journalctl {}: {}", args.join(" "), err.trim()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Lines containing any of `patterns`.
pub fn filter_lines(text: &str, patterns: &[&str]) -> Vec<String> {
    text.lines()
        .filter(|l| patterns.iter().any(|p| l.contains(p)))
        .map(str::to_owned)
        .collect()
}

/// Parses `ethtool -S` output (`NIC statistics:` then `     name: value` lines).
pub fn parse_ethtool_stats(text: &str) -> NicStats {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            Some((name.trim().to_owned(), value.trim().parse::<u64>().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_output_parses_and_skips_the_header() {
        let stats = parse_ethtool_stats(
            "NIC statistics:\n     rx_prio3_pause: 12\n     tx_prio0_bytes: 0\n     bad: x\n",
        );
        assert_eq!(
            stats,
            vec![
                ("rx_prio3_pause".to_owned(), 12),
                ("tx_prio0_bytes".to_owned(), 0)
            ]
        );
    }

    #[test]
    fn root_joins_absolute_paths() {
        let root = HostRoot::new("/tmp/fixture");
        assert_eq!(
            root.path("/sys/class/net"),
            PathBuf::from("/tmp/fixture/sys/class/net")
        );
    }
}
