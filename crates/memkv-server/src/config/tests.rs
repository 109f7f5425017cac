use std::time::Duration;

use super::*;

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn parse(text: &str) -> Result<ServerConfig, ConfigError> {
    ServerConfig::from_yaml_str(text, "test.yaml")
}

fn error_of(text: &str) -> ConfigError {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(error) => error,
    }
}

#[test]
fn empty_and_comment_only_files_use_defaults() {
    for text in ["", "# nothing here\n", "---\n"] {
        let config = parse(text).unwrap();
        assert_eq!(config.network.address.to_string(), "0.0.0.0:9900");
        assert_eq!(config.storage.mode, StorageMode::Memory);
        assert_eq!(config.memory.max_size, ByteSize::gib(1));
    }
}

#[test]
fn defaults_are_documented_values() {
    let config = parse(&format!("network:\n  auth_key: {KEY}\n")).unwrap();
    assert_eq!(
        config.network.auth_key,
        Some(AuthKey::from_hex(KEY).unwrap())
    );
    assert_eq!(config.network.tls, None);
    assert_eq!(config.network.idle_timeout, Duration::from_secs(300));
    assert_eq!(config.network.threads, None, "one worker per CPU");
    assert_eq!(config.network.admin_address().to_string(), "0.0.0.0:9901");
    assert_eq!(config.memory.block_size, ByteSize::mib(2));
    assert_eq!(config.storage.block_size, ByteSize::mib(4));
    assert_eq!(config.storage.eviction, EvictionPolicy::Lru);
    assert_eq!(config.storage.reservation_lease, Duration::from_secs(30));
    assert_eq!(config.storage.pin_lease, Duration::from_secs(10));
    assert_eq!(config.rdma, RdmaConfig::default());
    assert_eq!(config.rdma.device, "mlx5_0");
    assert_eq!(
        config.rdma.mtu, None,
        "unset: 4096 capped at the active MTU"
    );
    assert!(config.rdma.enabled);
    assert!(
        config.memory.prefault,
        "the arena is populated at start by default"
    );
    assert_eq!(config.limits.max_value_size, ByteSize::mib(64));
    assert_eq!(config.limits.max_connections, 10_000);
    assert_eq!(
        config.limits.per_connection_inflight_bytes,
        ByteSize::mib(256)
    );
    assert_eq!(config.logging.level, "info");
}

#[test]
fn embedded_default_is_loopback_memory_mode() {
    let config = ServerConfig::embedded_default();
    assert_eq!(config.source_name, EMBEDDED_SOURCE);
    assert_eq!(config.network.address.to_string(), "127.0.0.1:9900");
    assert_eq!(config.network.admin_address().to_string(), "127.0.0.1:9901");
    assert_eq!(config.network.auth_key, None);
    assert_eq!(config.storage.mode, StorageMode::Memory);
    assert_eq!(config.memory.max_size, ByteSize::gib(1));
}

#[test]
fn ephemeral_port_gives_ephemeral_admin_port() {
    let config = parse("network:\n  address: 127.0.0.1:0\n").unwrap();
    assert_eq!(config.network.admin_address().to_string(), "127.0.0.1:0");
}

#[test]
fn example_config_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.yaml");
    let config = ServerConfig::load(&path).unwrap();
    assert_eq!(config.storage.mode, StorageMode::File);
    assert_eq!(config.storage.drives.len(), 2);
    assert_eq!(config.storage.drives[0].size, Some(ByteSize::gib(64)));
    let tls = config.network.tls.as_ref().unwrap();
    assert_eq!(tls.cert, Path::new("/etc/memkv/tls/admin-cert.pem"));
    assert_eq!(config.rdma.gid_index, None);
}

