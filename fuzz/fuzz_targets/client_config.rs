//! Fuzzes the client's configuration file (the YAML named by MEMKV_CONFIG) and its resolution
//! with an empty environment (`ClientConfig::resolve`). Run with `scripts/fuzz client_config`.
#![no_main]

use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        // No environment, and a key file that does not exist: the file's own auth_key is the
        // only one there is.
        let _ = memkv_client::ClientConfig::resolve(
            Some((Path::new("fuzz.yaml"), text)),
            &|_| None,
            Path::new("/nonexistent/memkv-fuzz/auth_key"),
        );
    }
});
