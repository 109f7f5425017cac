//! LID lifecycle with a simulated async-event source (TEST DOUBLE) over a private copy of a
//! fixture sysfs tree (TEST DOUBLE).

mod common;

use common::{TempTree, plans_at};
use memkv_fabric::doubles::SimulatedEventSource;
use memkv_fabric::events::{AsyncEvent, AsyncEventKind, EventWatcher, PortRuntime};
use memkv_fabric::policy::PortPlan;
use memkv_fabric::sysfs::SysfsReader;
use memkv_fabric::types::PortState;
use memkv_fabric::{FabricConfig, FabricError};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn setup(tree: &TempTree) -> (PortPlan, Arc<PortRuntime>) {
    let plan = plans_at(&tree.sysfs(), &FabricConfig::default()).remove(0);
    let runtime = Arc::new(PortRuntime::new(Arc::new(SysfsReader::new(tree.sysfs()))));
    runtime.register(&plan);
    (plan, runtime)
}

fn event(kind: AsyncEventKind) -> AsyncEvent {
    AsyncEvent {
        port: Some(1),
        kind,
    }
}

#[test]
fn each_lid_event_drops_the_cached_lid_and_the_next_use_rereads_it() {
    let tree = TempTree::copy_of("ib-lid");
    let (_plan, runtime) = setup(&tree);
    let (mut source, sender) = SimulatedEventSource::new("mlx5_0");
    assert_eq!(runtime.lid("mlx5_0", 1), Ok(33055));
    let mut expected_reads = 0;
    for (n, kind) in [
        AsyncEventKind::LidChange,
        AsyncEventKind::SmChange,
        AsyncEventKind::ClientReregister,
    ]
    .into_iter()
    .enumerate()
    {
        let new_lid = 0x100 + n as u16;
        tree.set_port_file("mlx5_0", "lid", &format!("{new_lid:#x}"));
        // Without an event the cached LID stays: sysfs is not re-read.
        assert_ne!(runtime.lid("mlx5_0", 1), Ok(new_lid), "{kind:?}");
        assert_eq!(runtime.lid_reads(), expected_reads);
        sender.send(event(kind));
        assert_eq!(runtime.drain(&mut source), Ok(1));
        assert_eq!(runtime.lid("mlx5_0", 1), Ok(new_lid), "{kind:?}");
        expected_reads += 1;
        assert_eq!(
            runtime.lid_reads(),
            expected_reads,
            "read once, then cached"
        );
        assert_eq!(runtime.lid("mlx5_0", 1), Ok(new_lid));
        assert_eq!(runtime.lid_reads(), expected_reads);
    }
}

#[test]
fn unrelated_events_keep_the_cached_lid() {
    let tree = TempTree::copy_of("ib-lid");
    let (_plan, runtime) = setup(&tree);
    let (mut source, sender) = SimulatedEventSource::new("mlx5_0");
    tree.set_port_file("mlx5_0", "lid", "0x5");
    sender.send(event(AsyncEventKind::PkeyChange));
    sender.send(AsyncEvent {
        port: Some(2),
        kind: AsyncEventKind::LidChange,
    });
    sender.send(AsyncEvent {
        port: None,
        kind: AsyncEventKind::Other(4),
    });
    assert_eq!(runtime.drain(&mut source), Ok(3));
    assert_eq!(runtime.lid("mlx5_0", 1), Ok(33055));
}

#[test]
fn port_without_lid_keeps_running_and_connects_once_the_sm_assigns_one() {
    let tree = TempTree::copy_of("ib-no-lid");
    let (plan, runtime) = setup(&tree);
    let peer = {
        let other = TempTree::copy_of("ib-lid");
        let p = plans_at(&other.sysfs(), &FabricConfig::default()).remove(0);
        p.local_endpoint(p.facts.lid).unwrap()
    };
    let no_lid = FabricError::NoLid {
        device: "mlx5_0".into(),
        port: 1,
    };
    assert_eq!(runtime.lid("mlx5_0", 1), Err(no_lid.clone()));
    assert_eq!(runtime.address_for(&plan, &peer), Err(no_lid.clone()));
    assert_eq!(runtime.local_endpoint(&plan), Err(no_lid));
    // The subnet manager reaches the port: LID assigned, port ACTIVE. No event is needed
    // because an unknown LID is re-read on every use until it is known.
    tree.set_port_file("mlx5_0", "lid", "0x33");
    tree.set_port_file("mlx5_0", "state", "4: ACTIVE");
    let a = runtime.address_for(&plan, &peer).unwrap();
    assert_eq!(a.dest_lid, 33055);
    assert_eq!(runtime.local_endpoint(&plan).unwrap().lid, Some(0x33));
    assert_eq!(runtime.state("mlx5_0", 1), Some(PortState::Active));
}

#[test]
fn port_error_and_port_active_update_the_state() {
    let tree = TempTree::copy_of("ib-lid");
    let (plan, runtime) = setup(&tree);
    let peer = plan.local_endpoint(plan.facts.lid).unwrap();
    let (mut source, sender) = SimulatedEventSource::new("mlx5_0");
    tree.set_port_file("mlx5_0", "state", "1: DOWN");
    sender.send(event(AsyncEventKind::PortError));
    runtime.drain(&mut source).unwrap();
    assert_eq!(runtime.state("mlx5_0", 1), Some(PortState::Down));
    assert!(matches!(
        runtime.address_for(&plan, &peer),
        Err(FabricError::PortNotActive {
            state: PortState::Down,
            ..
        })
    ));
    tree.set_port_file("mlx5_0", "state", "4: ACTIVE");
    sender.send(event(AsyncEventKind::PortActive));
    runtime.drain(&mut source).unwrap();
    assert_eq!(runtime.state("mlx5_0", 1), Some(PortState::Active));
    assert!(runtime.address_for(&plan, &peer).is_ok());
}

