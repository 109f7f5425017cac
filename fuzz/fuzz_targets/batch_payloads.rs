//! Fuzzes the batch payload decoders (BatchPut requests, key lists, BatchGet responses,
//! statuses); what decodes must re-encode to the same items, and the frame-checksum walker must
//! agree with the decoders. Run with `scripts/fuzz batch_payloads`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memkv_proto::fuzzing::batch_payloads(data);
});
