//! GPUDirect RDMA and ACS (RoCE runbook "Enable GPU-Direct RDMA"): NVIDIA GPUs and RDMA NICs on
//! the PCI bus, which pairs share a PCIe switch, the IOMMU, the ACS control bits of every bridge
//! on a shared-switch GPU-NIC path, and whether systemd silently dropped the one-shot that
//! clears ACS ("ordering cycle").

use super::finding::{Finding, Status};
use super::host::HostRoot;
use super::pci::{
    ACS_CMPLT_REDIR, ACS_DIRECT_TRANS, ACS_REQ_REDIR, AcsState, PciDevice, acs_from_config,
    acs_text,
};
use std::collections::BTreeMap;

pub const ACS_UNIT: &str = "/etc/systemd/system/disable-pcie-acs.service";
/// The ACS one-shot's unit name, as `journalctl -u` takes it.
pub const ACS_UNIT_NAME: &str = "disable-pcie-acs.service";

/// A GPU and a NIC below one PCIe switch (what `nvidia-smi topo -m` calls PIX).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSwitchPair {
    pub gpu: String,
    pub nic: String,
    /// The lowest bridge above both.
    pub via: String,
    /// Bridges between the two, the common one included.
    pub bridges: Vec<String>,
}

/// GPUs, NICs and the pairs that share a switch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    pub gpus: Vec<PciDevice>,
    pub nics: Vec<PciDevice>,
    pub pairs: Vec<SharedSwitchPair>,
}

/// `nic_bdfs`: PCI functions of the RDMA devices doctor looks at (Mellanox NICs are added when
/// no device filter applies).
pub fn topology(all: &[PciDevice], nic_bdfs: &[String], include_mellanox: bool) -> Topology {
    let by_bdf: BTreeMap<&str, &PciDevice> = all.iter().map(|d| (d.bdf.as_str(), d)).collect();
    let gpus: Vec<PciDevice> = all.iter().filter(|d| d.is_nvidia_gpu()).cloned().collect();
    let nics: Vec<PciDevice> = all
        .iter()
        .filter(|d| nic_bdfs.contains(&d.bdf) || (include_mellanox && d.is_mellanox_nic()))
        .cloned()
        .collect();
    let is_bridge = |bdf: &String| by_bdf.get(bdf.as_str()).is_some_and(|d| d.is_bridge());
    let mut pairs = Vec::new();
    for gpu in &gpus {
        for nic in &nics {
            let common = gpu
                .ancestors
                .iter()
                .zip(&nic.ancestors)
                .take_while(|(a, b)| a == b)
                .count();
            if common == 0 {
                continue; // they meet only at the root complex
            }
            let via = gpu.ancestors[common - 1].clone();
            let mut bridges = vec![via.clone()];
            bridges.extend(gpu.ancestors[common..].iter().cloned());
            bridges.extend(nic.ancestors[common..].iter().cloned());
            bridges.retain(|b| is_bridge(b));
            bridges.dedup();
            pairs.push(SharedSwitchPair {
                gpu: gpu.bdf.clone(),
                nic: nic.bdf.clone(),
                via,
                bridges,
            });
        }
    }
    Topology { gpus, nics, pairs }
}