#[test]
fn full_config_values_are_read() {
    let text = format!(
        "network:\n  address: \"[::1]:7000\"\n  auth_key: {KEY}\n  idle_timeout: 0\n  threads: 3\n\
memory:\n  block_size: 4KiB\n  max_size: 1.5 GiB\n\
storage:\n  mode: file\n  block_size: 8 MiB\n  drives:\n  - media: d0\n    size: 1 GB\n  - media: /abs/d1\n  eviction: none\n\
rdma:\n  enabled: false\n  device: rxe0\n  gid_index: 3\n  traffic_class: 106\n  service_level: 3\n  mtu: 1024\n  pkey_index: 1\n\
limits:\n  max_value_size: 16 MiB\n  max_connections: 5\n  per_connection_inflight_bytes: 16 MiB\n\
logging:\n  level: memkv_server=debug,warn\n"
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.network.admin_address().to_string(), "[::1]:7001");
    assert_eq!(config.network.idle_timeout, Duration::ZERO);
    assert_eq!(config.network.threads, Some(3));
    assert_eq!(config.memory.max_size, ByteSize(3 << 29));
    assert_eq!(config.storage.drives[0].media, PathBuf::from("d0"));
    assert_eq!(config.storage.drives[0].size, Some(ByteSize(1_000_000_000)));
    assert_eq!(config.storage.drives[1].size, None);
    assert_eq!(config.storage.eviction, EvictionPolicy::None);
    let rdma = &config.rdma;
    assert_eq!(
        (
            rdma.enabled,
            rdma.device.as_str(),
            rdma.gid_index,
            rdma.traffic_class,
            rdma.service_level
        ),
        (false, "rxe0", Some(3), Some(106), Some(3))
    );
    assert_eq!((rdma.mtu, rdma.pkey_index), (Some(1024), Some(1)));
    assert_eq!(config.limits.max_connections, 5);
    assert_eq!(config.logging.level, "memkv_server=debug,warn");
}

