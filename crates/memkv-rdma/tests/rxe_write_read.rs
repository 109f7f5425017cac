//! RDMA WRITE then RDMA READ of 1 MiB over real verbs (Soft-RoCE in testing/rxe-vm), compared
//! bit for bit. Outside the VM these tests report themselves skipped.

mod rc_pair;
mod support;

use rc_pair::{RcEnd, fill_pattern};
use support::RxeVm;

const BLOCK: usize = 1 << 20;

fn read_counter(netdev: &str, counter: &str) -> u64 {
    let path = format!("/sys/class/net/{netdev}/statistics/{counter}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

/// Writes a pattern from `client` (on `client_device`) into `server`, checks it arrived, changes
/// it in place on the server and reads it back into the client.
fn write_then_read(vm: &RxeVm, client_device: &str, server_device: &str) {
    let mut client = RcEnd::new(client_device, vm.gid_index, BLOCK, 0x1234);
    let mut server = RcEnd::new(server_device, vm.gid_index, BLOCK, 0x4321);
    let (client_address, server_address) = (client.address(), server.address());
    client.connect(&server_address);
    server.connect(&client_address);

    fill_pattern(client.buffer_mut(), 1);
    client.write_to(&server_address, BLOCK).expect("RDMA WRITE");
    assert!(
        server.buffer() == client.buffer(),
        "RDMA WRITE: server bytes differ from the source"
    );

    // New content on the server side, so that the READ cannot pass on stale client bytes.
    fill_pattern(server.buffer_mut(), 2);
    client.buffer_mut().fill(0);
    client.read_from(&server_address, BLOCK).expect("RDMA READ");
    assert!(
        client.buffer() == server.buffer(),
        "RDMA READ: client bytes differ from the server's"
    );
    let mut expected = vec![0u8; BLOCK];
    fill_pattern(&mut expected, 2);
    assert!(
        client.buffer() == expected.as_slice(),
        "RDMA READ: bytes differ from the pattern"
    );
}

#[test]
fn rdma_write_then_read_1mib_between_rxe0_and_rxe1() {
    let test = "rdma_write_then_read_1mib_between_rxe0_and_rxe1";
    let Some(vm) = support::rxe_vm_or_skip(test) else {
        return;
    };
    if vm.devices.len() < 2 {
        support::skip(&format!(
            "{test}: skipped: the VM has one RDMA device, this test needs two"
        ));
        return;
    }
    let sent_before = read_counter(&vm.netdevs[0], "tx_bytes");
    let answered_before = read_counter(&vm.netdevs[1], "tx_bytes");
    write_then_read(&vm, &vm.devices[0], &vm.devices[1]);
    // Both payloads crossed the veth wire: the WRITE leaves the first device's netdev, the
    // READ response the second's.
    let sent = read_counter(&vm.netdevs[0], "tx_bytes") - sent_before;
    let answered = read_counter(&vm.netdevs[1], "tx_bytes") - answered_before;
    assert!(
        sent >= BLOCK as u64,
        "{} sent only {sent} bytes",
        vm.netdevs[0]
    );
    assert!(
        answered >= BLOCK as u64,
        "{} sent only {answered} bytes",
        vm.netdevs[1]
    );
}

#[test]
fn rdma_write_then_read_1mib_on_one_device() {
    let Some(vm) = support::rxe_vm_or_skip("rdma_write_then_read_1mib_on_one_device") else {
        return;
    };
    write_then_read(&vm, &vm.devices[0], &vm.devices[0]);
}
