//! Fuzzes the same-host transport's LocalAttach answer and the Unix socket's attach answer
//! (both come from a server). Run with `scripts/fuzz local_attach`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memkv_proto::fuzzing::local_attach(data);
});