#[test]
fn every_error_names_key_and_line() {
    use ConfigErrorKind::*;
    let long_key = format!("network:\n  auth_key: {KEY}00\n");
    let bad_hex_key = format!("network:\n  auth_key: {}zz\n", &KEY[..62]);
    let cases: Vec<(&str, ConfigErrorKind, usize, &str, &[&str])> = vec![
        (
            "bogus: 1\n",
            UnknownKey,
            1,
            "bogus",
            &["unknown key `bogus`", "`network`"],
        ),
        (
            "network:\n  address: 0.0.0.0:9900\n  adress: x\n",
            UnknownKey,
            3,
            "network.adress",
            &["unknown key `adress`", "`address`"],
        ),
        (
            "storage:\n  mode: file\n  drives:\n    - media: a\n      sise: 1\n",
            UnknownKey,
            5,
            "storage.drives[0].sise",
            &["unknown key `sise`"],
        ),
        (
            "network: {adress: 1}\n",
            UnknownKey,
            1,
            "network.adress",
            &["unknown key"],
        ),
        (
            "memory:\n  block_size: 2 MB/s\n",
            InvalidValue,
            2,
            "memory.block_size",
            &["\"2 MB/s\"", "unknown unit", "accepted forms"],
        ),
        (
            "limits:\n  max_value_size: lots\n",
            InvalidValue,
            2,
            "limits.max_value_size",
            &["\"lots\"", "accepted forms"],
        ),
        (
            "memory:\n  block_size: 1000\n",
            InvalidValue,
            2,
            "memory.block_size",
            &["multiple of 4 KiB"],
        ),
        (
            "memory:\n  max_size: 1 MiB\n",
            InvalidValue,
            2,
            "memory.max_size",
            &["smaller than memory.block_size"],
        ),
        (
            "network:\n  tls_cert: c.pem\n",
            InvalidValue,
            2,
            "network.tls_cert",
            &["network.tls_key is not"],
        ),
        (
            "network:\n  address: 0.0.0.0:9900\n  tls_key: k.pem\n",
            InvalidValue,
            3,
            "network.tls_key",
            &["network.tls_cert is not"],
        ),
        (
            "network:\n  auth_key: abcd\n",
            InvalidValue,
            2,
            "network.auth_key",
            &["expected 64 hex characters, got 4"],
        ),
        (
            &long_key,
            InvalidValue,
            2,
            "network.auth_key",
            &["expected 64 hex characters, got 66"],
        ),
        (
            &bad_hex_key,
            InvalidValue,
            2,
            "network.auth_key",
            &["non-hex character at position 63"],
        ),
        (
            "network:\n  address: localhost\n",
            InvalidValue,
            2,
            "network.address",
            &["IP:port"],
        ),
        (
            "network:\n  address: 0.0.0.0:65535\n",
            InvalidValue,
            2,
            "network.address",
            &["port + 1"],
        ),
        (
            "rdma:\n  mtu: 1500\n",
            InvalidValue,
            2,
            "rdma.mtu",
            &["1500 is not one of 256, 512, 1024, 2048, 4096"],
        ),
        (
            "rdma:\n  mtu: abc\n",
            Syntax,
            2,
            "rdma.mtu",
            &["invalid type"],
        ),
        (
            "rdma:\n  service_level: 16\n",
            InvalidValue,
            2,
            "rdma.service_level",
            &["0..=15"],
        ),
        (
            "rdma:\n  gid_index: sometimes\n",
            Syntax,
            2,
            "rdma.gid_index",
            &["`auto`"],
        ),
        (
            "rdma:\n  num_dcis: 0\n",
            InvalidValue,
            2,
            "rdma.num_dcis",
            &["1..=4096"],
        ),
        (
            "rdma:\n  device: ''\n",
            InvalidValue,
            2,
            "rdma.device",
            &["empty"],
        ),
        (
            "storage:\n  mode: dirct\n",
            InvalidValue,
            2,
            "storage.mode",
            &["\"dirct\"", "memory, file or direct"],
        ),
        (
            "storage:\n  mode: file\n",
            InvalidValue,
            1,
            "storage.drives",
            &["at least one drive"],
        ),
        (
            "storage:\n  mode: memory\n  drives:\n  - media: /x\n",
            InvalidValue,
            3,
            "storage.drives",
            &["only used with storage.mode file or direct"],
        ),
        (
            "storage:\n  mode: file\n  drives:\n  - media: /x\n  - media: /x\n",
            InvalidValue,
            5,
            "storage.drives[1].media",
            &["listed twice"],
        ),
        (
            "storage:\n  mode: file\n  drives:\n  - media: /x\n    size: 1 MiB\n",
            InvalidValue,
            5,
            "storage.drives[0].size",
            &["smaller than storage.block_size"],
        ),
        (
            "storage:\n  drives:\n  - media: /dev/nvme0n1\n    size: 1 KiB\n",
            InvalidValue,
            4,
            "storage.drives[0].size",
            &["smaller than storage.block_size"],
        ),
        (
            "storage:\n  eviction: fifo\n",
            InvalidValue,
            2,
            "storage.eviction",
            &["lru or none"],
        ),
        (
            "storage:\n  pin_lease_secs: 0\n",
            InvalidValue,
            2,
            "storage.pin_lease_secs",
            &["1..=86400"],
        ),
        (
            "limits:\n  max_value_size: 1 GiB\n",
            InvalidValue,
            1,
            "limits.per_connection_inflight_bytes",
            &["smaller than limits.max_value_size"],
        ),
        (
            "limits:\n  max_connections: 0\n",
            InvalidValue,
            2,
            "limits.max_connections",
            &["1..=1000000"],
        ),
        (
            "logging:\n  level: loud\n",
            InvalidValue,
            2,
            "logging.level",
            &["\"loud\""],
        ),
        ("network: [\n", Syntax, 2, "", &[]),
    ];
    for (text, kind, line, key, fragments) in cases {
        let error = error_of(text);
        let shown = error.to_string();
        assert_eq!(error.kind, kind, "{text}\n{shown}");
        assert_eq!(error.line, Some(line), "{text}\n{shown}");
        if !key.is_empty() {
            assert_eq!(error.key.as_deref(), Some(key), "{text}\n{shown}");
            assert!(
                shown.starts_with(&format!("test.yaml:{line}: {key}: ")),
                "{shown}"
            );
        }
        for fragment in fragments {
            assert!(
                shown.contains(fragment),
                "{text}\nmissing {fragment:?} in {shown}"
            );
        }
        assert!(!shown.contains(&KEY[..32]), "error leaks the key: {shown}");
    }
}

