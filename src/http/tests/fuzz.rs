//! Fuzz targets of the request parser (what they share, and how to run them
//! longer, is in `crate::fuzz`): POST bodies (mutated real Envoy requests)
//! and GET query strings with `If-None-Match`, each parsed directly and sent
//! through the router to a gateway on the embedded snapshot.
//!
//! Properties: nothing panics; a body is either parsed or refused with a
//! `RequestError`; every answer is a 200 or 304, or a 4xx whose body is a
//! JSON `{"code", "message"}`, never a 5xx; and a bad request does not
//! change what the next good one gets.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, StatusCode};
use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use tower::ServiceExt;

use super::super::query::Params;
use super::super::{router, Gateway};
use super::demo_gateway;
use crate::cache::ParsedRequests;
use crate::config::{Config, SessionKey};
use crate::fuzz;
use crate::xds::{Endpoint, ResourceType};

/// The demo gateway, holding a 304 no longer than a few milliseconds.
fn gateway() -> Arc<Gateway> {
    demo_gateway(Config {
        allow_secrets: true,
        max_wait: Duration::from_millis(5),
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Sends `request`; fails the case unless the answer is a 200, a 304, or a
/// 4xx with a `{"code", "message"}` JSON body.
async fn answer_is_sound(gw: &Arc<Gateway>, request: Request<Body>) -> Result<(), TestCaseError> {
    let what = format!("{} {}", request.method(), request.uri());
    let response = router(gw.clone())
        .oneshot(request)
        .await
        .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .map_err(|e| TestCaseError::fail(format!("{what}: body: {e}")))?;
    if status == StatusCode::OK || status == StatusCode::NOT_MODIFIED {
        return Ok(());
    }
    prop_assert!(
        status.is_client_error(),
        "{what}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let error: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| TestCaseError::fail(format!("{what}: {status} without a JSON body: {e}")))?;
    prop_assert!(
        error["code"].is_i64() && error["message"].is_string(),
        "{what}: {status} {error}"
    );
    Ok(())
}

/// The types the fuzzed gateway (a snapshot) serves: the delta-only ones
/// answer it a documented 501 whatever the request, through the same parsing.
fn kinds() -> impl Strategy<Value = ResourceType> {
    let served: Vec<ResourceType> = ResourceType::ALL
        .into_iter()
        .filter(|kind| !kind.delta_only())
        .collect();
    proptest::sample::select(served)
}

#[test]
fn fuzz_post_bodies() {
    let rt = runtime();
    let _in_runtime = rt.enter();
    let gw = gateway();
    let memo = ParsedRequests::new(SessionKey::Node);
    let inputs = (kinds(), fuzz::mutated(fuzz::envoy_requests(), 8));
    let mut runner = TestRunner::new(fuzz::config(128));
    runner
        .run(&inputs, |(kind, body)| {
            // Parsed or refused (a RequestError), never a panic.
            let _ = memo.parse(Bytes::from(body.clone()));
            let request = Request::post(Endpoint::Discovery(kind).path())
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            rt.block_on(answer_is_sound(&gw, request))
        })
        .unwrap();
}

/// A query string: known and unknown names, values with `%` escapes
/// (valid or not), `+`, repeats and empty pairs.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        proptest::sample::select(vec![
            "wait", "pretty", "format", "node", "cluster", "names", "version"
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
        "[ -~]{0,12}".prop_map(|s| s.replace(['&', '#', ' '], "")),
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
    let rt = runtime();
    let _in_runtime = rt.enter();
    let gw = gateway();
    let inputs = (kinds(), query(), if_none_match());
    let mut runner = TestRunner::new(fuzz::config(256));
    runner
        .run(&inputs, |(kind, query, tag)| {
            // Parsed or refused with an ApiError, never a panic.
            let _ = Params::parse(&query);
            let uri = format!("{}?{query}", Endpoint::Discovery(kind).path());
            let mut request = Request::get(uri.as_str());
            if let Some(value) = tag.and_then(|t| HeaderValue::from_bytes(&t).ok()) {
                request = request.header(header::IF_NONE_MATCH, value);
            }
            // A string the URI grammar refuses never reaches a server.
            let Ok(request) = request.body(Body::empty()) else {
                return Ok(());
            };
            rt.block_on(answer_is_sound(&gw, request))
        })
        .unwrap();
}

async fn body_of(gw: &Arc<Gateway>, request: Request<Body>) -> Bytes {
    let response = router(gw.clone())
        .oneshot(request)
        .await
        .expect("the router is infallible");
    axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .expect("a body")
}

/// Bad requests in between do not change what a good one gets.
#[test]
fn fuzz_bad_requests_leave_the_answer_alone() {
    let rt = runtime();
    let _in_runtime = rt.enter();
    let gw = gateway();
    let good = || {
        Request::get("/v3/discovery:clusters?node=demo&cluster=c")
            .body(Body::empty())
            .expect("a request")
    };
    let body_of = |request| body_of(&gw, request);
    let before = rt.block_on(body_of(good()));
    let inputs = fuzz::mutated(fuzz::envoy_requests(), 8);
    let mut runner = TestRunner::new(fuzz::config(32));
    runner
        .run(&inputs, |body| {
            let bad = Request::post("/v3/discovery:clusters")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            rt.block_on(body_of(bad));
            prop_assert_eq!(&rt.block_on(body_of(good())), &before);
            Ok(())
        })
        .unwrap();
}
