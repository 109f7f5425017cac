//! Shared by the integration tests.
#![allow(dead_code)]

pub mod raw;

/// Inside the Soft-RoCE VM (testing/rxe-vm), its device names; outside, a visible skip notice.
pub fn rxe_devices_or_skip(test: &str) -> Option<Vec<String>> {
    use std::io::Write;
    match std::env::var("MEMKV_RXE_DEVICES") {
        Ok(list) if std::env::var_os("MEMKV_IN_RXE_VM").is_some() => {
            Some(list.split(',').map(str::to_owned).collect())
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped: no RDMA device (testing/rxe-vm/run-tests runs this test in the Soft-RoCE VM)"
            );
            None
        }
    }
}
