//! RDMA stack checks (RoCE runbook "Verify the RDMA stack", InfiniBand runbook "Verification"):
//! kernel, modules, devices, port state, link layer with LID/SM or GID, P_Key, MTU, subnets.
//! The per-port verdicts reuse `net show`'s policy ([`crate::policy::plan_port`]).

use super::finding::Finding;
use super::host::HostRoot;
use crate::policy::PortPlan;
use crate::types::{LinkLayer, PortState};
use std::collections::BTreeSet;

/// The runbook's minimum kernel and the one it prefers.
const MIN_KERNEL: (u32, u32) = (5, 4);
const PREFERRED_KERNEL: (u32, u32) = (6, 15);

/// `6.1.0-18-amd64` -> (6, 1).
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn kernel(root: &HostRoot) -> Finding {
    const CHECK: &str = "stack.kernel";
    let Some(release) = root.read("/proc/sys/kernel/osrelease") else {
        return Finding::warn(CHECK, "host", "cannot read /proc/sys/kernel/osrelease");
    };
    match parse_kernel_version(&release) {
        Some(v) if v < MIN_KERNEL => Finding::fail(
            CHECK,
            "host",
            format!("kernel {release}, below the 5.4 minimum"),
        )
        .symptom("the RDMA and GPUDirect paths this release relies on are missing")
        .fix("install a 6.15 or later kernel (on Ubuntu 24.04 LTS: the HWE kernel)"),
        Some(v) if v < PREFERRED_KERNEL => Finding::warn(
            CHECK,
            "host",
            format!("kernel {release}: meets the 5.4 minimum; 6.15 or later is preferred"),
        )
        .symptom("older RDMA and GPUDirect code paths (fixed steadily since 5.4)")
        .fix("install a 6.15 or later kernel (on Ubuntu 24.04 LTS: the HWE kernel)"),
        Some(_) => Finding::ok(CHECK, "host", format!("kernel {release} (6.15 or later)")),
        None => Finding::warn(
            CHECK,
            "host",
            format!("unparsable kernel release {release:?}"),
        ),
    }
}

/// Loaded modules: `/proc/modules` plus built-ins that show up in `/sys/module`.
fn loaded_modules(root: &HostRoot) -> BTreeSet<String> {
    let mut loaded: BTreeSet<String> = root
        .read("/proc/modules")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    loaded.extend(root.list("/sys/module"));
    loaded
}

/// Module names listed in modules-load.d, which systemd loads at boot.
fn boot_modules(root: &HostRoot) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in [
        "/etc/modules-load.d",
        "/run/modules-load.d",
        "/usr/lib/modules-load.d",
    ] {
        for file in root.list(dir).into_iter().filter(|f| f.ends_with(".conf")) {
            let text = root.read(&format!("{dir}/{file}")).unwrap_or_default();
            names.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
                    .map(str::to_owned),
            );
        }
    }
    names
}

/// The modules this host needs: the runbook's four, with the driver of the devices present.
fn wanted_modules(plans: &[PortPlan], mellanox_pci: bool) -> Vec<(&'static str, bool)> {
    let mlx5 = mellanox_pci
        || plans
            .iter()
            .any(|p| p.facts.device_info.is_mlx5(&p.facts.device));
    let rxe = plans.iter().any(|p| {
        p.facts.device_info.driver.as_deref() == Some("rdma_rxe")
            || p.facts.device.starts_with("rxe")
    });
    // (name, required): without ib_core/ib_uverbs (and the device driver) verbs sees nothing.
    let mut wanted = vec![("ib_core", true), ("ib_uverbs", true), ("rdma_cm", false)];
    if mlx5 {
        wanted.push(("mlx5_core", true));
    }
    if rxe {
        wanted.push(("rdma_rxe", true));
    }
    wanted
}

