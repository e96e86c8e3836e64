#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    xds_gateway::fuzz::upstream_response(data);
});
