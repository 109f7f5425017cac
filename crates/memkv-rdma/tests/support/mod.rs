//! What the Soft-RoCE VM (testing/rxe-vm) tells a test about its RDMA devices.
//!
//! RDMA tests are ordinary Rust tests. Outside the VM they print a visible skip notice and
//! return; inside it (MEMKV_IN_RXE_VM=1) a missing or malformed description is a failure.

use std::io::Write;
use std::net::Ipv4Addr;

/// The rxe devices the VM brought up, each on its own veth end.
#[derive(Debug, Clone)]
pub struct RxeVm {
    pub devices: Vec<String>,
    pub netdevs: Vec<String>,
    pub addrs: Vec<Ipv4Addr>,
    /// GID index of the IPv4-mapped (RoCE v2) GID, the same on every device.
    pub gid_index: u8,
}

/// Returns the VM's devices, or prints why `test` is skipped and returns `None`.
pub fn rxe_vm_or_skip(test: &str) -> Option<RxeVm> {
    if std::env::var_os("MEMKV_IN_RXE_VM").is_none() {
        skip(&format!(
            "{test}: skipped: no RDMA device (not inside the Soft-RoCE VM; \
             testing/rxe-vm/run-tests runs this test there)"
        ));
        return None;
    }
    let vm = RxeVm {
        devices: list_var("MEMKV_RXE_DEVICES"),
        netdevs: list_var("MEMKV_RXE_NETDEVS"),
        addrs: list_var("MEMKV_RXE_ADDRS")
            .iter()
            .map(|a| {
                a.parse()
                    .unwrap_or_else(|e| panic!("MEMKV_RXE_ADDRS: {a:?}: {e}"))
            })
            .collect(),
        gid_index: var("MEMKV_RXE_GID_INDEX")
            .parse()
            .unwrap_or_else(|e| panic!("MEMKV_RXE_GID_INDEX: {e}")),
    };
    assert!(
        !vm.devices.is_empty(),
        "MEMKV_IN_RXE_VM is set but MEMKV_RXE_DEVICES is empty"
    );
    assert_eq!(
        vm.devices.len(),
        vm.addrs.len(),
        "MEMKV_RXE_DEVICES vs MEMKV_RXE_ADDRS"
    );
    assert_eq!(
        vm.devices.len(),
        vm.netdevs.len(),
        "MEMKV_RXE_DEVICES vs MEMKV_RXE_NETDEVS"
    );
    Some(vm)
}

/// Says why a test is skipped where the person running `cargo test` sees it: the test harness
/// captures `eprintln!`, but not writes to the stderr handle itself.
pub fn skip(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("MEMKV_IN_RXE_VM is set but {name} is not"))
}

fn list_var(name: &str) -> Vec<String> {
    var(name)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
