//! RoCE losslessness per rail (RoCE runbook "Make the RoCE fabric lossless", "Configure the
//! host", "How AIStor picks the traffic class"): PFC on memkv's priority, the DSCP-to-priority
//! entry, memkv's traffic class = DSCP << 2, and ECN (DCQCN) reaction and notification points.
//! InfiniBand ports are lossless by credit flow control and are skipped, saying so.

use super::finding::Finding;
use super::host::HostRoot;
use crate::config::{ValueSource, knob_keys};
use crate::dcb::select::{PREFERRED_DSCP, PREFERRED_PRIORITY};
use crate::dcb::{DcbDetection, DcbReply, IeeeDcb};
use crate::policy::PortPlan;
use crate::types::LinkLayer;

/// Everything `mlnx_qos` is told in the runbook, for one netdev and priority.
fn mlnx_qos_fix(netdev: &str, priority: u8, dscp: u8) -> String {
    let mut pfc = ["0"; 8];
    pfc[priority as usize & 7] = "1";
    let pfc = pfc.join(",");
    format!(
        "sudo mlnx_qos -i {netdev} --trust dscp\n\
         sudo mlnx_qos -i {netdev} --pfc {pfc}\n\
         sudo mlnx_qos -i {netdev} --dscp2prio set,{dscp},{priority}\n\
         sudo mlnx_qos -i {netdev} --prio2buffer {pfc}\n\
         # and on every switch in the path: nv set qos roce mode lossless; nv config apply"
    )
}

fn pfc_text(mask: u8) -> String {
    (0..8)
        .map(|p| if mask & (1 << p) != 0 { "1" } else { "0" })
        .collect::<Vec<_>>()
        .join(",")
}

/// The priority memkv's RDMA traffic uses on this rail: a configured `service_level` (on RoCE it
/// is the priority the packets carry, whatever PFC is on), else the detected lossless priority,
/// else the runbook's priority 3 (what the rail should be configured for).
pub fn memkv_priority(plan: &PortPlan) -> u8 {
    if plan.facts.link_layer == LinkLayer::Ethernet
        && plan.service_level.source == ValueSource::Config
    {
        return sl_priority(plan.service_level.value);
    }
    match &plan.dcb {
        Some(DcbDetection::Lossless { priority, .. }) => *priority,
        _ => PREFERRED_PRIORITY,
    }
}

/// The 802.1p priority of a RoCE service level: the priority field has 3 bits, and RoCE drivers
/// (mlx5) take the low 3 bits of the 4-bit SL.
fn sl_priority(sl: u8) -> u8 {
    sl & 7
}

/// The configured service level and the lossless priority dcbnl reports, when the one overrides
/// the other.
fn overridden_priority(plan: &PortPlan) -> Option<(u8, u8)> {
    match &plan.dcb {
        Some(DcbDetection::Lossless { priority, .. })
            if plan.service_level.source == ValueSource::Config
                && *priority != memkv_priority(plan) =>
        {
            Some((plan.service_level.value, *priority))
        }
        _ => None,
    }
}

const RETRY_EXC: &str = "incast overruns switch buffers and packets drop: transfers fail with \
                         IBV_WC_RETRY_EXC_ERR and throughput falls away";

/// The InfiniBand line: no PFC/ECN to check.
pub fn skipped_on_infiniband(plan: &PortPlan) -> Finding {
    Finding::ok(
        "roce.lossless",
        format!("{} port {}", plan.facts.device, plan.facts.port),
        "InfiniBand: lossless by credit-based flow control; PFC, DSCP and ECN checks skipped",
    )
}

/// PFC, DSCP map, traffic class and ECN of one RoCE rail.
pub fn rail(
    plan: &PortPlan,
    netdev: &str,
    reply: &Result<DcbReply, String>,
    root: &HostRoot,
) -> Vec<Finding> {
    let priority = memkv_priority(plan);
    let mut out = Vec::new();
    match reply {
        Ok(DcbReply::Ieee(dcb)) => {
            out.push(pfc(netdev, dcb, priority, overridden_priority(plan)));
            out.push(dscp_map(netdev, dcb, priority));
            out.push(traffic_class(plan, netdev, dcb, priority));
        }
        Ok(DcbReply::KernelError(errno)) if *errno == libc::EOPNOTSUPP => out.push(
            Finding::warn(
                "roce.pfc",
                netdev,
                "no DCB support (dcbnl answers EOPNOTSUPP): this rail cannot be lossless; \
                 memkv runs best effort (service level 0, traffic class 0)",
            )
            .symptom(format!(
                "{RETRY_EXC}; acceptable only on test rigs such as Soft-RoCE"
            ))
            .fix("use a DCB-capable NIC (ConnectX) for production RoCE rails"),
        ),
        Ok(DcbReply::KernelError(errno)) => out.push(
            Finding::warn(
                "roce.pfc",
                netdev,
                format!(
                    "dcbnl query failed: {}",
                    std::io::Error::from_raw_os_error(*errno)
                ),
            )
            .fix(format!(
                "sudo mlnx_qos -i {netdev}   # read the DCB state by hand"
            )),
        ),
        Err(e) => out.push(
            Finding::warn("roce.pfc", netdev, format!("dcbnl query failed: {e}")).fix(format!(
                "sudo mlnx_qos -i {netdev}   # read the DCB state by hand"
            )),
        ),
    }
    out.push(ecn(netdev, priority, root));
    out
}

