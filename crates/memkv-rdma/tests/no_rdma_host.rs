//! On a host without RDMA (the project's build machines: no InfiniBand in the kernel),
//! opening the data plane fails with a named error that says why, and never panics.

use memkv_fabric::{Fabric, FabricConfig, FabricError};
use memkv_rdma::{RdmaDevice, RdmaError};

#[test]
fn opening_without_rdma_devices_names_the_reason() {
    if std::env::var_os("MEMKV_IN_RXE_VM").is_some() {
        return; // the VM has devices; the rxe_* tests cover it
    }
    let fabric = Fabric::start(&FabricConfig::default(), &[]).expect("Fabric::start");
    let Some(reason) = fabric.no_devices() else {
        eprintln!("opening_without_rdma_devices_names_the_reason: skipped: this host has RDMA");
        return;
    };
    let reason = reason.to_owned();
    for (device, port) in [
        (None, None),
        (Some("mlx5_0"), None),
        (None, Some(1)),
        (Some("rxe0"), Some(1)),
    ] {
        let err = RdmaDevice::open(&fabric, device, port)
            .err()
            .expect("no device to open");
        match &err {
            RdmaError::Fabric(FabricError::NoRdmaPort { reason: r, .. }) => {
                assert_eq!(r, &reason)
            }
            RdmaError::Fabric(FabricError::UnknownPort { .. }) => {}
            other => panic!("unexpected error {other:?}"),
        }
        assert!(!err.to_string().is_empty());
    }
}