/// A port down at start whose PORT_ACTIVE never arrives (no event watcher: it failed to
/// start) connects once sysfs says it is ACTIVE; it used to refuse every connection forever.
#[test]
fn a_port_that_comes_up_unannounced_connects() {
    let tree = TempTree::copy_of("roce-mixed");
    tree.set_port_file("mlx5_2", "state", "1: DOWN");
    let plan = plans_at(&tree.sysfs(), &FabricConfig::default())
        .into_iter()
        .find(|p| p.facts.device == "mlx5_2")
        .unwrap();
    let runtime = PortRuntime::new(Arc::new(SysfsReader::new(tree.sysfs())));
    runtime.register(&plan);
    let peer = plan.local_endpoint(None).unwrap();
    assert!(matches!(
        runtime.address_for(&plan, &peer),
        Err(FabricError::PortNotActive { .. })
    ));
    tree.set_port_file("mlx5_2", "state", "4: ACTIVE");
    runtime.address_for(&plan, &peer).unwrap();
}

#[test]
fn device_fatal_takes_every_port_down() {
    let tree = TempTree::copy_of("ib-lid");
    let (plan, runtime) = setup(&tree);
    let (mut source, sender) = SimulatedEventSource::new("mlx5_0");
    sender.send(AsyncEvent {
        port: None,
        kind: AsyncEventKind::DeviceFatal,
    });
    runtime.drain(&mut source).unwrap();
    assert_eq!(runtime.state("mlx5_0", 1), Some(PortState::Down));
    // Whatever sysfs still says: the device must be opened again.
    let peer = plan.local_endpoint(plan.facts.lid).unwrap();
    assert!(matches!(
        runtime.address_for(&plan, &peer),
        Err(FabricError::PortNotActive { .. })
    ));
}

#[test]
fn watcher_thread_applies_events_without_a_restart() {
    let tree = TempTree::copy_of("ib-lid");
    let (_plan, runtime) = setup(&tree);
    let (source, sender) = SimulatedEventSource::new("mlx5_0");
    let watcher = EventWatcher::spawn(Box::new(source), runtime.clone());
    assert_eq!(runtime.lid("mlx5_0", 1), Ok(33055));
    tree.set_port_file("mlx5_0", "lid", "0x77");
    sender.send(event(AsyncEventKind::LidChange));
    // Bounded wait for the watcher to apply the event (not a timing assertion).
    let deadline = Instant::now() + Duration::from_secs(10);
    while watcher.applied() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(watcher.applied(), 1);
    assert_eq!(runtime.lid("mlx5_0", 1), Ok(0x77));
    watcher.stop();
}

#[test]
fn fabric_entry_point_tracks_lid_changes_from_its_watchers() {
    use memkv_fabric::Fabric;
    use memkv_fabric::doubles::FixtureVerbs;
    use memkv_fabric::show::FabricSources;
    let tree = TempTree::copy_of("ib-two-subnets");
    let verbs = FixtureVerbs::new(tree.sysfs());
    let dcb = common::fixture_dcb();
    let sources = FabricSources {
        sysfs: SysfsReader::new(tree.sysfs()),
        verbs: &verbs,
        dcb: &dcb,
    };
    let reader = Arc::new(SysfsReader::new(tree.sysfs()));
    let mut fabric = Fabric::plan(
        &sources,
        &FabricConfig::default(),
        &["mlx5_1".into()],
        reader,
    )
    .unwrap();
    assert_eq!(fabric.plans().len(), 1, "device filter keeps mlx5_1 only");
    assert!(matches!(
        fabric.port("mlx5_0", 1),
        Err(FabricError::UnknownPort { .. })
    ));
    assert_eq!(fabric.usable_port(None).unwrap().facts.device, "mlx5_1");
    let (source, sender) = SimulatedEventSource::new("mlx5_1");
    fabric.watch(vec![Box::new(source)]);
    assert_eq!(fabric.local_endpoint("mlx5_1", 1).unwrap().lid, Some(0x22));
    tree.set_port_file("mlx5_1", "lid", "0x99");
    sender.send(event(AsyncEventKind::SmChange));
    let deadline = Instant::now() + Duration::from_secs(10);
    while fabric.events_applied() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fabric.local_endpoint("mlx5_1", 1).unwrap().lid, Some(0x99));
}

#[test]
fn fabric_on_a_host_without_rdma_has_no_ports_and_says_why() {
    use memkv_fabric::Fabric;
    let fabric = Fabric::start(&FabricConfig::default(), &[]).unwrap();
    if !std::path::Path::new("/sys/class/infiniband").is_dir() {
        assert!(fabric.plans().is_empty());
        assert!(fabric.no_devices().is_some());
        assert!(matches!(
            fabric.usable_port(Some("mlx5_0")),
            Err(FabricError::NoRdmaPort { .. })
        ));
    }
}