/// `overridden`: the configured service level and the lossless priority it overrides.
fn pfc(netdev: &str, dcb: &IeeeDcb, priority: u8, overridden: Option<(u8, u8)>) -> Finding {
    const CHECK: &str = "roce.pfc";
    let mask = dcb.pfc_enabled.unwrap_or(0);
    if mask & (1 << priority) != 0 {
        Finding::ok(
            CHECK,
            netdev,
            format!(
                "PFC on priority {priority} (pfc {}), the priority memkv uses",
                pfc_text(mask)
            ),
        )
    } else {
        let configured = overridden.map_or(String::new(), |(sl, _)| {
            // The server's rdma.service_level or the client's service_level: whichever
            // settings the checks run with (`DoctorOptions::config`).
            format!(", the priority the configured service_level {sl} sends on")
        });
        let finding = Finding::fail(
            CHECK,
            netdev,
            format!(
                "PFC off on priority {priority}{configured} (pfc {})",
                pfc_text(mask)
            ),
        )
        .symptom(RETRY_EXC)
        .fix(mlnx_qos_fix(netdev, priority, PREFERRED_DSCP));
        match overridden {
            Some((_, lossless)) => finding.fix(format!(
                "or remove {}, so memkv uses the lossless priority {lossless} it detects on {netdev}",
                knob_keys("service_level")
            )),
            None => finding,
        }
    }
}

fn dscp_map(netdev: &str, dcb: &IeeeDcb, priority: u8) -> Finding {
    const CHECK: &str = "roce.dscp";
    let mut dscps: Vec<u8> = dcb
        .dscp_map()
        .filter(|(_, p)| *p == priority)
        .map(|(d, _)| d)
        .collect();
    dscps.sort_unstable();
    let others: Vec<String> = dcb
        .dscp_map()
        .filter(|(_, p)| *p != priority)
        .map(|(d, p)| format!("{d}->{p}"))
        .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!("; other entries {}", others.join(" "))
    };
    if dscps.is_empty() {
        return Finding::fail(
            CHECK,
            netdev,
            format!("no DSCP maps to priority {priority} in the app table{others}"),
        )
        .symptom(format!(
            "memkv sends traffic class 0 (DSCP 0), which lands on a lossy class: {RETRY_EXC}"
        ))
        .fix(format!(
            "sudo mlnx_qos -i {netdev} --trust dscp\nsudo mlnx_qos -i {netdev} --dscp2prio set,{PREFERRED_DSCP},{priority}"
        ));
    }
    let list = dscps
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let convention = if dscps.contains(&PREFERRED_DSCP) && priority == PREFERRED_PRIORITY {
        String::new()
    } else {
        format!(
            " (not the NVIDIA convention DSCP {PREFERRED_DSCP} -> priority {PREFERRED_PRIORITY}: every switch must map it the same way)"
        )
    };
    Finding::ok(
        CHECK,
        netdev,
        format!("DSCP {list} -> priority {priority}{convention}{others}"),
    )
}