pub fn topology_finding(t: &Topology) -> Finding {
    const CHECK: &str = "gpudirect.topology";
    if t.gpus.is_empty() {
        return Finding::ok(
            CHECK,
            "host",
            "no NVIDIA GPUs on the PCI bus: the GPUDirect checks do not apply",
        );
    }
    if t.nics.is_empty() {
        return Finding::ok(
            CHECK,
            "host",
            format!("{} NVIDIA GPUs, no RDMA NIC on the PCI bus", t.gpus.len()),
        );
    }
    let pairs = if t.pairs.is_empty() {
        "no GPU shares a PCIe switch with a NIC (every pair crosses the root complex)".to_owned()
    } else {
        format!(
            "sharing a PCIe switch (PIX): {}",
            t.pairs
                .iter()
                .map(|p| format!("GPU {} - NIC {} via {}", p.gpu, p.nic, p.via))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Finding::ok(
        CHECK,
        "host",
        format!(
            "{} NVIDIA GPUs, {} RDMA NICs; {pairs}",
            t.gpus.len(),
            t.nics.len()
        ),
    )
}

/// Whether the IOMMU is on: any `/sys/class/iommu` entry, plus the command line's iommu words.
pub fn iommu(root: &HostRoot) -> (bool, Finding) {
    let units = root.list("/sys/class/iommu");
    let cmdline = root.read("/proc/cmdline").unwrap_or_default();
    let words: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| w.to_ascii_lowercase().contains("iommu"))
        .collect();
    let words = if words.is_empty() {
        "none".to_owned()
    } else {
        words.join(" ")
    };
    let on = !units.is_empty();
    let read = if on {
        format!(
            "IOMMU on ({}); kernel command line iommu settings: {words}",
            units.join(", ")
        )
    } else {
        format!(
            "IOMMU off (no /sys/class/iommu entries); kernel command line iommu settings: {words}"
        )
    };
    (on, Finding::ok("gpudirect.iommu", "host", read))
}

/// One finding per bridge on a shared-switch GPU-NIC path.
pub fn acs(root: &HostRoot, t: &Topology, iommu_on: bool) -> Vec<Finding> {
    const CHECK: &str = "gpudirect.acs";
    let mut paths: BTreeMap<&str, Vec<&SharedSwitchPair>> = BTreeMap::new();
    for p in &t.pairs {
        for b in &p.bridges {
            paths.entry(b.as_str()).or_default().push(p);
        }
    }
    let iommu_note = if iommu_on {
        "the IOMMU is on, but the root complex may not reflect the transaction"
    } else {
        "the IOMMU is off, so redirected transactions have nowhere to be translated"
    };
    paths
        .into_iter()
        .map(|(bridge, pairs)| {
            let on_path = pairs.iter().map(|p| format!("GPU {} - NIC {}", p.gpu, p.nic)).collect::<Vec<_>>().join(", ");
            let config = std::fs::read(root.path(&format!("/sys/bus/pci/devices/{bridge}/config"))).unwrap_or_default();
            match acs_from_config(&config) {
                AcsState::NoCapability => Finding::ok(CHECK, bridge, format!("no ACS capability (on the path {on_path})")),
                AcsState::Unreadable(why) => Finding::warn(CHECK, bridge, format!("ACSCtl unread: {why} (on the path {on_path})"))
                    .fix(format!("sudo lspci -vvv -s {bridge} | grep ACSCtl   # or run memkv net doctor as root")),
                AcsState::Control(ctl) => {
                    let read = format!("ACSCtl: {} (on the path {on_path})", acs_text(ctl));
                    let redirect = ctl & (ACS_REQ_REDIR | ACS_CMPLT_REDIR) != 0;
                    let status = match (redirect, ctl & ACS_DIRECT_TRANS != 0) {
                        (false, _) => Status::Ok,
                        (true, false) => Status::Fail,
                        (true, true) => Status::Warn,
                    };
                    let f = Finding::new(CHECK, bridge, status).read(read);
                    if status == Status::Ok {
                        return f;
                    }
                    f.symptom(format!(
                        "peer-to-peer DMA between {on_path} is forced up to the root complex instead of through the switch; {iommu_note}: GPUDirect transfers fail with IBV_WC_REM_OP_ERR (completion status 11) for the GPU closest to the NIC while GPUs on other switches keep working"
                    ))
                    .fix(format!("sudo setpci -s {bridge} ECAP_ACS+6.w=0000"))
                    .fix(format!("sudo lspci -vvv -s {bridge} | grep ACSCtl   # expect ReqRedir- CmpltRedir-"))
                    .fix("# to survive reboots: install disable-pcie-acs.sh and disable-pcie-acs.service (docs/fabric.md)")
                }
            }
        })
        .collect()
}

/// The one-shot that clears ACS at boot: installed, and did it run, or did systemd drop it for
/// an ordering cycle (which `systemctl is-enabled` does not show)?
///
/// `journal`: this boot's journal lines naming the unit (for systemd's ordering-cycle message,
/// which is logged on the unit that broke the cycle); `unit_journal`: `journalctl -u
/// disable-pcie-acs.service -b`, which selects the unit's own lines whatever their text
/// (systemd may log "Finished <Description>." without the unit name).
pub fn acs_unit(
    root: &HostRoot,
    journal: Option<&Result<Vec<String>, String>>,
    unit_journal: Option<&Result<Vec<String>, String>>,
    acs_problem: bool,
) -> Finding {
    const CHECK: &str = "gpudirect.acs-unit";
    if !root.exists(ACS_UNIT) {
        return if acs_problem {
            Finding::warn(CHECK, "host", format!("{ACS_UNIT} is not installed"))
                .symptom("ACS cleared by hand comes back on at the next reboot, and GPUDirect fails again with IBV_WC_REM_OP_ERR status 11")
                .fix("install /usr/local/sbin/disable-pcie-acs.sh and disable-pcie-acs.service as in docs/fabric.md (RoCE runbook), then:\nsudo systemctl daemon-reload\nsudo systemctl enable --now disable-pcie-acs.service")
        } else {
            Finding::ok(
                CHECK,
                "host",
                format!("{ACS_UNIT} not installed; no bridge on a GPU-NIC path redirects"),
            )
        };
    }
    let lines = match journal {
        Some(Ok(lines)) => lines,
        Some(Err(e)) => {
            return Finding::warn(
                CHECK,
                "host",
                format!("{ACS_UNIT} installed; journal unreadable: {e}"),
            )
            .fix("sudo journalctl -u disable-pcie-acs.service -b");
        }
        None => return Finding::ok(CHECK, "host", format!("{ACS_UNIT} installed")),
    };
    let cycle: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("disable-pcie-acs") && l.contains("ordering cycle"))
        .collect();
    if let Some(first) = cycle.first() {
        return Finding::fail(CHECK, "host", format!("systemd dropped the job this boot: {first}"))
            .symptom("ACS is still on although the unit is enabled: GPUDirect fails with IBV_WC_REM_OP_ERR status 11 for the GPU closest to the NIC")
            .fix("sudo journalctl -b | grep -E 'disable-pcie-acs.*ordering cycle|ordering cycle.*disable-pcie-acs'")
            .fix("# break the cycle (the runbook's unit orders itself only After=sysinit.target), then:")
            .fix("sudo systemctl daemon-reload\nsudo systemctl restart disable-pcie-acs.service");
    }
    let unit_lines = match unit_journal {
        Some(Ok(lines)) => lines,
        Some(Err(e)) => {
            return Finding::warn(
                CHECK,
                "host",
                format!("{ACS_UNIT} installed; its journal unreadable: {e}"),
            )
            .fix("sudo journalctl -u disable-pcie-acs.service -b");
        }
        None => return Finding::ok(CHECK, "host", format!("{ACS_UNIT} installed")),
    };
    if let Some(failed) = unit_lines
        .iter()
        .find(|l| l.contains("Failed to start") || l.contains("Failed with result"))
    {
        return Finding::warn(CHECK, "host", format!("the job failed this boot: {failed}"))
            .symptom("ACS may still be on: GPUDirect fails with IBV_WC_REM_OP_ERR status 11")
            .fix(
                "sudo journalctl -u disable-pcie-acs.service -b
sudo systemctl restart disable-pcie-acs.service",
            );
    }
    let ran = unit_lines.iter().any(|l| {
        let message = l.split_once("]: ").map_or(l.as_str(), |(_, m)| m);
        message.starts_with("Finished ") || message.starts_with("Started ")
    });
    if ran {
        Finding::ok(
            CHECK,
            "host",
            format!(
                "{ACS_UNIT} ran this boot (Finished in `journalctl -u {ACS_UNIT_NAME} -b`, no ordering cycle)"
            ),
        )
    } else {
        Finding::warn(CHECK, "host", format!("{ACS_UNIT} installed, but `journalctl -u {ACS_UNIT_NAME} -b` has no Finished line this boot"))
            .symptom("the job did not run: ACS may still be on, and GPUDirect fails with IBV_WC_REM_OP_ERR status 11")
            .fix("sudo journalctl -u disable-pcie-acs.service -b\nsudo systemctl enable --now disable-pcie-acs.service")
    }
}
