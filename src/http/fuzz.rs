//! Fuzz targets of the REST face (`crate::fuzz` lists them all): a POST
//! body, and a GET query string with `If-None-Match`, each parsed directly
//! and sent through the router to a fresh gateway on the embedded demo
//! snapshot (fresh per input, on a runtime of its own: what an input leaves
//! behind cannot decide what the next one gets, so a finding replays).
//!
//! Properties, each a panic when broken:
//! - every answer is a 200 or a 304 (a watch: its first frame arrives), or
//!   a 4xx whose body is a JSON `{"code", "message"}`; never a 5xx;
//! - a body that protobuf's JSON mapping reads as a DiscoveryRequest, the
//!   gateway's own reader reads too, with the same fields
//!   ([`crate::xds::fuzz::request_readers_agree`]);
//! - a request, good or bad, does not change what another node is served
//!   next (a bystander's GET answers the same bytes as on a gateway that saw
//!   nothing else).

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::{router, Gateway};
use crate::cache::{Assembler, Intake, ParsedRequests};
use crate::config::{Config, SessionKey};
use crate::face::Params;
use crate::metrics::Metrics;
use crate::store::{Inspect, Sessions};
use crate::upstream::{FileFeeder, Origin};
use crate::xds::{Codec, Endpoint, ResourceType};

/// The query strings a POST is sent with, picked by the kind byte's high
/// bits: the presentations, `?changes`, a long poll and both watch formats.
const POST_QUERIES: [&str; 8] = [
    "",
    "?pretty",
    "?format=yaml",
    "?changes",
    "?wait=1ms",
    "?watch",
    "?watch&format=sse",
    "?changes&pretty",
];

/// The node whose answer no other request may change.
const BYSTANDER: &str = "fuzz-bystander";
const BYSTANDER_GET: &str = "/v3/discovery:clusters?node=fuzz-bystander&cluster=fuzz";

/// How long any answer (or a watch's first frame) may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `discovery_post`: kind byte (low 3 bits: one of the eight types a
/// snapshot serves; the rest: one of [`POST_QUERIES`]), then the body.
/// Accepted: answered 200 or 304.
pub(crate) fn discovery_post(data: &[u8]) -> bool {
    let Some((&selector, body)) = data.split_first() else {
        return false;
    };
    let kind = served_kind(selector);
    let query = POST_QUERIES[usize::from(selector >> 3) % POST_QUERIES.len()];
    let body = Bytes::copy_from_slice(body);

    // Parsed or refused (a RequestError), never a panic; and the two readers
    // of a DiscoveryRequest agree.
    let parsed = ParsedRequests::new(SessionKey::Node).parse(body.clone());
    crate::xds::fuzz::request_readers_agree(&body);
    let node = parsed.ok().map(|p| p.node_id().to_owned());

    let uri = format!("{}{query}", Endpoint::Discovery(kind).path());
    let request = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a static path and query");
    answer_then_bystander(request, node.as_deref())
}

/// `discovery_get`: kind byte (one of the eight types a snapshot serves),
/// then the query string, then optionally `\n` and an `If-None-Match` value.
/// Accepted: answered 200 or 304.
pub(crate) fn discovery_get(data: &[u8]) -> bool {
    let Some((&selector, rest)) = data.split_first() else {
        return false;
    };
    let kind = served_kind(selector);
    let (query, tag) = match rest.iter().position(|&b| b == b'\n') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    // A query string is text; other bytes never reach a router.
    let Ok(query) = std::str::from_utf8(query) else {
        return false;
    };
    // Parsed or refused with an ApiError, never a panic.
    let node = Params::parse(query)
        .ok()
        .and_then(|p| p.0.get("node").cloned());
    let uri = format!("{}?{query}", Endpoint::Discovery(kind).path());
    let mut request = Request::get(uri.as_str());
    if let Some(value) = tag.and_then(|t| HeaderValue::from_bytes(t).ok()) {
        request = request.header(header::IF_NONE_MATCH, value);
    }
    // A string the URI grammar refuses never reaches a server.
    let Ok(request) = request.body(Body::empty()) else {
        return false;
    };
    answer_then_bystander(request, node.as_deref())
}

/// One of the eight types a snapshot serves (the delta-only two answer a
/// documented 501 whatever the request).
fn served_kind(selector: u8) -> ResourceType {
    let served: Vec<ResourceType> = ResourceType::BUILT_IN
        .into_iter()
        .filter(|kind| !kind.delta_only())
        .collect();
    served[usize::from(selector) % served.len()]
}

