#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    xds_gateway::fuzz::proto_to_json(data);
});
