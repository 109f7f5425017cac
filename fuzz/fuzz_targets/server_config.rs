//! Fuzzes the server's configuration: YAML parsing and every check after it
//! (`ServerConfig::from_yaml_str`, as `memkv start --config` reads a file). Run with
//! `scripts/fuzz server_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = memkv_server::config::ServerConfig::from_yaml_str(text, "fuzz.yaml");
    }
});
