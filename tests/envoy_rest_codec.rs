//! Interop: a real Envoy 1.40 accepts the JSON our [`Codec`] renders, over
//! REST xDS.
//!
//! The test runs, all on 127.0.0.1: a backend HTTP server; a minimal REST
//! xDS server serving one Cluster (EDS), one ClusterLoadAssignment, one
//! Listener (HttpConnectionManager with RDS) and one RouteConfiguration, each
//! written as snake_case JSON (the fixtures of `support/envoy.rs`, with REST
//! config sources pointing back at that server), parsed with
//! `Codec::parse_any` and rendered with `Codec::render_any` (the code under
//! test); and Envoy (started by `support/envoy.rs`) with a bootstrap whose
//! LDS and CDS poll that server. It then asserts that Envoy
//! applied every update (admin `/stats`: `update_success >= 1`,
//! `update_rejected == 0` for CDS, EDS, LDS and RDS), acknowledged version
//! "1" on its next poll of each type, and routes a request through its
//! listener to the backend; and that Envoy's requests were snake_case
//! `DiscoveryRequest`s carrying its node.
//!
//! With `XDS_GATEWAY_CAPTURE_REQUEST=<path>` set, one raw CDS request body
//! (full node, ~77 KB) is saved there for the benchmarks.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use xds_gateway::xds::Codec;

use envoy::{
    Envoy, CLA_TYPE, CLUSTER_TYPE, CONVERGE_TIMEOUT, FIXTURE_SUBSCRIPTIONS, LISTENER_TYPE,
    NODE_CLUSTER, POLL_INTERVAL, ROUTE_NAME, ROUTE_TYPE,
};
use process::{free_port, get_until};

const TEST: &str = "envoy_rest_codec";
const NODE_ID: &str = "envoy-rest-codec-test";
/// The one version the xDS server ever serves.
const VERSION: &str = "1";
const BACKEND_BODY: &str = "hello from backend";

const CDS_PATH: &str = "/v3/discovery:clusters";
const EDS_PATH: &str = "/v3/discovery:endpoints";
const LDS_PATH: &str = "/v3/discovery:listeners";
const RDS_PATH: &str = "/v3/discovery:routes";

/// REST path → (type URL, the resource names Envoy must ask for; empty for
/// the wildcard LDS/CDS).
const ENDPOINTS: [(&str, &str, &[&str]); 4] = [
    (CDS_PATH, CLUSTER_TYPE, &[]),
    (EDS_PATH, CLA_TYPE, &["backend"]),
    (LDS_PATH, LISTENER_TYPE, &[]),
    (RDS_PATH, ROUTE_TYPE, &[ROUTE_NAME]),
];

/// The config source every dynamic resource uses: REST polling of the xDS
/// server (snake_case JSON, as a fixture author writes it).
const REST_SOURCE: &str = r#"{"resource_api_version": "V3", "api_config_source": {
    "api_type": "REST", "transport_api_version": "V3",
    "cluster_names": ["xds_cluster"], "refresh_delay": "0.2s"}}"#;

/// One request body the xDS server received.
#[derive(Clone)]
struct Received {
    path: String,
    body: Bytes,
}

/// The minimal REST xDS server: path → rendered DiscoveryResponse, and a log
/// of every request.
#[derive(Clone)]
struct XdsState {
    responses: Arc<HashMap<&'static str, Bytes>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl XdsState {
    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn xds_handler(
    axum::extract::State(state): axum::extract::State<XdsState>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    state.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        body: body.clone(),
    });
    let Some(response) = state.responses.get(uri.path()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let version = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
        v.get("version_info")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    if version.as_deref() == Some(VERSION) {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        response.clone(),
    )
        .into_response()
}

