//! Fuzzes both handshake state machines with a stream of frames, and the session opener with
//! whatever follows an established handshake. Run with `scripts/fuzz handshake`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memkv_proto::fuzzing::handshake(data);
});
