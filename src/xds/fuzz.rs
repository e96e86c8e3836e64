//! Fuzz targets of the JSON codec and the config-source rewrite (test builds
//! only; what they share, and how to run them longer, is in `crate::fuzz`).
//!
//! Properties: nothing panics; every failure is a [`JsonError`]; what parses
//! renders, and the render is a fixed point (parse it again, render it again:
//! the same bytes); a DiscoveryRequest the proto3 parser accepts, the
//! gateway's own request reader accepts too, and reads the same fields; a
//! rewrite leaves nothing to rewrite and is the same every time.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::rewrite::{rewrite_config_sources, RestTarget};
use super::{Codec, DiscoveryRequestView, JsonError};
use crate::fuzz;

const DISCOVERY_REQUEST: &str = "envoy.service.discovery.v3.DiscoveryRequest";

/// A resource that parsed renders, and its render is a fixed point.
fn render_fixed_point(codec: &Codec, type_url: &str, value: &[u8]) -> Result<(), TestCaseError> {
    let first = codec
        .render_any(type_url, value)
        .map_err(|e| TestCaseError::fail(format!("a parsed {type_url} does not render: {e}")))?;
    let again = codec
        .parse_any(&first)
        .map_err(|e| TestCaseError::fail(format!("our own render does not parse: {e}")))?;
    let second = codec
        .render_any(&again.type_url, &again.value)
        .map_err(|e| TestCaseError::fail(format!("the re-parse does not render: {e}")))?;
    prop_assert_eq!(
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&second),
        "render is not a fixed point"
    );
    Ok(())
}

#[test]
fn fuzz_codec_discovery_requests() {
    let codec = Codec::embedded();
    let mut runner = TestRunner::new(fuzz::config(48));
    let inputs = fuzz::mutated(fuzz::envoy_requests(), 8);
    runner
        .run(&inputs, |body| {
            let Ok(msg) = codec.parse_message(DISCOVERY_REQUEST, &body, true) else {
                return Ok(());
            };
            let json = codec
                .render_message(&msg, DISCOVERY_REQUEST)
                .map_err(|e| TestCaseError::fail(format!("does not render: {e}")))?;
            let again = codec
                .parse_message(DISCOVERY_REQUEST, &json, false)
                .map_err(|e| TestCaseError::fail(format!("render does not parse: {e}")))?;
            let json_again = codec
                .render_message(&again, DISCOVERY_REQUEST)
                .map_err(|e| TestCaseError::fail(format!("does not render again: {e}")))?;
            prop_assert_eq!(&json, &json_again, "render is not a fixed point");

            // What protobuf's JSON mapping accepts, the request reader does too.
            let view = DiscoveryRequestView::parse(&body).map_err(|e| {
                TestCaseError::fail(format!("proto3 JSON accepts it, the reader refuses: {e}"))
            })?;
            let field = |name: &str| msg.get_field_by_name(name).map(|v| v.into_owned());
            let string = |name: &str| field(name).and_then(|v| v.as_str().map(str::to_owned));
            prop_assert_eq!(Some(view.version_info), string("version_info"));
            prop_assert_eq!(Some(view.type_url), string("type_url"));
            let names = field("resource_names")
                .and_then(|v| v.as_list().map(<[_]>::to_vec))
                .unwrap_or_default();
            let names: Vec<String> = names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect();
            prop_assert_eq!(view.resource_names, names);
            if let Some(node) = view.node {
                let node_msg = field("node");
                let node_msg = node_msg.as_ref().and_then(|n| n.as_message());
                let id = node_msg.and_then(|n| n.get_field_by_name("id"));
                prop_assert_eq!(
                    Some(node.id.as_str()),
                    id.as_deref().and_then(|v| v.as_str())
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_codec_resource_round_trip() {
    let codec = Codec::embedded();
    let mut runner = TestRunner::new(fuzz::config(256));
    let inputs = fuzz::mutated(fuzz::resources(), 4);
    runner
        .run(&inputs, |json| {
            match codec.parse_any(&json) {
                Ok(any) => render_fixed_point(&codec, &any.type_url, &any.value)?,
                Err(JsonError::Parse { .. } | JsonError::UnknownType { .. }) => {}
                Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
            }
            Ok(())
        })
        .unwrap();
}

fn target() -> RestTarget {
    RestTarget {
        cluster_name: "xds_cluster".into(),
        refresh_delay: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(10),
    }
}

/// Rewrites `value` of `type_url`: an error is a typed one; a rewrite
/// decodes, leaves nothing to rewrite, and is the same the second time.
fn check_rewrite(codec: &Codec, type_url: &str, value: &[u8]) -> Result<(), TestCaseError> {
    let out = match rewrite_config_sources(codec, type_url, value, &target()) {
        Ok(Some(out)) => out,
        Ok(None) => return Ok(()),
        // Bytes that are not a message of the type, at any depth.
        Err(
            JsonError::Decode { .. }
            | JsonError::UnknownType { .. }
            | JsonError::MalformedTypeUrl { .. },
        ) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
    };
    let left = rewrite_config_sources(codec, type_url, &out, &target())
        .map_err(|e| TestCaseError::fail(format!("a rewrite does not decode: {e}")))?;
    prop_assert!(left.is_none(), "a rewrite left a config source to rewrite");
    let again = rewrite_config_sources(codec, type_url, value, &target())
        .map_err(|e| TestCaseError::fail(format!("the second rewrite failed: {e}")))?
        .ok_or_else(|| TestCaseError::fail("the second rewrite changed nothing"))?;
    // Bytes may differ (protobuf maps encode in hash order): compare renders.
    let (first, second) = (
        codec.render_any(type_url, &out),
        codec.render_any(type_url, &again),
    );
    if let (Ok(first), Ok(second)) = (first, second) {
        prop_assert_eq!(first, second, "the rewrite is not deterministic");
    }
    Ok(())
}

#[test]
fn fuzz_rewrite_resources() {
    let codec = Codec::embedded();
    let mut runner = TestRunner::new(fuzz::config(256));
    let inputs = fuzz::mutated(fuzz::resources(), 4);
    runner
        .run(&inputs, |json| match codec.parse_any(&json) {
            Ok(any) => check_rewrite(&codec, &any.type_url, &any.value),
            Err(_) => Ok(()),
        })
        .unwrap();
}

#[test]
fn fuzz_rewrite_protobuf_bytes() {
    let codec = Codec::embedded();
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
            check_rewrite(&codec, &type_url, &value)
        })
        .unwrap();
}
