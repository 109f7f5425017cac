//! `net doctor` on a node with a server's settings and a client's beside them (TEST DOUBLE
//! hosts, tests/doctor_hosts): clients start the one-sided transfers with their own traffic
//! class and service level, so where those differ from the server's the `roce.*` rail checks run
//! for the client's too, on subjects marked `(client)`, and the fixes name the client's key.

mod common;
mod doctor_hosts;

use doctor_hosts::*;
use memkv_fabric::FabricConfig;
use memkv_fabric::doctor::{DoctorReport, Finding, Status};

fn client_findings(r: &DoctorReport) -> Vec<&Finding> {
    r.checks
        .iter()
        .filter(|f| f.subject.ends_with(" (client)"))
        .collect()
}

#[test]
fn a_client_traffic_class_outside_the_lossless_class_fails_and_names_the_client_key() {
    let h = roce_good();
    let mut opts = options();
    // The client pins DSCP 10 (traffic class 40), which no rail maps to PFC priority 3.
    opts.client_config = Some(FabricConfig {
        traffic_class: Some(40),
        ..FabricConfig::default()
    });
    let r = run(h.root(), &opts);
    let server = r
        .checks
        .iter()
        .find(|f| f.check == "roce.traffic-class" && f.subject == "ens1f0np0")
        .unwrap();
    assert_eq!(server.status, Status::Ok, "{}", r.text());
    let client = r
        .checks
        .iter()
        .find(|f| f.check == "roce.traffic-class" && f.subject == "ens1f0np0 (client)")
        .unwrap_or_else(|| panic!("no client traffic class check in\n{}", r.text()));
    assert_eq!(client.status, Status::Fail, "{}", r.text());
    assert!(
        client.read.contains("traffic class 40 (DSCP 10)") && client.read.contains("(config)"),
        "{}",
        client.read
    );
    assert!(
        client
            .fix
            .iter()
            .any(|l| l.contains("traffic_class in MEMKV_CONFIG or MEMKV_RDMA_TRAFFIC_CLASS")),
        "{:?}",
        client.fix
    );
    // Both rails, each with PFC, DSCP, traffic class and ECN.
    assert_eq!(client_findings(&r).len(), 8, "{}", r.text());
}

#[test]
fn a_client_with_the_servers_knobs_is_not_checked_twice() {
    let h = roce_good();
    let mut opts = options();
    opts.config.traffic_class = Some(104);
    opts.client_config = Some(FabricConfig {
        traffic_class: Some(104),
        pkey_index: Some(0),
        ..FabricConfig::default()
    });
    let r = run(h.root(), &opts);
    assert!(
        client_findings(&r)
            .iter()
            .all(|f| !f.check.starts_with("roce.")),
        "{}",
        r.text()
    );
    // A client on the detected class (DSCP 26 on priority 3) passes beside a server that pins it.
    opts.client_config = Some(FabricConfig::default());
    let r = run(h.root(), &opts);
    let client = client_findings(&r);
    assert!(!client.is_empty(), "{}", r.text());
    assert!(
        client.iter().all(|f| f.status == Status::Ok),
        "{}",
        r.text()
    );
}
