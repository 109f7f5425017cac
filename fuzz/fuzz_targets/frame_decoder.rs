//! Fuzzes every decoder that reads bytes arriving from a peer: frame headers, whole frames,
//! batch payloads and control messages. Run with `cargo +nightly fuzz run frame_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memkv_proto::fuzzing::decode_everything(data);
});
