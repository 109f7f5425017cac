//! `traffic_class`, `service_level` and `gid_index`: from `MEMKV_CONFIG` and their
//! `MEMKV_RDMA_*` variables, with the server's ranges and `auto`.

use super::tests::{KEY_A, err, resolve};
use super::*;

fn knobs(c: &ClientConfig) -> (Option<u8>, Option<u8>, Option<u8>) {
    (c.traffic_class, c.service_level, c.gid_index)
}

#[test]
fn unset_means_detect() {
    let c = resolve(None, &[("MEMKV_AUTH_KEY", KEY_A)]).unwrap();
    assert_eq!(knobs(&c), (None, None, None));
    assert_eq!(c.fabric_config(), memkv_fabric::FabricConfig::default());
}

#[test]
fn the_file_sets_them_and_the_variables_win() {
    let file = format!(
        "auth_key: {KEY_A}\ntraffic_class: 106\nservice_level: 3\ngid_index: 1\npkey_index: 2\n"
    );
    let c = resolve(Some(&file), &[]).unwrap();
    assert_eq!(knobs(&c), (Some(106), Some(3), Some(1)));
    let f = c.fabric_config();
    assert_eq!(
        (f.traffic_class, f.service_level, f.gid_index, f.pkey_index),
        (Some(106), Some(3), Some(1), Some(2))
    );

    let env = [
        (TRAFFIC_CLASS_ENV, "40"),
        (SERVICE_LEVEL_ENV, " 5 "),
        (GID_INDEX_ENV, "3"),
    ];
    let c = resolve(Some(&file), &env).unwrap();
    assert_eq!(knobs(&c), (Some(40), Some(5), Some(3)));

    // A variable set to auto puts detection back, whatever the file says.
    let auto = [
        (TRAFFIC_CLASS_ENV, "auto"),
        (SERVICE_LEVEL_ENV, "AUTO"),
        (GID_INDEX_ENV, "auto"),
    ];
    let c = resolve(Some(&file), &auto).unwrap();
    assert_eq!(knobs(&c), (None, None, None));

    let c = resolve(
        None,
        &[("MEMKV_AUTH_KEY", KEY_A), (TRAFFIC_CLASS_ENV, "104")],
    )
    .unwrap();
    assert_eq!(knobs(&c), (Some(104), None, None));
}

#[test]
fn auto_and_traffic_class_zero_mean_detect_as_on_the_server() {
    let file =
        format!("auth_key: {KEY_A}\ntraffic_class: auto\nservice_level: auto\ngid_index: auto\n");
    assert_eq!(
        knobs(&resolve(Some(&file), &[]).unwrap()),
        (None, None, None)
    );
    let file = format!("auth_key: {KEY_A}\ntraffic_class: 0\nservice_level: 0\ngid_index: 0\n");
    // Service level 0 and GID index 0 are values; traffic class 0 is the runbook's "auto".
    assert_eq!(
        knobs(&resolve(Some(&file), &[]).unwrap()),
        (None, Some(0), Some(0))
    );
    let c = resolve(None, &[("MEMKV_AUTH_KEY", KEY_A), (TRAFFIC_CLASS_ENV, "0")]).unwrap();
    assert_eq!(c.traffic_class, None);
    let top = format!("auth_key: {KEY_A}\ntraffic_class: 255\nservice_level: 15\ngid_index: 255\n");
    assert_eq!(
        knobs(&resolve(Some(&top), &[]).unwrap()),
        (Some(255), Some(15), Some(255))
    );
}

#[test]
fn bad_values_in_the_file_name_the_file_key_and_limit() {
    for (line, says) in [
        (
            "traffic_class: 256",
            "traffic_class: 256 is out of range 0..=255",
        ),
        (
            "traffic_class: -1",
            "traffic_class: -1 is out of range 0..=255",
        ),
        (
            "service_level: 16",
            "service_level: 16 is out of range 0..=15",
        ),
        ("gid_index: 300", "gid_index: 300 is out of range 0..=255"),
        (
            "gid_index: sometimes",
            "gid_index: \"sometimes\" is neither auto nor an integer in 0..=255",
        ),
        ("traffic_class: 99999999999999999999999", "0..=255"),
    ] {
        let e = err(Some(&format!("auth_key: {KEY_A}\n{line}\n")), &[]);
        assert!(e.contains("client.yaml") && e.contains(says), "{line}: {e}");
    }
    // Not a number nor text: serde names the key and what it expects.
    for line in [
        "traffic_class: 1.5",
        "service_level: true",
        "gid_index: [1]",
    ] {
        let e = err(Some(&format!("auth_key: {KEY_A}\n{line}\n")), &[]);
        let key = line.split(':').next().unwrap();
        assert!(
            e.contains(key) && e.contains("`auto` or a non-negative integer"),
            "{line}: {e}"
        );
    }
}

#[test]
fn bad_variables_name_the_variable_and_limit() {
    for (var, value, says) in [
        (TRAFFIC_CLASS_ENV, "256", "256 is out of range 0..=255"),
        (SERVICE_LEVEL_ENV, "16", "16 is out of range 0..=15"),
        (SERVICE_LEVEL_ENV, "-3", "-3 is out of range 0..=15"),
        (
            GID_INDEX_ENV,
            "one",
            "\"one\" is neither auto nor an integer in 0..=255",
        ),
        (
            TRAFFIC_CLASS_ENV,
            "",
            "\"\" is neither auto nor an integer in 0..=255",
        ),
    ] {
        let e = err(None, &[("MEMKV_AUTH_KEY", KEY_A), (var, value)]);
        assert!(e.contains(&format!("{var}: {says}")), "{var}={value}: {e}");
    }
}

#[test]
fn the_variables_are_listed_for_tools_that_report_sources() {
    assert_eq!(
        FABRIC_ENV_VARS,
        [
            "MEMKV_RDMA_PKEY_INDEX",
            "MEMKV_RDMA_TRAFFIC_CLASS",
            "MEMKV_RDMA_SERVICE_LEVEL",
            "MEMKV_RDMA_GID_INDEX"
        ]
    );
}
