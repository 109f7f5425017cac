//! Real verbs, sysfs and rtnetlink on Soft-RoCE devices inside the rxe VM
//! (`testing/rxe-vm/run-tests -p memkv-fabric`). Outside the VM each test says why it skips.
//! Inside it, a missing or malformed harness variable is a failure.

use memkv_fabric::dcb::{DcbDetection, DcbSource, NetlinkDcb};
use memkv_fabric::discover::{DeviceListing, PortQuery};
use memkv_fabric::events::{AsyncEventKind, AsyncEventSource, PortRuntime};
use memkv_fabric::show::{FabricSources, Planned, ShowFilter, plan_all};
use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::types::{LinkLayer, Mtu, PortState};
use memkv_fabric::verbs::VerbsReader;
use memkv_fabric::verbs_events::VerbsEventSource;
use memkv_fabric::{FabricConfig, PortPlan, Transport};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tests here share two devices; the event test takes a link down, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Vm {
    devices: Vec<String>,
    netdevs: Vec<String>,
    addrs: Vec<String>,
    gid_index: u32,
    mtu: u32,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("inside the rxe VM but {name} is not set"))
}

fn list(name: &str) -> Vec<String> {
    var(name).split(',').map(str::to_owned).collect()
}

fn vm_or_skip(test: &str) -> Option<Vm> {
    if std::env::var("MEMKV_IN_RXE_VM").as_deref() != Ok("1") {
        eprintln!(
            "{test}: skipped: no RDMA device here (run it with testing/rxe-vm/run-tests -p memkv-fabric)"
        );
        return None;
    }
    Some(Vm {
        devices: list("MEMKV_RXE_DEVICES"),
        netdevs: list("MEMKV_RXE_NETDEVS"),
        addrs: list("MEMKV_RXE_ADDRS"),
        gid_index: var("MEMKV_RXE_GID_INDEX")
            .parse()
            .expect("MEMKV_RXE_GID_INDEX"),
        mtu: var("MEMKV_RXE_MTU").parse().expect("MEMKV_RXE_MTU"),
    })
}

fn real_plans(cfg: &FabricConfig) -> Vec<PortPlan> {
    let verbs = VerbsReader::new();
    let sources = FabricSources {
        sysfs: SysfsReader::default(),
        verbs: &verbs,
        dcb: &NetlinkDcb,
    };
    match plan_all(&sources, cfg).expect("discovery in the VM") {
        Planned::Ports(p) => p,
        Planned::NoDevices { reason } => panic!("no devices in the rxe VM: {reason}"),
    }
}

fn expected_active_mtu(vm: &Vm) -> Mtu {
    if vm.mtu >= 9000 {
        Mtu::Mtu4096
    } else {
        Mtu::Mtu1024
    }
}

#[test]
fn verbs_lists_and_queries_the_soft_roce_ports() {
    let Some(vm) = vm_or_skip("verbs_lists_and_queries_the_soft_roce_ports") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let verbs = VerbsReader::new();
    let DeviceListing::Devices(mut names) = verbs.device_list().unwrap() else {
        panic!("verbs sees no devices in the VM");
    };
    names.sort();
    assert_eq!(names, vm.devices);
    for device in &vm.devices {
        let attrs = verbs.port_attrs(device, 1).unwrap();
        assert_eq!(attrs.active_mtu, expected_active_mtu(&vm), "{device}");
        assert_eq!(attrs.max_mtu, Mtu::Mtu4096);
        assert_eq!(attrs.state, PortState::Active);
        assert!(!verbs.dc_supported(device), "rxe has no DC");
        assert_eq!(verbs.query_pkey(device, 1, 0).unwrap(), Some(0xffff));
        assert_eq!(
            verbs.query_pkey(device, 1, 1).unwrap(),
            None,
            "rxe has one P_Key entry"
        );
    }
}

#[test]
fn discovery_and_policy_on_real_sysfs() {
    let Some(vm) = vm_or_skip("discovery_and_policy_on_real_sysfs") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let plans = real_plans(&FabricConfig::default());
    assert_eq!(plans.len(), vm.devices.len());
    for (i, plan) in plans.iter().enumerate() {
        assert_eq!(plan.facts.device, vm.devices[i]);
        assert_eq!(plan.facts.link_layer, LinkLayer::Ethernet);
        assert_eq!(plan.facts.pkeys, vec![0xffff]);
        assert_eq!(plan.transport, Transport::Rc);
        let gid = plan.gid.clone().unwrap().unwrap();
        assert_eq!(gid.index, vm.gid_index);
        assert_eq!(gid.gid.ipv4().unwrap().to_string(), vm.addrs[i]);
        assert_eq!(gid.netdev.as_deref(), Some(vm.netdevs[i].as_str()));
        assert_eq!(
            plan.mtu.as_ref().unwrap().effective,
            expected_active_mtu(&vm)
        );
        // veth has no DCB: best effort, with the reason.
        assert_eq!(
            plan.dcb,
            Some(DcbDetection::NotSupported {
                netdev: vm.netdevs[i].clone()
            })
        );
        assert!(plan.usable().is_ok(), "{:?}", plan.refusal());
    }
    if plans.len() == 2 {
        let runtime = PortRuntime::new(Arc::new(SysfsReader::default()));
        plans.iter().for_each(|p| runtime.register(p));
        let peer = runtime.local_endpoint(&plans[0]).unwrap();
        let a = runtime.address_for(&plans[1], &peer).unwrap();
        let grh = a.grh.unwrap();
        assert_eq!(grh.dgid.ipv4().unwrap().to_string(), vm.addrs[0]);
        assert_eq!(grh.sgid_index, vm.gid_index);
        assert_eq!(a.path_mtu, expected_active_mtu(&vm));
    }
    let show =
        memkv_fabric::net_show_system(&FabricConfig::default(), &ShowFilter::default()).unwrap();
    let text = show.text();
    println!("{text}");
    assert!(text.contains(&format!("device            : {}  port 1", vm.devices[0])));
    assert_eq!(show.exit_code(), 0);
}