/// The four resources as snake_case JSON, with the ports filled in.
fn resource_fixtures(backend_port: u16, listener_port: u16) -> [(&'static str, String); 4] {
    [
        (CDS_PATH, envoy::cluster_json("backend", REST_SOURCE)),
        (EDS_PATH, envoy::cla_json("backend", backend_port)),
        (
            LDS_PATH,
            envoy::listener_json("listener_0", "127.0.0.1", listener_port, REST_SOURCE),
        ),
        (RDS_PATH, envoy::route_json(None)),
    ]
}

/// Parses each fixture with the codec and renders it back (the JSON under
/// test), wrapped in a DiscoveryResponse per REST path.
fn render_responses(
    codec: &Codec,
    fixtures: &[(&'static str, String)],
) -> HashMap<&'static str, Bytes> {
    fixtures
        .iter()
        .map(|(path, json)| {
            let any = codec
                .parse_any(json.as_bytes())
                .unwrap_or_else(|e| panic!("fixture for {path} does not parse: {e}\n{json}"));
            let rendered = codec
                .render_any(&any.type_url, &any.value)
                .unwrap_or_else(|e| panic!("render_any for {path}: {e}"));
            let rendered = std::str::from_utf8(&rendered).expect("rendered JSON is UTF-8");
            assert!(
                rendered.starts_with(&format!(r#"{{"@type":"{}""#, any.type_url)),
                "{rendered}"
            );
            let body = format!(
                r#"{{"versionInfo":"{VERSION}","resources":[{rendered}],"typeUrl":"{}"}}"#,
                any.type_url
            );
            serde_json::from_str::<Value>(&body).expect("response envelope is JSON");
            (*path, Bytes::from(body))
        })
        .collect()
}

/// Checks every request body the xDS server received; returns the paths for
/// which Envoy has come back with version "1" (it applied that response).
fn check_requests(received: &[Received]) -> Vec<&'static str> {
    let mut acknowledged = Vec::new();
    for r in received {
        let Some((path, type_url, names)) = ENDPOINTS.iter().find(|(p, _, _)| *p == r.path) else {
            panic!("Envoy requested an unexpected path {:?}", r.path);
        };
        let text = String::from_utf8_lossy(&r.body);
        let json: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{path}: request body is not JSON ({e}): {text}"));
        let obj = json
            .as_object()
            .unwrap_or_else(|| panic!("{path}: request is not an object: {text}"));
        for key in obj.keys() {
            assert!(
                [
                    "version_info",
                    "node",
                    "resource_names",
                    "type_url",
                    "response_nonce",
                    "error_detail"
                ]
                .contains(&key.as_str()),
                "{path}: unexpected request key {key:?} (snake_case DiscoveryRequest fields \
                 expected)"
            );
        }
        assert_eq!(
            obj.get("type_url").and_then(Value::as_str),
            Some(*type_url),
            "{path}"
        );
        let node = obj.get("node").unwrap_or_else(|| panic!("{path}: no node"));
        assert_eq!(
            node.get("id").and_then(Value::as_str),
            Some(NODE_ID),
            "{path}"
        );
        assert_eq!(
            node.get("cluster").and_then(Value::as_str),
            Some(NODE_CLUSTER),
            "{path}"
        );
        assert!(
            node.get("user_agent_name").is_some() && node.get("userAgentName").is_none(),
            "{path}: node keys are not snake_case"
        );
        let version = obj
            .get("version_info")
            .and_then(Value::as_str)
            .unwrap_or("");
        assert!(
            version.is_empty() || version == VERSION,
            "{path}: version_info {version:?}"
        );
        if version == VERSION && !acknowledged.contains(path) {
            acknowledged.push(*path);
        }
        let requested: Vec<&str> = obj
            .get("resource_names")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(&requested, names, "{path}: resource_names");
        assert!(
            obj.get("error_detail").is_none(),
            "{path}: error_detail set: {text}"
        );
    }
    acknowledged
}

/// Saves one raw CDS request (else LDS) to `path`: the latest one at
/// version "1", the steady-state poll a gateway mostly answers.
fn capture_request(received: &[Received], path: &Path) {
    let pick = |want: &str| {
        let of_path: Vec<&Received> = received.iter().filter(|r| r.path == want).collect();
        of_path
            .iter()
            .rev()
            .find(|r| {
                serde_json::from_slice::<Value>(&r.body)
                    .ok()
                    .and_then(|v| {
                        v.get("version_info")
                            .and_then(Value::as_str)
                            .map(|s| s == VERSION)
                    })
                    .unwrap_or(false)
            })
            .or(of_path.first())
            .copied()
    };
    let chosen = pick(CDS_PATH)
        .or_else(|| pick(LDS_PATH))
        .expect("no CDS or LDS request to capture");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).expect("create the capture directory");
    }
    std::fs::write(path, &chosen.body).expect("write the captured request");
    eprintln!(
        "{TEST}: captured a {} request body ({} bytes) to {}",
        chosen.path,
        chosen.body.len(),
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_accepts_codec_json_over_rest_xds() {
    envoy::run_bounded(TEST, run).await;
}

/// The test proper: Envoy (`envoy_bin`, logging in `dir`) against the REST
/// xDS server, each step bounded by [`CONVERGE_TIMEOUT`].
async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let backend_port = envoy::serve(Router::new().fallback(|| async { BACKEND_BODY })).await;
    let listener_port = free_port();
    let admin_port = free_port();

    let codec = Codec::embedded();
    let fixtures = resource_fixtures(backend_port, listener_port);
    let state = XdsState {
        responses: Arc::new(render_responses(&codec, &fixtures)),
        received: Arc::default(),
    };
    // Shown on failure (and with --nocapture): the JSON Envoy is served.
    for (path, body) in state.responses.iter() {
        eprintln!("{TEST}: serving {path}: {}", String::from_utf8_lossy(body));
    }
    let xds_port = envoy::serve(
        Router::new()
            .fallback(xds_handler)
            .with_state(state.clone()),
    )
    .await;

    let bootstrap = envoy::rest_bootstrap(NODE_ID, admin_port, xds_port);
    let mut envoy = Envoy::start(&envoy_bin, &dir, &bootstrap);
    eprintln!(
        "{TEST}: envoy pid {} base-id {}, admin :{admin_port}, listener :{listener_port}, \
         xds :{xds_port}, backend :{backend_port}",
        envoy.id(),
        envoy.base_id
    );

    // 1. Every update applied, none rejected, and every type acknowledged
    //    (a later poll carries version "1").
    let state_ref = &state;
    let acknowledged = || check_requests(&state_ref.received()).len() >= ENDPOINTS.len();
    let watched = &FIXTURE_SUBSCRIPTIONS;
    let before = || envoy.assert_running();
    let stats = envoy::wait_for_updates(
        admin_port,
        watched,
        1,
        CONVERGE_TIMEOUT,
        before,
        acknowledged,
    )
    .await
    .unwrap_or_else(|last| {
        panic!(
            "Envoy did not apply CDS/EDS/LDS/RDS within {CONVERGE_TIMEOUT:?}; last \
                     /stats:\n{last}\nrequests received: {:?}",
            state
                .received()
                .iter()
                .map(|r| r.path.clone())
                .collect::<Vec<_>>()
        )
    });
    for line in envoy::update_lines(&stats, watched) {
        eprintln!("{TEST}: {line}");
    }

    // 2. A request through Envoy's listener reaches the backend.
    let reply = get_until(
        listener_port,
        "/anything",
        CONVERGE_TIMEOUT,
        POLL_INTERVAL,
        || {},
        |_| true,
    )
    .await
    .unwrap_or_else(|last| {
        panic!("no 200 through Envoy's listener within {CONVERGE_TIMEOUT:?}; last: {last}")
    });
    assert_eq!(reply, BACKEND_BODY);

    // 3. The requests, once more over everything received.
    let received = state.received();
    check_requests(&received);
    let counts: BTreeMap<&str, usize> = ENDPOINTS
        .iter()
        .map(|(p, _, _)| (*p, received.iter().filter(|r| r.path == *p).count()))
        .collect();
    let sizes: Vec<usize> = received.iter().map(|r| r.body.len()).collect();
    eprintln!(
        "{TEST}: {} xDS requests {counts:?}, body sizes {}..={} bytes",
        received.len(),
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0)
    );
    if let Some(path) = std::env::var_os("XDS_GATEWAY_CAPTURE_REQUEST").filter(|p| !p.is_empty()) {
        capture_request(&received, Path::new(&path));
    }
    envoy.print_warnings(TEST);
}