#[test]
fn direct_mode_is_the_default_with_drives_and_takes_sizes_for_files() {
    let config = parse("storage:\n  mode: direct\n  drives:\n  - media: /dev/nvme0n1\n").unwrap();
    assert_eq!(config.storage.mode, StorageMode::Direct);
    let implied = parse("storage:\n  drives:\n  - media: /dev/nvme0n1\n").unwrap();
    assert_eq!(implied.storage.mode, StorageMode::Direct);
    let sized =
        parse("storage:\n  mode: direct\n  drives:\n  - media: d0\n    size: 64 MiB\n").unwrap();
    assert_eq!(sized.storage.drives[0].size, Some(ByteSize::mib(64)));
}

#[test]
fn load_reports_missing_file_and_resolves_relative_paths() {
    let dir = std::env::temp_dir().join(format!("memkv-config-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = ServerConfig::load(&dir.join("absent.yaml")).unwrap_err();
    assert_eq!(missing.kind, ConfigErrorKind::Io);
    assert!(
        missing.to_string().contains("absent.yaml: cannot read"),
        "{missing}"
    );

    let path = dir.join("c.yaml");
    std::fs::write(
        &path,
        "network:\n  tls_cert: c.pem\n  tls_key: /abs/k.pem\n",
    )
    .unwrap();
    let config = ServerConfig::load(&path).unwrap();
    let tls = config.network.tls.unwrap();
    assert_eq!(tls.cert, dir.join("c.pem"));
    assert_eq!(tls.key, PathBuf::from("/abs/k.pem"));

    std::fs::write(&path, "network:\n  tls_cert: c.pem\n").unwrap();
    let half = ServerConfig::load(&path).unwrap_err().to_string();
    assert_eq!(
        half,
        format!(
            "{}:2: network.tls_cert: is set but network.tls_key is not; set both or neither",
            path.display()
        )
    );

    let fallback = ServerConfig::load_or_fallback(None, &dir.join("absent.yaml")).unwrap();
    assert_eq!(fallback.source_name, EMBEDDED_SOURCE);
    std::fs::write(&path, "rdma:\n  device: rxe0\n").unwrap();
    let from_default = ServerConfig::load_or_fallback(None, &path).unwrap();
    assert_eq!(from_default.rdma.device, "rxe0");
    let explicit = ServerConfig::load_or_fallback(Some(&path), &dir.join("absent.yaml")).unwrap();
    assert_eq!(explicit.source_name, path.display().to_string());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn configured_auth_key_is_used_without_touching_key_files() {
    let config = parse(&format!("network:\n  auth_key: {KEY}\n")).unwrap();
    let (key, source) = config.resolve_auth_key().unwrap();
    assert_eq!(source, AuthKeySource::Config);
    assert_eq!(key.to_hex(), KEY);
}

#[test]
fn memkv_auth_key_comes_after_the_config_and_before_the_key_file() {
    const OTHER: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    let absent = std::path::Path::new("/nonexistent/memkv/auth_key");
    let config = ServerConfig::embedded_default();
    let (key, source) = config.resolve_auth_key_with(Some(OTHER), absent).unwrap();
    assert_eq!(
        (key.to_hex(), source),
        (OTHER.to_owned(), AuthKeySource::Env)
    );
    let configured = parse(&format!("network:\n  auth_key: {KEY}\n")).unwrap();
    let (key, source) = configured
        .resolve_auth_key_with(Some(OTHER), absent)
        .unwrap();
    assert_eq!(
        (key.to_hex(), source),
        (KEY.to_owned(), AuthKeySource::Config)
    );
    let e = config
        .resolve_auth_key_with(Some("abc"), absent)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("MEMKV_AUTH_KEY:"), "{e}");
    // Empty is unset: the key file is used.
    let dir = std::env::temp_dir().join(format!("memkv-config-env-key-{}", std::process::id()));
    let key_file = dir.join("memkv/auth_key");
    let (_, source) = config.resolve_auth_key_with(Some(" "), &key_file).unwrap();
    assert!(matches!(
        source,
        AuthKeySource::KeyFile { created: true, .. }
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_auth_key_uses_and_reuses_the_key_file() {
    let dir = std::env::temp_dir().join(format!("memkv-config-key-{}", std::process::id()));
    let key_file = dir.join("memkv/auth_key");
    let config = ServerConfig::embedded_default();
    let (first, source) = config.resolve_auth_key_with(None, &key_file).unwrap();
    assert_eq!(
        source,
        AuthKeySource::KeyFile {
            path: key_file.clone(),
            created: true
        }
    );
    let (second, source) = config.resolve_auth_key_with(None, &key_file).unwrap();
    assert_eq!(second, first);
    assert!(matches!(
        source,
        AuthKeySource::KeyFile { created: false, .. }
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn error_at_locates_keys_for_later_checks() {
    let config = parse("storage:\n  mode: file\n  drives:\n  - media: /x\n").unwrap();
    let error = config.error_at(
        ConfigErrorKind::InvalidValue,
        "storage.drives[0].media",
        "cannot open",
    );
    assert_eq!(
        error.to_string(),
        "test.yaml:4: storage.drives[0].media: cannot open"
    );
}

#[test]
fn yaml_level_errors_are_located() {
    let duplicate = error_of("network:\n  address: 0.0.0.0:9900\n  address: 0.0.0.0:9901\n");
    assert_eq!(
        (duplicate.line, duplicate.key.as_deref()),
        (Some(3), Some("network.address"))
    );
    assert!(duplicate.message.contains("duplicate"), "{duplicate}");

    let tab = error_of("network:\n\taddress: x\n");
    assert_eq!(
        (tab.kind, tab.line, tab.key.as_deref()),
        (ConfigErrorKind::Syntax, Some(2), None)
    );

    let wrong_type = error_of("storage:\n  drives: /dev/x\n");
    assert_eq!(
        wrong_type.to_string(),
        "test.yaml:2: storage.drives: invalid type: string \"/dev/x\", expected a sequence"
    );

    let not_a_mapping = error_of("- a\n");
    assert_eq!(not_a_mapping.kind, ConfigErrorKind::Syntax);
}

#[test]
fn debug_output_never_shows_the_key() {
    let config = parse(&format!("network:\n  auth_key: {KEY}\n")).unwrap();
    let shown = format!("{config:?}");
    assert!(shown.contains("AuthKey(<redacted>)"), "{shown}");
    assert!(!shown.contains(&KEY[..16]), "{shown}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Hostile or garbled files get an error, never a panic.
    #[test]
    fn arbitrary_yaml_never_panics(text in "[ a-z_.:#|>\\[\\]{}'\"\\-\n0-9]{0,160}") {
        let _ = parse(&text);
    }

    #[test]
    fn sections_with_arbitrary_values_never_panic(
        section in proptest::sample::select(vec!["network", "memory", "storage", "rdma", "limits", "logging"]),
        key in proptest::sample::select(vec!["address", "auth_key", "block_size", "max_size", "mode", "mtu", "drives", "level", "max_value_size", "gid_index"]),
        value in "[ -~]{0,40}",
    ) {
        let _ = parse(&format!("{section}:\n  {key}: {value}\n"));
    }
}

#[test]
fn prefault_can_be_turned_off_and_must_be_a_bool() {
    let off = ServerConfig::from_yaml_str("memory:\n  prefault: false\n", "t.yaml").unwrap();
    assert!(!off.memory.prefault);
    let bad = ServerConfig::from_yaml_str("memory:\n  prefault: sometimes\n", "t.yaml")
        .unwrap_err()
        .to_string();
    assert!(bad.contains("prefault"), "{bad}");
}

#[test]
fn file_reads_is_mapped_or_pread() {
    let base = "storage:\n  mode: file\n  drives:\n    - media: /tmp/memkv-cfg-test-drive\n";
    let default = ServerConfig::from_yaml_str(base, "t.yaml").unwrap();
    assert_eq!(default.storage.file_reads, FileReads::Mapped);
    let pread =
        ServerConfig::from_yaml_str(&format!("{base}  file_reads: pread\n"), "t.yaml").unwrap();
    assert_eq!(pread.storage.file_reads, FileReads::Pread);
    let bad = ServerConfig::from_yaml_str(&format!("{base}  file_reads: mmap\n"), "t.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("storage.file_reads") && bad.contains("mapped or pread"),
        "{bad}"
    );
}

#[test]
fn rdma_staging_must_hold_the_largest_value_in_drive_backed_modes() {
    let drives = "storage:\n  mode: file\n  drives:\n  - media: /x\n";
    let config = parse(drives).unwrap();
    assert_eq!(config.rdma.staging_size, ByteSize::mib(256));
    let config = parse(&format!("{drives}rdma:\n  staging_size: 64 MiB\n")).unwrap();
    assert_eq!(config.rdma.staging_size, ByteSize::mib(64));

    // 64 MiB values in 3 MiB chunks take 22 chunks, 66 MiB.
    let too_small =
        format!("{drives}memory:\n  block_size: 3 MiB\nrdma:\n  staging_size: 64 MiB\n");
    let error = error_of(&too_small);
    assert_eq!(error.key.as_deref(), Some("rdma.staging_size"));
    let shown = error.to_string();
    for needle in ["limits.max_value_size", "memory.block_size", "66 MiB"] {
        assert!(shown.contains(needle), "{shown} lacks {needle}");
    }
    // Not checked where nothing is staged: memory mode, or RDMA off.
    parse("rdma:\n  staging_size: 1 MiB\n").unwrap();
    parse(&format!(
        "{drives}rdma:\n  enabled: false\n  staging_size: 1 MiB\n"
    ))
    .unwrap();
}

#[test]
fn threads_out_of_range_are_refused_by_name() {
    for bad in ["0", "4097"] {
        let err = parse(&format!("network:\n  auth_key: {KEY}\n  threads: {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("network.threads"), "{err}");
        assert!(err.contains("1..=4096"), "{err}");
    }
    let err = parse(&format!("network:\n  auth_key: {KEY}\n  threads: -1\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("threads"), "{err}");
}

#[test]
fn tcp_congestion_is_a_kernel_algorithm_name() {
    let config = parse(&format!("network:\n  auth_key: {KEY}\n")).unwrap();
    assert_eq!(config.network.tcp_congestion, None, "the host's default");
    let config = parse(&format!(
        "network:\n  auth_key: {KEY}\n  tcp_congestion: cubic\n"
    ))
    .unwrap();
    assert_eq!(config.network.tcp_congestion.as_deref(), Some("cubic"));
    for bad in [
        "\"\"",
        "\"cubic reno\"",
        "averyveryverylongname",
        "\"bbr;\"",
    ] {
        let err = parse(&format!(
            "network:\n  auth_key: {KEY}\n  tcp_congestion: {bad}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("network.tcp_congestion"), "{err}");
        assert!(err.contains("1-15 letters"), "{err}");
    }
}

/// A frame's payload length is 32 bits: a larger value limit would let a get of such a value
/// overflow its answer's length.
#[test]
fn max_value_size_stops_at_what_a_frame_can_carry() {
    let limits = |size: &str| {
        format!(
            "network:\n  auth_key: {KEY}\nlimits:\n  max_value_size: {size}\n  per_connection_inflight_bytes: 8 GiB\n"
        )
    };
    let largest = parse(&limits("4294963199")).unwrap();
    assert_eq!(largest.limits.max_value_size, MAX_VALUE_SIZE_LIMIT);
    let frame = crate::store_config::wire_limits(&largest).max_frame_payload;
    assert_eq!(frame, u64::from(u32::MAX));
    for (over, shown) in [
        ("4294963200", "4194300 KiB"),
        ("4 GiB", "4 GiB"),
        ("1 TiB", "1 TiB"),
    ] {
        let err = error_of(&limits(over));
        assert_eq!(err.kind, ConfigErrorKind::InvalidValue);
        assert_eq!(
            (err.key.as_deref(), err.line),
            (Some("limits.max_value_size"), Some(4))
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("{shown} exceeds 4294963199 B"))
                && text.contains("the largest value a frame can carry"),
            "{text}"
        );
    }
}
