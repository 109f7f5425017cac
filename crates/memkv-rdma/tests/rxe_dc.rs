//! DC over real verbs where DC cannot run: Soft-RoCE (testing/rxe-vm) is not mlx5, so the data
//! plane must report DC unsupported with the named reason, choose RC, and refuse DC targets and
//! initiator pools cleanly: an error, no crash, nothing leaked, the device still usable.
//! The verbs failure path itself (mlx5dv_create_qp on a non-mlx5 context) is driven through the
//! unchecked constructors. DC on mlx5 hardware is untested. Outside the VM this test reports
//! itself skipped.

mod pair;
mod support;

use memkv_fabric::FabricConfig;
use memkv_rdma::{
    DcSupport, DcUnavailable, QpOptions, RdmaDevice, RdmaError, Transport, TransportPreference,
    choose_transport,
};

/// Descriptors this process has open: a leaked completion channel (or eventfd) shows here.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn assert_not_mlx5(err: &RdmaError, device: &str) {
    match err {
        RdmaError::DcUnavailable(DcUnavailable::NotMlx5 { device: d, .. }) => {
            assert_eq!(d, device)
        }
        other => panic!("expected DC unavailable (not mlx5), got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!("device {device} is not an mlx5 device")),
        "{text}"
    );
}

/// One test on purpose: it counts this process's descriptors, which concurrent tests would move.
#[test]
fn dc_is_refused_by_name_on_soft_roce_and_nothing_leaks() {
    let Some(vm) = support::rxe_vm_or_skip("dc_is_refused_by_name_on_soft_roce_and_nothing_leaks")
    else {
        return;
    };
    let fabric = pair::start_fabric(&FabricConfig::default());
    for name in &vm.devices {
        let device = RdmaDevice::open(&fabric, Some(name), None)
            .unwrap_or_else(|e| panic!("opening {name}: {e}"));

        let support = device.dc_support();
        let DcSupport::Unsupported(why) = &support else {
            panic!("{name}: rxe reported {support}");
        };
        assert!(
            why.to_string()
                .starts_with(&format!("device {name} is not an mlx5 device")),
            "{why}"
        );
        let decision = choose_transport(&support, true, TransportPreference::Auto);
        assert_eq!(decision.transport, Transport::Rc);
        assert!(decision.reason.contains("not an mlx5 device"), "{decision}");

        // Warm up whatever libibverbs and the provider open once per process.
        drop(device.create_rc().expect("create_rc"));
        let fds_before = open_fds();
        for round in 0..10u64 {
            let err = device
                .create_dc_target(0x5eed + round)
                .err()
                .expect("DCT on rxe");
            assert_not_mlx5(&err, name);
            let err = device
                .create_dci_pool(16, QpOptions::default())
                .err()
                .expect("DCI pool on rxe");
            assert_not_mlx5(&err, name);

            // Past the capability check: mlx5dv refuses the rxe context itself, after the
            // CQ, completion channel and SRQ were made; each must be released.
            for err in [
                device
                    .create_dc_target_unchecked(0x5eed)
                    .err()
                    .expect("unchecked DCT on rxe"),
                device
                    .create_dci_pool_unchecked(4, QpOptions::default())
                    .err()
                    .expect("unchecked DCI pool on rxe"),
            ] {
                match &err {
                    RdmaError::Verbs { call, errno, .. } => {
                        assert_eq!(*call, "mlx5dv_create_qp", "{err}");
                        assert_eq!(*errno, libc::EOPNOTSUPP, "{err}");
                    }
                    other => panic!("expected mlx5dv_create_qp to fail, got {other:?}"),
                }
            }
        }
        let err = device
            .create_dci_pool_unchecked(0, QpOptions::default())
            .err()
            .expect("zero DCIs");
        assert!(err.to_string().contains("rdma.num_dcis"), "{err}");
        assert_eq!(open_fds(), fds_before, "{name}: descriptors leaked");

        // The device is as usable as before: a new RC queue pair still works.
        let qp = device.create_rc().expect("create_rc after the DC failures");
        assert!(qp.local_endpoint(None).is_ok());
        drop(qp);
        // Dropping the device deallocates its PD; a leaked SRQ or QP would keep it busy, and a
        // leaked QP on one of the CQs above would have made its destroy panic already.
        drop(device);
    }
}