/// Sends `request` to a fresh gateway and checks its answer; then, unless
/// it came from the bystander itself, that the bystander's answer is the
/// one a fresh gateway gives. True if `request` was answered 200 or 304.
fn answer_then_bystander(request: Request<Body>, node: Option<&str>) -> bool {
    let expected = bystander_answer();
    on_fresh_runtime(async {
        let gw = demo_gateway();
        let answered = check_answer(&gw, request).await;
        if node != Some(BYSTANDER) {
            let (status, body) = send(&gw, bystander_request()).await;
            assert_eq!(status, StatusCode::OK, "the bystander's poll");
            assert!(
                body == expected,
                "a request changed what another node is served:\n{}\nnot\n{}",
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(expected),
            );
        }
        answered
    })
}

/// What the bystander gets from a gateway that saw nothing else.
fn bystander_answer() -> &'static Bytes {
    static ANSWER: OnceLock<Bytes> = OnceLock::new();
    ANSWER.get_or_init(|| {
        on_fresh_runtime(async {
            let (status, body) = send(&demo_gateway(), bystander_request()).await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
            body
        })
    })
}

fn bystander_request() -> Request<Body> {
    Request::get(BYSTANDER_GET)
        .body(Body::empty())
        .expect("a static request")
}

/// Runs `future` on a runtime of its own, dropped after (with every task
/// the input spawned).
fn on_fresh_runtime<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

/// A gateway on the demo snapshot (secrets allowed, a 304 held no longer
/// than a few milliseconds). The intake, which caches renders of the same
/// bytes only, is shared: building the codec is the slow part.
fn demo_gateway() -> Arc<Gateway> {
    static RENDERER: OnceLock<Intake> = OnceLock::new();
    let intake = RENDERER
        .get_or_init(|| Intake::new(Codec::embedded()))
        .clone();
    let config = Config {
        allow_secrets: true,
        max_wait: Duration::from_millis(5),
        ..Config::default()
    };
    file_gateway(crate::demo::origin(), intake, &config).0
}

/// A gateway over sessions on the snapshot `origin`, rendered with
/// `intake`, and what the admin face would read of its sessions (the
/// http unit tests' snapshot gateways are this too).
pub(super) fn file_gateway(
    origin: Origin,
    intake: Intake,
    config: &Config,
) -> (Arc<Gateway>, Arc<dyn Inspect>) {
    let feeder = FileFeeder::start(origin, intake.clone(), config.session_key);
    let metrics = Arc::new(Metrics::new());
    let source = Sessions::start(
        Arc::new(feeder),
        intake.clone(),
        crate::observe::ConfigHistory::default(),
        metrics.clone(),
        config,
    );
    let inspected: Arc<dyn Inspect> = source.clone();
    let assembler = Assembler::new(intake.codec().clone());
    let gateway = Gateway::new(config.rest(), source, assembler, metrics);
    (Arc::new(gateway), inspected)
}

/// Sends `request`; panics unless the answer is a 200, a 304, or a 4xx
/// with a `{"code", "message"}` JSON body. True for a 200 or a 304.
async fn check_answer(gw: &Arc<Gateway>, request: Request<Body>) -> bool {
    let what = format!("{} {}", request.method(), request.uri());
    let (status, body) = send(gw, request).await;
    if status == StatusCode::OK || status == StatusCode::NOT_MODIFIED {
        return true;
    }
    let text = String::from_utf8_lossy(&body);
    assert!(status.is_client_error(), "{what}: {status} {text}");
    let error: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{what}: {status} without a JSON body ({e}): {text}"));
    assert!(
        error["code"].is_i64() && error["message"].is_string(),
        "{what}: {status} {error}"
    );
    false
}

/// Status and body of the router's answer to `request`; of a watch, the
/// first frame only (the stream stays open).
async fn send(gw: &Arc<Gateway>, request: Request<Body>) -> (StatusCode, Bytes) {
    let what = format!("{} {}", request.method(), request.uri());
    let response = router(gw.clone())
        .oneshot(request)
        .await
        .unwrap_or_else(|e| match e {});
    let status = response.status();
    let body = tokio::time::timeout(ANSWER_WITHIN, read(response))
        .await
        .unwrap_or_else(|_| panic!("{what}: {status}, no answer within {ANSWER_WITHIN:?}"));
    (status, body)
}

async fn read(response: Response<Body>) -> Bytes {
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.starts_with("text/event-stream") || t.starts_with("application/x-ndjson")
        });
    let mut body = response.into_body();
    if !streams {
        return body.collect().await.expect("an in-process body").to_bytes();
    }
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return data;
                }
            }
            Some(Err(e)) => panic!("a watch failed before its first frame: {e}"),
            None => return Bytes::new(),
        }
    }
}
