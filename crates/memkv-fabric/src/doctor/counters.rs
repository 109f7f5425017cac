//! Counters under load (RoCE runbook "Validate under load"), read twice `--watch` seconds
//! apart, with the runbook's polarity: rising pause on memkv's priority is good (the fabric
//! pauses instead of dropping); rising drops or sequence errors mean it is not lossless; RDMA
//! bytes leaving on priority 0 mean traffic is not classified.

use super::finding::Finding;
use super::host::{HostProbe, HostRoot, NicStats};
use std::collections::BTreeMap;

/// NIC statistics whose rise means packets were dropped (the runbook's `ethtool -S` grep).
fn is_drop_counter(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["discard", "drop", "out_of_buffer"]
        .iter()
        .any(|p| n.contains(p))
}

/// RDMA port `hw_counters` whose rise means the fabric lost packets: the runbook's mlx5 names,
/// and Soft-RoCE's equivalents (sequence errors, retries exhausted).
pub const RDMA_LOSS_COUNTERS: [&str; 7] = [
    "out_of_buffer",
    "packet_seq_err",
    "local_ack_timeout_err",
    "out_of_sequence",
    "rcvd_seq_err",
    "out_of_seq_request",
    "retry_exceeded_err",
];

/// RDMA counters that show traffic moved (mlx5 port counters, rxe hw_counters).
const RDMA_TRAFFIC_COUNTERS: [&str; 4] =
    ["port_xmit_data", "port_rcv_data", "sent_pkts", "rcvd_pkts"];

/// One reading of a rail's NIC statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicReading {
    pub netdev: String,
    /// `ethtool -S`: Ok(None) without an ethtool binary.
    pub ethtool: Result<Option<NicStats>, String>,
    /// `/sys/class/net/<netdev>/statistics/*`, always present on Linux.
    pub sysfs: NicStats,
}

/// One reading of an RDMA port's `hw_counters` and `counters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortReading {
    pub device: String,
    pub port: u8,
    /// None when the port has no hw_counters directory.
    pub hw: Option<NicStats>,
    pub port_counters: NicStats,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterSnapshot {
    pub nics: Vec<NicReading>,
    pub ports: Vec<PortReading>,
}

/// Numeric files of a directory (non-numeric ones such as `lifespan` are skipped).
fn numeric_files(root: &HostRoot, dir: &str) -> Option<NicStats> {
    if !root.path(dir).is_dir() {
        return None;
    }
    Some(
        root.list(dir)
            .into_iter()
            .filter(|name| name != "lifespan")
            .filter_map(|name| {
                let value = root.read(&format!("{dir}/{name}"))?.parse::<u64>().ok()?;
                Some((name, value))
            })
            .collect(),
    )
}

/// Reads every rail's NIC statistics and every RDMA port's counters once.
pub fn read_snapshot(
    root: &HostRoot,
    probe: &dyn HostProbe,
    netdevs: &[String],
    ports: &[(String, u8)],
) -> CounterSnapshot {
    let nics = netdevs
        .iter()
        .map(|netdev| NicReading {
            netdev: netdev.clone(),
            ethtool: probe.ethtool_stats(netdev),
            sysfs: numeric_files(root, &format!("/sys/class/net/{netdev}/statistics"))
                .unwrap_or_default(),
        })
        .collect();
    let ports = ports
        .iter()
        .map(|(device, port)| {
            let dir = format!("/sys/class/infiniband/{device}/ports/{port}");
            PortReading {
                device: device.clone(),
                port: *port,
                hw: numeric_files(root, &format!("{dir}/hw_counters")),
                port_counters: numeric_files(root, &format!("{dir}/counters")).unwrap_or_default(),
            }
        })
        .collect();
    CounterSnapshot { nics, ports }
}

/// How the counters present in both readings moved.
#[derive(Debug, Default)]
struct Deltas {
    rose: BTreeMap<String, u64>,
    /// Counters that went backwards other than by a 32-bit wrap: zeroed during the watch (driver
    /// reload, `ethtool` reset), so how far they rose is unknown.
    reset: BTreeMap<String, (u64, u64)>,
}

impl Deltas {
    fn extend(&mut self, other: Deltas) {
        self.rose.extend(other.rose);
        self.reset.extend(other.reset);
    }

    fn get(&self, name: &str) -> Option<u64> {
        self.rose.get(name).copied()
    }
}

/// A decrease is a wrap when the counter fits 32 bits and the wrapped rise is less than half the
/// counter's range (serial-number arithmetic, RFC 1982): mlx5 `hw_counters` are 32-bit queue
/// counters that wrap under load, and a loss counter that wrapped must not read as flat. A small
/// counter dropping a little was zeroed instead, and is not taken for four billion drops.
fn delta(before: u64, after: u64) -> Option<u64> {
    if after >= before {
        return Some(after - before);
    }
    const RANGE: u64 = 1 << 32;
    let wrapped = (before <= u32::MAX as u64).then(|| RANGE - before + after)?;
    (wrapped < RANGE / 2).then_some(wrapped)
}

