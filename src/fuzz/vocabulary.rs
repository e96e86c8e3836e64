//! The fuzz bodies of the xDS vocabulary (`xds::fuzz`: the JSON codec, the
//! config-source rewrite) run on mutated real inputs ([`super::mutated`]).

use proptest::test_runner::TestRunner;

use crate::fuzz;
use crate::xds::fuzz::{
    check_rewrite, codec, json_to_proto, request_readers_agree, DISCOVERY_REQUEST,
};
use crate::xds::DiscoveryRequestView;

#[test]
fn fuzz_codec_discovery_requests() {
    let mut runner = TestRunner::new(fuzz::config(48));
    let inputs = fuzz::mutated(fuzz::envoy_requests(), 8);
    runner
        .run(&inputs, |body| {
            request_readers_agree(&body);
            Ok(())
        })
        .unwrap();
}

/// Found by `discovery_post`: invalid UTF-8 in a field protobuf's
/// mapping skips. The reader refuses the body; prost-reflect never reads
/// those bytes. Not JSON, so not compared.
#[test]
fn readers_are_compared_on_utf8_bodies_only() {
    let body = b"{\"node\":{\"id\":\"n\",\"user_agent_build_version\":{\"unknown\":\"\xfe\"}}}";
    assert!(DiscoveryRequestView::parse(body).is_err());
    assert!(codec().parse_message(DISCOVERY_REQUEST, body, true).is_ok());
    request_readers_agree(body);
}

#[test]
fn fuzz_codec_resource_round_trip() {
    let mut runner = TestRunner::new(fuzz::config(256));
    let inputs = fuzz::mutated(fuzz::resources(), 4);
    runner
        .run(&inputs, |json| {
            let _ = json_to_proto(&json);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_rewrite_resources() {
    let codec = codec();
    let mut runner = TestRunner::new(fuzz::config(256));
    let inputs = fuzz::mutated(fuzz::resources(), 4);
    runner
        .run(&inputs, |json| {
            if let Ok(any) = codec.parse_any(&json) {
                let _ = check_rewrite(codec, &any.type_url, &any.value);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_rewrite_protobuf_bytes() {
    let codec = codec();
    let anys: Vec<prost_types::Any> = fuzz::resources()
        .iter()
        .map(|json| codec.parse_any(json).expect("the corpus parses"))
        .collect();
    let type_urls: Vec<String> = anys.iter().map(|a| a.type_url.clone()).collect();
    let values: Vec<Vec<u8>> = anys.into_iter().map(|a| a.value).collect();
    // Any type's bytes under any type: mismatches are inputs too.
    let inputs = (
        proptest::sample::select(type_urls),
        fuzz::mutated(values, 6),
    );
    let mut runner = TestRunner::new(fuzz::config(512));
    runner
        .run(&inputs, |(type_url, value)| {
            let _ = check_rewrite(codec, &type_url, &value);
            Ok(())
        })
        .unwrap();
}
