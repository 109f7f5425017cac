//! `net show` output: aligned text in the runbook's format, and JSON.

use crate::report::PortReport;
use crate::types::LinkLayer;
use serde::Serialize;
use std::fmt::Write as _;

/// Width of the label column (`device            : `).
const LABEL_WIDTH: usize = 18;

fn line(out: &mut String, label: &str, value: &str) {
    let _ = writeln!(out, "{label:<LABEL_WIDTH$}: {value}");
}

/// Text for a host with no RDMA devices.
pub fn render_no_devices(reason: &str) -> String {
    format!("no RDMA devices: {reason}\n")
}

/// One block per port, separated by blank lines.
pub fn render_text(ports: &[PortReport]) -> String {
    if ports.is_empty() {
        return render_no_devices("none found");
    }
    let blocks: Vec<String> = ports.iter().map(render_port).collect();
    blocks.join("\n")
}

/// The InfiniBand runbook's lines first, in its order and words ("Confirm the port is ready":
/// device, link layer, transport, pkey_index, service_level, path MTU; operators read the
/// first two), then what else was found: GID choice, port state, SM LID, the P_Key value,
/// where each value came from, ignored knobs, warnings and the verdict.
fn render_port(p: &PortReport) -> String {
    let mut out = String::new();
    line(
        &mut out,
        "device",
        &format!("{}  port {}", p.device, p.port),
    );
    line(&mut out, "link layer", &link_layer_text(p));
    line(&mut out, "transport", &p.transport);
    let pkey = match (&p.pkey.error, p.pkey.index) {
        (Some(e), Some(i)) => format!("{i}   (refused: {e})"),
        (Some(e), None) => format!("-   (refused: {e})"),
        (None, i) => format!(
            "{}   ({} membership)",
            i.unwrap_or(0),
            p.pkey
                .membership
                .map_or("unknown".into(), |m| m.to_string()),
        ),
    };
    line(&mut out, "pkey_index", &pkey);
    let sl = &p.service_level;
    line(
        &mut out,
        "service_level",
        &format!("{}   ({})", sl.value, sl.meaning),
    );
    if let Some(tc) = &p.traffic_class {
        line(
            &mut out,
            "traffic_class",
            &format!("{}   (DSCP {})", tc.value, tc.dscp),
        );
    }
    line(&mut out, "path MTU", &mtu_text(p));
    if let Some(g) = &p.gid {
        let why = match g.source {
            Some(src) => format!("{}; {src}", g.reason),
            None => format!("refused: {}", g.reason),
        };
        line(&mut out, "GID choice", &why);
    }
    let state = match &p.phys_state {
        Some(phys) => format!("{}   ({phys})", p.state),
        None => p.state.clone(),
    };
    line(&mut out, "port state", &state);
    if p.link_layer == LinkLayer::InfiniBand {
        let sm = p.sm_lid.map_or_else(|| "none".into(), |l| l.to_string());
        line(&mut out, "SM LID", &sm);
    }
    if p.pkey.error.is_none() {
        line(
            &mut out,
            "P_Key",
            p.pkey.value.as_deref().unwrap_or("unknown"),
        );
    }
    line(&mut out, "values from", &sources_text(p));
    for knob in &p.ignored {
        line(
            &mut out,
            "ignored",
            &format!("{} = {} ({})", knob.key, knob.value, knob.reason),
        );
    }
    for w in &p.warnings {
        line(&mut out, "warning", w);
    }
    match &p.refused {
        Some(reason) => line(&mut out, "RDMA", &format!("refused: {reason}")),
        None => line(&mut out, "RDMA", "usable"),
    }
    out
}

fn link_layer_text(p: &PortReport) -> String {
    match p.link_layer {
        LinkLayer::InfiniBand => {
            let lid = match p.lid {
                Some(lid) => format!("LID {lid}"),
                None => "no LID: the subnet manager has not configured this port".into(),
            };
            format!("InfiniBand   ({lid})")
        }
        LinkLayer::Ethernet => {
            let detail = match &p.gid {
                Some(g) => match (g.index, g.gid) {
                    (Some(i), Some(gid)) => format!(
                        "GID index {i}, {gid}, netdev {}",
                        g.netdev.as_deref().unwrap_or("none")
                    ),
                    _ => "no usable GID".into(),
                },
                None => "no GID".into(),
            };
            format!("Ethernet (RoCE)   ({detail})")
        }
    }
}

/// Where pkey_index, service_level and traffic_class came from: `config`, `detected` or
/// `default` (the path MTU line says it for the MTU, GID choice for the GID).
fn sources_text(p: &PortReport) -> String {
    let mut parts = Vec::new();
    if let (None, Some(src)) = (&p.pkey.error, p.pkey.source) {
        parts.push(format!("pkey_index {src}"));
    }
    parts.push(format!("service_level {}", p.service_level.source));
    if let Some(tc) = &p.traffic_class {
        parts.push(format!("traffic_class {}", tc.source));
    }
    parts.join(", ")
}

fn mtu_text(p: &PortReport) -> String {
    let m = &p.mtu;
    let active = m.active.map_or("unknown".into(), |a| a.to_string());
    match (&m.error, m.effective) {
        (Some(e), _) => format!("refused   ({e})"),
        (None, Some(eff)) => match m.configured {
            Some(c) => format!("{eff}   (active {active}, configured {c})"),
            None => format!("{eff}   (active {active}, default 4096 capped at active)"),
        },
        (None, None) => format!("unknown   (active {active})"),
    }
}

/// The JSON document `net show --json` prints.
#[derive(Debug, Serialize)]
struct JsonShow<'a> {
    ports: &'a [PortReport],
    #[serde(skip_serializing_if = "Option::is_none")]
    no_rdma_devices: Option<&'a str>,
}

/// Pretty JSON: `{"ports": [...]}`, plus `no_rdma_devices` with the reason when empty.
pub fn render_json(ports: &[PortReport], no_devices_reason: Option<&str>) -> String {
    let doc = JsonShow {
        ports,
        no_rdma_devices: no_devices_reason,
    };
    let mut text = serde_json::to_string_pretty(&doc)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot serialise report: {e}\"}}"));
    text.push('\n');
    text
}
