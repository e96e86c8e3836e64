#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    xds_gateway::fuzz::discovery_post(data);
});
