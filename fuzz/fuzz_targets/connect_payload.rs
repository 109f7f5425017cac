//! Fuzzes the Connect payload (an RDMA endpoint) decoder; what decodes must re-encode to the
//! same endpoint. Run with `scripts/fuzz connect_payload`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memkv_proto::fuzzing::connect_payload(data);
});