#[test]
fn netlink_dcb_on_a_veth_is_not_supported() {
    let Some(vm) = vm_or_skip("netlink_dcb_on_a_veth_is_not_supported") else {
        return;
    };
    let d = NetlinkDcb.detect(&vm.netdevs[0]);
    assert_eq!(
        d,
        DcbDetection::NotSupported {
            netdev: vm.netdevs[0].clone()
        }
    );
}

fn run(program: &str, args: &[&str]) {
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(status.success(), "{program} {}", args.join(" "));
}

/// A third Soft-RoCE device on its own veth pair, so taking its link down disturbs neither the
/// harness's wire nor other tests; removed on drop.
struct ScratchRxe;

const SCRATCH_DEV: &str = "rxefab9";
const SCRATCH_NETDEV: &str = "vethfab9";

impl ScratchRxe {
    fn create() -> Self {
        run(
            "ip",
            &[
                "link",
                "add",
                SCRATCH_NETDEV,
                "type",
                "veth",
                "peer",
                "name",
                "vethfab9p",
            ],
        );
        run("ip", &["link", "set", SCRATCH_NETDEV, "up"]);
        run("ip", &["link", "set", "vethfab9p", "up"]);
        run(
            "rdma",
            &[
                "link",
                "add",
                SCRATCH_DEV,
                "type",
                "rxe",
                "netdev",
                SCRATCH_NETDEV,
            ],
        );
        Self
    }
}

impl Drop for ScratchRxe {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rdma")
            .args(["link", "delete", SCRATCH_DEV])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", SCRATCH_NETDEV])
            .status();
    }
}

fn wait_for(source: &mut VerbsEventSource, kind: AsyncEventKind) -> memkv_fabric::AsyncEvent {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(e) = source.next_event(Duration::from_millis(200)).unwrap()
            && e.kind == kind
        {
            return e;
        }
    }
    panic!("no {kind:?} event within 20 s");
}

#[test]
fn port_error_and_active_arrive_from_the_real_event_queue() {
    if vm_or_skip("port_error_and_active_arrive_from_the_real_event_queue").is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _scratch = ScratchRxe::create();
    let verbs = VerbsReader::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while verbs.port_attrs(SCRATCH_DEV, 1).map(|a| a.state) != Ok(PortState::Active) {
        assert!(
            Instant::now() < deadline,
            "{SCRATCH_DEV} never became ACTIVE"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut source =
        VerbsEventSource::new(SCRATCH_DEV, verbs.context(SCRATCH_DEV).unwrap()).unwrap();
    assert_eq!(
        source.next_event(Duration::ZERO).unwrap(),
        None,
        "non-blocking when idle"
    );
    let facts = SysfsReader::default().port(SCRATCH_DEV, 1).unwrap();
    let plan = memkv_fabric::plan_port(facts, &FabricConfig::default(), &NetlinkDcb);
    let runtime = PortRuntime::new(Arc::new(SysfsReader::default()));
    runtime.register(&plan);

    // The startup entry point watches the same device through its own context.
    let fabric =
        memkv_fabric::Fabric::start(&FabricConfig::default(), &[SCRATCH_DEV.into()]).unwrap();
    assert_eq!(fabric.plans().len(), 1);

    run("ip", &["link", "set", SCRATCH_NETDEV, "down"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while fabric.runtime().state(SCRATCH_DEV, 1) != Some(PortState::Down) {
        assert!(
            Instant::now() < deadline,
            "Fabric's watcher never saw PORT_ERR"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = wait_for(&mut source, AsyncEventKind::PortError);
    assert_eq!(e.port, Some(1));
    runtime.apply(SCRATCH_DEV, e);
    assert_eq!(runtime.state(SCRATCH_DEV, 1), Some(PortState::Down));

    run("ip", &["link", "set", SCRATCH_NETDEV, "up"]);
    let e = wait_for(&mut source, AsyncEventKind::PortActive);
    runtime.apply(SCRATCH_DEV, e);
    assert_eq!(runtime.state(SCRATCH_DEV, 1), Some(PortState::Active));
}
