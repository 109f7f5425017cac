//! Fuzzes the rtnetlink dcbnl reply parser (what the kernel answers to DCB_CMD_IEEE_GET) and
//! the lossless-class choice made from what it parsed. Run with `scripts/fuzz dcbnl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = memkv_fabric::dcb::parse_dcb_reply(data) {
        let _ = memkv_fabric::dcb::interpret_reply("eth0", reply);
    }
});
