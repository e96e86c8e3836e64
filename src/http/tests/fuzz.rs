//! The REST fuzz targets (`http::fuzz`: POST bodies, GET query strings with
//! `If-None-Match`, each through the router) driven by proptest: mutated
//! real Envoy requests, and query strings built from the names and values
//! the endpoints know. What they check is the targets' own business; how
//! to run them longer is in `crate::fuzz`.

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::super::fuzz::{discovery_get, discovery_post};
use crate::fuzz;

#[test]
fn fuzz_post_bodies() {
    let inputs = (any::<u8>(), fuzz::mutated(fuzz::envoy_requests(), 8));
    let mut runner = TestRunner::new(fuzz::config(64));
    runner
        .run(&inputs, |(selector, body)| {
            let mut input = vec![selector];
            input.extend_from_slice(&body);
            discovery_post(&input);
            Ok(())
        })
        .unwrap();
}

/// A query string: known and unknown names, values with `%` escapes
/// (valid or not), `+`, repeats and empty pairs.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        proptest::sample::select(vec![
            "wait", "pretty", "format", "node", "cluster", "names", "version", "changes"
        ])
        .prop_map(str::to_owned),
        "[a-z%0-9+]{0,6}",
    ];
    let value = prop_oneof![
        proptest::sample::select(vec![
            "",
            "0",
            "1",
            "true",
            "false",
            "json",
            "yaml",
            "25s",
            "1ms",
            "5m",
            "10h 3s",
            "soon",
            "-1s",
            "99999999999999999999s",
            "demo",
            "a,b,,c",
            "%ff",
            "%E2%82%AC",
            "%",
        ])
        .prop_map(str::to_owned),
        "[ -~]{0,12}".prop_map(|s| s.replace(['&', '#', ' ', '\n'], "")),
    ];
    let pair = prop_oneof![
        (name.clone(), value).prop_map(|(n, v)| format!("{n}={v}")),
        name,
    ];
    proptest::collection::vec(pair, 0..6).prop_map(|pairs| pairs.join("&"))
}

/// An `If-None-Match` value (of any bytes a header may hold), or none.
fn if_none_match() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(prop_oneof![
        proptest::sample::select(vec![
            "*",
            "W/*",
            "\"v\"",
            "W/\"v\"",
            "v",
            "\"a\", \"b\"",
            "\"",
            "W/",
            "\"\"",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..16),
    ])
}

#[test]
fn fuzz_get_queries() {
    let inputs = (any::<u8>(), query(), if_none_match());
    let mut runner = TestRunner::new(fuzz::config(128));
    runner
        .run(&inputs, |(selector, query, tag)| {
            let mut input = vec![selector];
            input.extend_from_slice(query.as_bytes());
            if let Some(tag) = tag {
                input.push(b'\n');
                input.extend_from_slice(&tag);
            }
            discovery_get(&input);
            Ok(())
        })
        .unwrap();
}
