use super::*;
use std::collections::HashMap;

pub(super) const KEY_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const KEY_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

pub(super) fn resolve(file: Option<&str>, env: &[(&str, &str)]) -> Result<ClientConfig> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |name: &str| env.get(name).cloned();
    let path = Path::new("/etc/memkv/client.yaml");
    ClientConfig::resolve(file.map(|t| (path, t)), &lookup, &missing_key_file())
}

/// A key file path that exists on no machine (a fixed path such as /nonexistent can be created
/// by any root process that takes it for a home directory).
fn missing_key_file() -> std::path::PathBuf {
    std::env::temp_dir()
        .join(format!(
            "memkv-client-no-key-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ))
        .join("auth_key")
}

pub(super) fn err(file: Option<&str>, env: &[(&str, &str)]) -> String {
    resolve(file, env).unwrap_err().to_string()
}

#[test]
fn defaults_apply_when_only_a_key_is_given() {
    let c = resolve(None, &[("MEMKV_AUTH_KEY", KEY_A)]).unwrap();
    assert_eq!(c.servers, vec!["127.0.0.1:9900"]);
    assert_eq!(c.num_connections, 4);
    assert_eq!(c.timeout, Duration::from_secs(5));
    assert_eq!(c.transport, Transport::Auto);
    assert!(!c.payload_mac);
}

#[test]
fn environment_overrides_the_file() {
    let file = format!(
        "servers: [\"a:1\", \"b:2\"]\nauth_key: {KEY_A}\ntransport: tcp\nnum_connections: 2\n\
         timeout_ms: 700\npkey_index: 3\nrdma_devices: [mlx5_0]\nnum_dcis: 32\npayload_mac: true\n"
    );
    let from_file = resolve(Some(&file), &[]).unwrap();
    assert_eq!(from_file.servers, vec!["a:1", "b:2"]);
    assert_eq!(from_file.auth_key.to_hex(), KEY_A);
    assert_eq!(from_file.transport, Transport::Tcp);
    assert_eq!(from_file.num_connections, 2);
    assert_eq!(from_file.timeout, Duration::from_millis(700));
    assert_eq!(from_file.pkey_index, Some(3));
    assert_eq!(from_file.rdma_devices, vec!["mlx5_0"]);
    assert_eq!(from_file.num_dcis, 32);
    assert!(from_file.payload_mac);

    let env = [
        ("MEMKV_SERVERS", "c:3, d:4"),
        ("MEMKV_AUTH_KEY", KEY_B),
        ("MEMKV_TRANSPORT", "auto"),
        ("MEMKV_NUM_CONNECTIONS", "8"),
        ("MEMKV_TIMEOUT_MS", "1500"),
        ("MEMKV_RDMA_PKEY_INDEX", "1"),
        ("MEMKV_RDMA_DEVICES", "mlx5_1,mlx5_2"),
        ("MEMKV_RDMA_NUM_DCIS", "8"),
    ];
    let c = resolve(Some(&file), &env).unwrap();
    assert_eq!(c.num_dcis, 8);
    let zero = resolve(Some(&file), &[("MEMKV_RDMA_NUM_DCIS", "0")]).unwrap_err();
    assert!(zero.to_string().contains("MEMKV_RDMA_NUM_DCIS"), "{zero}");
    assert_eq!(c.servers, vec!["c:3", "d:4"]);
    assert_eq!(c.auth_key.to_hex(), KEY_B);
    assert_eq!(c.transport, Transport::Auto);
    assert_eq!(c.num_connections, 8);
    assert_eq!(c.timeout, Duration::from_millis(1500));
    assert_eq!(c.pkey_index, Some(1));
    assert_eq!(c.rdma_devices, vec!["mlx5_1", "mlx5_2"]);
}

#[test]
fn deadline_accepts_units() {
    let c = resolve(Some("deadline: 2s"), &[("MEMKV_AUTH_KEY", KEY_A)]).unwrap();
    assert_eq!(c.timeout, Duration::from_secs(2));
    let c = resolve(Some("deadline: 250ms"), &[("MEMKV_AUTH_KEY", KEY_A)]).unwrap();
    assert_eq!(c.timeout, Duration::from_millis(250));
    let e = err(Some("deadline: soon"), &[("MEMKV_AUTH_KEY", KEY_A)]);
    assert!(e.contains("deadline"), "{e}");
    let e = err(
        Some("deadline: 1s\ntimeout_ms: 5"),
        &[("MEMKV_AUTH_KEY", KEY_A)],
    );
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn unknown_keys_and_bad_values_name_the_key() {
    let key = [("MEMKV_AUTH_KEY", KEY_A)];
    let e = err(Some("serverz: [\"a:1\"]"), &key);
    assert!(e.contains("serverz") && e.contains("client.yaml"), "{e}");
    let e = err(Some("num_connections: 0"), &key);
    assert!(
        e.contains("num_connections") && e.contains("1..=1024"),
        "{e}"
    );
    let e = err(Some("transport: carrier-pigeon"), &key);
    assert!(e.contains("transport"), "{e}");
    let e = err(
        None,
        &[("MEMKV_AUTH_KEY", KEY_A), ("MEMKV_TIMEOUT_MS", "soon")],
    );
    assert!(e.contains("MEMKV_TIMEOUT_MS"), "{e}");
    let e = err(
        None,
        &[("MEMKV_AUTH_KEY", KEY_A), ("MEMKV_SERVERS", "nohost")],
    );
    assert!(e.contains("MEMKV_SERVERS") && e.contains("nohost"), "{e}");
    // Caught here, not by a resolver asked for the host "http" or "bad host" later.
    for (servers, says) in [
        ("http://a:9900", "drop the \"http://\""),
        ("bad host:9900", "holds ' '"),
        ("::1:9900", "in brackets"),
        ("a:9900/v1", "is not a number"),
    ] {
        let e = err(
            None,
            &[("MEMKV_AUTH_KEY", KEY_A), ("MEMKV_SERVERS", servers)],
        );
        assert!(e.contains("MEMKV_SERVERS") && e.contains(says), "{e}");
    }
    let e = err(
        None,
        &[("MEMKV_AUTH_KEY", KEY_A), ("MEMKV_SERVERS", "a:1,a:1")],
    );
    assert!(e.contains("twice"), "{e}");
    let e = err(None, &[("MEMKV_AUTH_KEY", KEY_A), ("MEMKV_SERVERS", " , ")]);
    assert!(e.contains("empty"), "{e}");
    let e = err(None, &[("MEMKV_AUTH_KEY", "abc")]);
    assert!(e.contains("MEMKV_AUTH_KEY") && e.contains("64 hex"), "{e}");
    let e = err(
        None,
        &[
            ("MEMKV_AUTH_KEY", KEY_A),
            ("MEMKV_RDMA_PKEY_INDEX", "70000"),
        ],
    );
    assert!(e.contains("MEMKV_RDMA_PKEY_INDEX"), "{e}");
}

#[test]
fn a_missing_key_names_every_place_to_put_one() {
    let e = err(None, &[]);
    assert!(
        e.contains("MEMKV_AUTH_KEY") && e.contains("memkv-client-no-key-"),
        "{e}"
    );
}

#[test]
fn an_empty_file_means_defaults() {
    let c = resolve(Some("\n"), &[("MEMKV_AUTH_KEY", KEY_A)]).unwrap();
    assert_eq!(c.servers, vec![DEFAULT_SERVER]);
}

#[test]
fn memkv_client_configs_with_license_and_mtu_load() {
    let file = format!(
        "servers: [\"a:1\"]\nauth_key: {KEY_A}\nlicense: /etc/memkv/license.key\nmtu: 2048\n"
    );
    let c = resolve(Some(&file), &[("MEMKV_LICENSE", "/etc/memkv/license.key")]).unwrap();
    assert_eq!(c.rdma_mtu, Some(memkv_fabric::types::Mtu::Mtu2048));
    let inline = format!("auth_key: {KEY_A}\nlicense:\n  customer: acme\n  key: 0123\n");
    assert!(resolve(Some(&inline), &[]).unwrap().rdma_mtu.is_none());
    let e = err(Some(&format!("auth_key: {KEY_A}\nmtu: 9000\n")), &[]);
    assert!(
        e.contains("mtu") && e.contains("4096") && e.contains("client.yaml"),
        "{e}"
    );
    // Truly unknown keys are still refused by name.
    let e = err(Some(&format!("auth_key: {KEY_A}\nlicence_typo: x\n")), &[]);
    assert!(e.contains("licence_typo"), "{e}");
}

/// MEMKV_CONFIG's size limit holds for a file with no length: a pipe, FIFO or device
/// (`MEMKV_CONFIG=<(...)`, /dev/zero) is read up to the limit and refused, naming the limit,
/// not read without bound.
#[test]
fn a_config_arriving_through_a_pipe_is_held_to_the_size_limit() {
    let dir = std::env::temp_dir().join(format!("memkv-client-config-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("client.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let writer_path = fifo.clone();
    // Detached: should a reader refuse the FIFO without opening it, this thread stays
    // blocked in open() and ends with the test process.
    std::thread::spawn(move || {
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&writer_path) else {
            return;
        };
        let line = "# padding padding padding padding padding padding padding padd\n";
        for _ in 0..(4 << 20) / line.len() {
            if std::io::Write::write_all(&mut f, line.as_bytes()).is_err() {
                return; // the reader stopped at the limit
            }
        }
        let _ = std::io::Write::write_all(
            &mut f,
            format!("servers: [\"127.0.0.1:1\"]\nauth_key: {KEY_A}\n").as_bytes(),
        );
    });
    let config_path = fifo.display().to_string();
    let overrides = move |name: &str| match name {
        "MEMKV_CONFIG" => Some(config_path.clone()),
        _ => None,
    };
    let message = match ClientConfig::from_env_with(&overrides) {
        Ok(config) => panic!(
            "a 4 MiB MEMKV_CONFIG was read and accepted: servers {:?}",
            config.servers
        ),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("1048576"), "{message}");
    assert!(message.contains(&fifo.display().to_string()), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_override_is_named_by_its_origin() {
    let flags = |name: &str| match name {
        "MEMKV_TIMEOUT_MS" => Some(Ok(Some(Setting::new("0", "--timeout-ms")))),
        "MEMKV_SERVERS" => Some(Ok(Some(Setting::new("no-port", "--servers")))),
        _ => None,
    };
    let sources =
        ConfigSources::new(None, Box::new(move |name| flags(name).unwrap_or(Ok(None)))).unwrap();
    let timeout = sources.timeout().unwrap_err().to_string();
    assert_eq!(
        timeout,
        "client configuration: --timeout-ms: 0 is out of range 1..=3600000"
    );
    let servers = sources.servers().unwrap_err().to_string();
    assert!(servers.contains("--servers: server 1"), "{servers}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// A hostile or garbled MEMKV_CONFIG file gets an error, never a panic (the property
    /// behind fuzz/fuzz_targets/client_config.rs).
    #[test]
    fn arbitrary_config_files_never_panic(text in "[ a-z_.:#|>\\[\\]{}'\"\\-\n0-9,]{0,160}") {
        let _ = resolve(Some(&text), &[]);
    }

    #[test]
    fn known_keys_with_arbitrary_values_never_panic(
        key in proptest::sample::select(vec!["servers", "auth_key", "transport", "num_connections", "timeout_ms", "deadline", "pkey_index", "rdma_devices", "num_dcis", "payload_mac", "mtu", "license", "traffic_class", "service_level", "gid_index"]),
        value in "[ -~]{0,40}",
    ) {
        let _ = resolve(Some(&format!("{key}: {value}\n")), &[]);
        let _ = resolve(Some(&format!("{key}:\n  - {value}\n")), &[]);
    }
}