pub fn modules(root: &HostRoot, plans: &[PortPlan], mellanox_pci: bool) -> Vec<Finding> {
    const CHECK: &str = "stack.modules";
    const BOOT: &str = "stack.modules-boot";
    let loaded = loaded_modules(root);
    let wanted = wanted_modules(plans, mellanox_pci);
    let names: Vec<&str> = wanted.iter().map(|(n, _)| *n).collect();
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !loaded.contains(*n))
        .collect();
    let missing_required: Vec<&str> = wanted
        .iter()
        .filter(|(n, required)| *required && !loaded.contains(*n))
        .map(|(n, _)| *n)
        .collect();
    let modprobe = |list: &[&str]| {
        list.iter()
            .map(|m| format!("sudo modprobe {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = Vec::new();
    let read = |state: &str, list: &[&str]| format!("{state}: {}", list.join(" "));
    out.push(if missing.is_empty() {
        Finding::ok(CHECK, "host", read("loaded", &names))
    } else if !missing_required.is_empty() {
        Finding::fail(CHECK, "host", read("not loaded", &missing))
            .symptom("ibv_devinfo reports no device and memkv serves TCP only (\"RDMA does nothing\")")
            .fix(modprobe(&missing))
            .fix("lsmod | grep -E \"ib_|rdma_|mlx\"")
    } else {
        Finding::warn(CHECK, "host", read("not loaded", &missing))
            .symptom("RDMA connection-manager tools (rping, perftest -R) fail; memkv itself does not use rdma_cm")
            .fix(modprobe(&missing))
    });
    let at_boot = boot_modules(root);
    let not_at_boot: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !at_boot.contains(*n))
        .collect();
    out.push(if not_at_boot.is_empty() {
        Finding::ok(BOOT, "host", read("listed in modules-load.d", &names))
    } else {
        Finding::warn(
            BOOT,
            "host",
            read("not listed in /etc/modules-load.d", &not_at_boot),
        )
        .symptom("after a reboot the modules may not load, and memkv comes up serving TCP only")
        .fix(format!(
            "printf '%s\\n' {} | sudo tee /etc/modules-load.d/rdma.conf",
            names.join(" ")
        ))
    });
    out
}

pub fn devices(plans: &[PortPlan], no_devices: Option<&str>) -> Finding {
    const CHECK: &str = "stack.devices";
    match no_devices {
        Some(reason) => Finding::fail(CHECK, "host", format!("no RDMA devices: {reason}"))
            .symptom(
                "memkv starts normally and serves every request over TCP (\"RDMA does nothing\")",
            )
            .fix("sudo modprobe ib_core ib_uverbs rdma_cm mlx5_core\nibv_devinfo"),
        None => {
            let mut devices: Vec<String> = Vec::new();
            for p in plans {
                let name = match &p.facts.device_info.driver {
                    Some(driver) => format!("{} ({driver})", p.facts.device),
                    None => p.facts.device.clone(),
                };
                if !devices.contains(&name) {
                    devices.push(name);
                }
            }
            Finding::ok(CHECK, "host", devices.join(", "))
        }
    }
}

fn port_subject(plan: &PortPlan) -> String {
    format!("{} port {}", plan.facts.device, plan.facts.port)
}

/// State, link layer (LID and SM on InfiniBand, GID on RoCE), P_Key and MTU of one port.
pub fn port(plan: &PortPlan) -> Vec<Finding> {
    let f = &plan.facts;
    let subject = port_subject(plan);
    let phys = f.phys_state.as_deref().unwrap_or("unknown");
    let link_up = f.phys_state.is_none() || phys == "LinkUp";
    let state = if f.state == PortState::Active && link_up {
        Finding::ok(
            "stack.port-state",
            &subject,
            format!("{} ({phys})", f.state),
        )
    } else {
        Finding::fail(
            "stack.port-state",
            &subject,
            format!("{}, physical state {phys}; not PORT_ACTIVE", f.state),
        )
        .symptom("connections to and from this port wait for PORT_ACTIVE; memkv serves TCP on it")
        .fix(format!("ibstat {}\nibv_devinfo -d {}", f.device, f.device))
        .fix(match f.link_layer {
            LinkLayer::InfiniBand => "sminfo   # no SM: no port in the subnet becomes ACTIVE",
            LinkLayer::Ethernet => "check the cable and the switch port of the netdev (ip link)",
        })
    };
    let link = link_layer(plan, &subject);
    let mut out = vec![state, link];
    out.extend(port_settings(plan, ""));
    out
}

/// The P_Key and MTU checks of one port, which depend on the configured settings; `label`
/// follows the port in the subject (" (client)" for the client's settings beside a server's).
pub fn port_settings(plan: &PortPlan, label: &str) -> Vec<Finding> {
    let f = &plan.facts;
    let subject = format!("{}{label}", port_subject(plan));
    let pkey = match &plan.pkey {
        Ok(p) => Finding::ok(
            "stack.pkey",
            &subject,
            format!("pkey_index {} = {:#06x} ({} membership)", p.index, p.pkey, p.membership),
        ),
        Err(e) => Finding::fail("stack.pkey", &subject, e.to_string())
            .symptom("memkv refuses RDMA on this port; peers in a partition this port is not in drop its packets with no error on the sender")
            .fix(format!("cat /sys/class/infiniband/{}/ports/{}/pkeys/*   # then set rdma.pkey_index (MEMKV_RDMA_PKEY_INDEX) to this node's partition", f.device, f.port)),
    };
    let mtu = match &plan.mtu {
        Ok(m) => Finding::ok(
            "stack.mtu",
            &subject,
            format!("active MTU {}, memkv offers {}", m.active, m.effective),
        ),
        Err(e) => Finding::fail("stack.mtu", &subject, e.to_string())
            .symptom("memkv refuses RDMA on this port")
            .fix(format!(
                "ibstat {}   # set the same mtu, at most the active MTU, on servers and clients",
                f.device
            )),
    };
    vec![pkey, mtu]
}

fn link_layer(plan: &PortPlan, subject: &str) -> Finding {
    const CHECK: &str = "stack.link-layer";
    let f = &plan.facts;
    match f.link_layer {
        LinkLayer::InfiniBand => {
            let sm = f.sm_lid.map_or("none".to_owned(), |l| l.to_string());
            match f.lid {
                Some(lid) => Finding::ok(CHECK, subject, format!("InfiniBand, LID {lid}, SM LID {sm}")),
                None => Finding::fail(CHECK, subject, format!("InfiniBand, no LID, SM LID {sm}"))
                    .symptom("peers cannot address this port: transfers fail with a named NoLid error until the subnet manager assigns one")
                    .fix("sminfo   # an error here means no subnet manager is running")
                    .fix(format!("ibstat {}", f.device)),
            }
        }
        LinkLayer::Ethernet => match &plan.gid {
            Some(Ok(g)) => Finding::ok(
                CHECK,
                subject,
                format!(
                    "Ethernet (RoCE), GID index {} {} ({}) on {}",
                    g.index,
                    g.gid,
                    g.gid_type,
                    g.netdev.as_deref().unwrap_or("no netdev")
                ),
            ),
            Some(Err(e)) => Finding::fail(CHECK, subject, format!("Ethernet (RoCE): {e}"))
                .symptom("memkv refuses RDMA on this port and serves TCP")
                .fix(format!(
                    "sudo ip addr add <rail-ipv4>/<prefix> dev {}   # or set {}",
                    plan.netdev().unwrap_or("<netdev>"),
                    crate::config::knob_keys("gid_index")
                )),
            None => Finding::warn(CHECK, subject, "Ethernet (RoCE), GID not evaluated"),
        },
    }
}

/// InfiniBand ports must share one subnet prefix: memkv addresses by LID and refuses a peer in
/// another subnet at connect time.
pub fn subnets(plans: &[PortPlan]) -> Option<Finding> {
    const CHECK: &str = "stack.ib-subnet";
    let ib: Vec<(String, u64)> = plans
        .iter()
        .filter(|p| p.facts.link_layer == LinkLayer::InfiniBand)
        .filter_map(|p| Some((port_subject(p), p.facts.subnet_prefix()?)))
        .collect();
    let first = ib.first()?;
    let read = ib
        .iter()
        .map(|(s, prefix)| format!("{s} {prefix:#018x}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(if ib.iter().all(|(_, p)| *p == first.1) {
        Finding::ok(CHECK, "host", format!("one subnet prefix: {read}"))
    } else {
        Finding::warn(CHECK, "host", format!("several subnet prefixes: {read}"))
            .symptom("memkv refuses peers in another subnet at connect time (SubnetMismatch in the log); every server and client must sit in one subnet")
            .fix("sminfo   # put every memkv node on ports the same subnet manager configures")
    })
}