fn deltas(before: &NicStats, after: &NicStats) -> Deltas {
    let old: BTreeMap<&str, u64> = before.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut out = Deltas::default();
    for (name, value) in after {
        let Some(was) = old.get(name.as_str()) else {
            continue;
        };
        match delta(*was, *value) {
            Some(d) => {
                out.rose.insert(name.clone(), d);
            }
            None => {
                out.reset.insert(name.clone(), (*was, *value));
            }
        }
    }
    out
}

/// The counters among `reset` that `pick` selects, for the finding's text.
fn reset_of(d: &Deltas, pick: impl Fn(&str) -> bool) -> Vec<String> {
    d.reset
        .iter()
        .filter(|(n, _)| pick(n))
        .map(|(n, (was, now))| format!("{n} {was} -> {now}"))
        .collect()
}

/// The words added to a finding's read when counters were zeroed during the watch.
fn reset_note(reset: &[String]) -> String {
    if reset.is_empty() {
        String::new()
    } else {
        format!(
            "; reset during the watch (how far they rose is unknown): {}",
            reset.join(", ")
        )
    }
}

fn rising(d: &Deltas, pick: impl Fn(&str) -> bool) -> Vec<String> {
    d.rose
        .iter()
        .filter(|(n, v)| **v > 0 && pick(n))
        .map(|(n, v)| format!("{n} +{v}"))
        .collect()
}

/// The line shown when `--watch` was not given.
pub fn not_watched() -> Finding {
    Finding::ok(
        "counters.watch",
        "host",
        "not watched: run `memkv net doctor --watch 10` under load to read pause, drop and \
         sequence-error counters before and after",
    )
}

/// Judges two readings `seconds` apart. `priority_of` gives memkv's priority on a netdev.
pub fn judge(
    before: &CounterSnapshot,
    after: &CounterSnapshot,
    seconds: u64,
    priority_of: &dyn Fn(&str) -> u8,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut rdma_traffic = false;
    let mut port_findings = Vec::new();
    for a in &after.ports {
        let Some(b) = before
            .ports
            .iter()
            .find(|b| b.device == a.device && b.port == a.port)
        else {
            continue;
        };
        let (f, moved) = judge_port(b, a, seconds);
        rdma_traffic |= moved;
        port_findings.push(f);
    }
    for a in &after.nics {
        let Some(b) = before.nics.iter().find(|b| b.netdev == a.netdev) else {
            continue;
        };
        out.push(judge_nic(
            b,
            a,
            seconds,
            priority_of(&a.netdev),
            rdma_traffic,
        ));
    }
    out.extend(port_findings);
    out
}

fn judge_port(before: &PortReading, after: &PortReading, seconds: u64) -> (Finding, bool) {
    const CHECK: &str = "counters.rdma";
    let subject = format!("{} port {}", after.device, after.port);
    let dir = format!(
        "/sys/class/infiniband/{}/ports/{}/hw_counters",
        after.device, after.port
    );
    let (Some(b), Some(a)) = (&before.hw, &after.hw) else {
        return (
            Finding::warn(
                CHECK,
                subject,
                format!("no {dir}: sequence errors cannot be watched"),
            ),
            false,
        );
    };
    let mut d = deltas(b, a);
    d.extend(deltas(&before.port_counters, &after.port_counters));
    let moved = RDMA_TRAFFIC_COUNTERS
        .iter()
        .any(|n| d.get(n).is_some_and(|v| v > 0));
    let is_loss = |n: &str| RDMA_LOSS_COUNTERS.contains(&n);
    let lost = rising(&d, is_loss);
    let lost_reset = reset_of(&d, is_loss);
    let watched: Vec<&str> = RDMA_LOSS_COUNTERS
        .iter()
        .copied()
        .filter(|n| d.rose.contains_key(*n))
        .collect();
    let traffic = rising(&d, |n| RDMA_TRAFFIC_COUNTERS.contains(&n));
    let traffic = if traffic.is_empty() {
        "no RDMA traffic moved (run the watch under load)".to_owned()
    } else {
        traffic.join(", ")
    };
    let reset = reset_note(&reset_of(&d, |_| true));
    let grep =
        format!("grep -r . {dir}/ | grep -iE 'out_of_buffer|packet_seq_err|local_ack_timeout_err'");
    let finding = if !lost.is_empty() {
        Finding::fail(CHECK, subject, format!("over {seconds} s: rising {}; {traffic}{reset}", lost.join(", ")))
            .symptom("the fabric is dropping and is not yet lossless: transfers retry and fail with IBV_WC_RETRY_EXC_ERR")
            .fix(grep)
            .fix("make the path lossless end to end: roce.pfc/roce.dscp on every host, nv set qos roce mode lossless on every switch")
    } else if !lost_reset.is_empty() {
        Finding::warn(
            CHECK,
            subject,
            format!("over {seconds} s: {traffic}{reset}"),
        )
        .symptom("a loss counter was zeroed during the watch, so this watch cannot show the fabric lossless")
        .fix(format!("memkv net doctor --watch {seconds}   # again, under load"))
        .fix(grep)
    } else {
        Finding::ok(
            CHECK,
            subject,
            format!(
                "over {seconds} s: {traffic}; flat: {}{reset}",
                if watched.is_empty() {
                    "no loss counters found".into()
                } else {
                    watched.join(", ")
                }
            ),
        )
    };
    (finding, moved)
}