/// memkv's GRH traffic class must be the mapped DSCP shifted left by 2, and its service level
/// the PFC priority; both come from the same dcbnl data unless configured.
fn traffic_class(plan: &PortPlan, netdev: &str, dcb: &IeeeDcb, priority: u8) -> Finding {
    const CHECK: &str = "roce.traffic-class";
    let tc = plan.traffic_class.map_or(0, |t| t.value);
    let sl = plan.service_level.value;
    let sl_matches = sl_priority(sl) == priority;
    let source = plan
        .traffic_class
        .map_or("default".to_owned(), |t| t.source.to_string());
    let mapped: Vec<u8> = dcb
        .dscp_map()
        .filter(|(_, p)| *p == priority)
        .map(|(d, _)| d)
        .collect();
    let read = format!(
        "memkv sends traffic class {tc} (DSCP {}) at service level {sl} ({source})",
        tc >> 2
    );
    if mapped.contains(&(tc >> 2))
        && sl_matches
        && dcb.pfc_enabled.unwrap_or(0) & (1 << priority) != 0
    {
        Finding::ok(
            CHECK,
            netdev,
            format!("{read} = DSCP {} << 2 on priority {priority}", tc >> 2),
        )
    } else {
        Finding::fail(
            CHECK,
            netdev,
            format!("{read}, not a DSCP mapped to PFC priority {priority}"),
        )
        .symptom(format!("memkv's packets travel outside the lossless class: {RETRY_EXC}"))
        .fix(format!(
            "fix roce.pfc and roce.dscp on {netdev}; leave {} unset (detected over dcbnl) or set it to DSCP << 2 ({})",
            knob_keys("traffic_class"),
            mapped.first().copied().unwrap_or(PREFERRED_DSCP) << 2
        ))
    }
}

fn ecn(netdev: &str, priority: u8, root: &HostRoot) -> Finding {
    const CHECK: &str = "roce.ecn";
    let file = |point: &str| format!("/sys/class/net/{netdev}/ecn/{point}/enable/{priority}");
    let rp = root.read(&file("roce_rp"));
    let np = root.read(&file("roce_np"));
    let fix = || {
        format!(
            "echo 1 | sudo tee {}\necho 1 | sudo tee {}",
            file("roce_rp"),
            file("roce_np")
        )
    };
    match (rp.as_deref(), np.as_deref()) {
        (Some("1"), Some("1")) => Finding::ok(
            CHECK,
            netdev,
            format!("ECN on priority {priority}: roce_rp 1, roce_np 1 (DCQCN on)"),
        ),
        (None, None) => Finding::warn(
            CHECK,
            netdev,
            format!("no {} (this driver has no DCQCN controls)", file("roce_rp")),
        )
        .symptom("without DCQCN, congestion is handled by PFC pauses alone, which spread head-of-line blocking under incast"),
        (rp, np) => Finding::fail(
            CHECK,
            netdev,
            format!(
                "ECN on priority {priority}: roce_rp {}, roce_np {} (both must read 1)",
                rp.unwrap_or("missing"),
                np.unwrap_or("missing")
            ),
        )
        .symptom("DCQCN is off: senders do not slow down when switches mark ECN, so PFC pauses spread or buffers overflow and throughput collapses under incast")
        .fix(fix()),
    }
}

/// `roce-lossless.service`: mlnx_qos settings do not survive a reboot without it, and the
/// journal names any adapter it failed on.
pub fn boot_unit(root: &HostRoot, journal: Option<&Result<Vec<String>, String>>) -> Finding {
    const CHECK: &str = "roce.boot-unit";
    const UNIT: &str = "/etc/systemd/system/roce-lossless.service";
    if !root.exists(UNIT) {
        return Finding::warn(CHECK, "host", format!("{UNIT} is not installed"))
            .symptom("mlnx_qos settings do not survive a reboot: after one, rails come up lossy and drop under incast (IBV_WC_RETRY_EXC_ERR)")
            .fix("install /usr/local/sbin/roce-lossless.sh and roce-lossless.service as in docs/fabric.md (RoCE runbook), then:\nsudo systemctl daemon-reload\nsudo systemctl enable --now roce-lossless.service");
    }
    match journal {
        Some(Ok(lines)) => {
            let failed: Vec<&String> = lines
                .iter()
                .filter(|l| l.contains("roce-lossless") && l.contains("FAILED"))
                .collect();
            if failed.is_empty() {
                Finding::ok(
                    CHECK,
                    "host",
                    format!("{UNIT} installed; no FAILED lines from roce-lossless this boot"),
                )
            } else {
                Finding::fail(
                    CHECK,
                    "host",
                    format!(
                        "roce-lossless failed this boot: {}",
                        failed
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(" | ")
                    ),
                )
                .symptom(
                    "the named rail was left lossy: it drops under incast (IBV_WC_RETRY_EXC_ERR)",
                )
                .fix("journalctl -t roce-lossless\nsudo systemctl restart roce-lossless.service")
            }
        }
        Some(Err(e)) => Finding::warn(
            CHECK,
            "host",
            format!("{UNIT} installed; journal unreadable: {e}"),
        )
        .fix("journalctl -t roce-lossless"),
        None => Finding::ok(CHECK, "host", format!("{UNIT} installed")),
    }
}