fn judge_nic(
    before: &NicReading,
    after: &NicReading,
    seconds: u64,
    priority: u8,
    rdma_traffic: bool,
) -> Finding {
    const CHECK: &str = "counters.nic";
    let netdev = &after.netdev;
    // The runbook judges drops by `ethtool -S`. sysfs statistics also count frames the kernel
    // stack discards (an LLDP frame nobody listens for), which RoCE traffic never reaches, so
    // they stand in only without ethtool and can then only warn.
    let (d, ethtool_note, have_ethtool) = match (&before.ethtool, &after.ethtool) {
        (Ok(Some(b)), Ok(Some(a))) => (deltas(b, a), String::new(), true),
        (Ok(None), _) | (_, Ok(None)) => (
            deltas(&before.sysfs, &after.sysfs),
            "; ethtool not installed: per-priority pause and byte counters unread (sysfs statistics only)".to_owned(),
            false,
        ),
        (Err(e), _) | (_, Err(e)) => (
            deltas(&before.sysfs, &after.sysfs),
            format!("; ethtool -S failed: {e} (sysfs statistics only)"),
            false,
        ),
    };
    let drops = rising(&d, is_drop_counter);
    let drops_reset = reset_of(&d, is_drop_counter);
    let pause_name = format!("prio{priority}_pause");
    let pause = rising(&d, |n| n.contains(&pause_name));
    let bytes = |p: u8| d.get(&format!("tx_prio{p}_bytes"));
    let mut notes = Vec::new();
    if !pause.is_empty() {
        notes.push(format!(
            "{} (good: the fabric pauses instead of dropping)",
            pause.join(", ")
        ));
    } else if have_ethtool {
        notes.push(format!("no pause on priority {priority}"));
    }
    if let (Some(zero), Some(mine)) = (bytes(0), bytes(priority)) {
        notes.push(format!(
            "tx_prio0_bytes +{zero}, tx_prio{priority}_bytes +{mine}"
        ));
    }
    let drop_read = if drops.is_empty() {
        "drop counters flat".to_owned()
    } else {
        format!("rising {}", drops.join(", "))
    };
    let read = format!(
        "over {seconds} s: {drop_read}; {}{}{ethtool_note}",
        if notes.is_empty() {
            "no pause or priority byte counters".to_owned()
        } else {
            notes.join("; ")
        },
        reset_note(&reset_of(&d, |_| true))
    );
    let grep_drops =
        format!("ethtool -S {netdev} | grep -iE 'discard|drop|out_of_buffer|rx_discards_phy'");
    if !drops.is_empty() && have_ethtool {
        return Finding::fail(CHECK, netdev, read)
            .symptom(
                "these drops are the source of IBV_WC_RETRY_EXC_ERR: the fabric is not lossless",
            )
            .fix(grep_drops)
            .fix(format!(
                "sudo mlnx_qos -i {netdev} --pfc {}",
                pfc_for(priority)
            ))
            .fix("on every switch: nv set qos roce mode lossless; nv config apply");
    }
    if let (Some(zero), Some(mine)) = (bytes(0), bytes(priority))
        && rdma_traffic
        && zero > 0
        && mine == 0
    {
        return Finding::fail(CHECK, netdev, read)
            .symptom(format!("RDMA bytes leave on priority 0, not {priority}: traffic is not classified into the lossless class (IBV_WC_RETRY_EXC_ERR under incast)"))
            .fix(format!("sudo mlnx_qos -i {netdev} --trust dscp\nsudo mlnx_qos -i {netdev} --dscp2prio set,26,{priority}"))
            .fix(format!("ethtool -S {netdev} | grep -E 'tx_prio[0{priority}]_bytes'"));
    }
    if !drops.is_empty() {
        return Finding::warn(CHECK, netdev, read)
            .symptom("the kernel's statistics count the stack's own drops too (frames no one listens for, such as LLDP), so they cannot tell whether the fabric dropped RoCE packets (IBV_WC_RETRY_EXC_ERR)")
            .fix(format!("install ethtool, then under load: {grep_drops}"));
    }
    if !drops_reset.is_empty() {
        return Finding::warn(CHECK, netdev, read)
            .symptom("a drop counter was zeroed during the watch, so this watch cannot show the fabric lossless")
            .fix(format!("memkv net doctor --watch {seconds}   # again, under load"))
            .fix(grep_drops);
    }
    Finding::ok(CHECK, netdev, read)
}

fn pfc_for(priority: u8) -> String {
    (0..8u8)
        .map(|p| if p == priority { "1" } else { "0" })
        .collect::<Vec<_>>()
        .join(",")
}
