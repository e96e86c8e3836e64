//! Interop: a real Envoy 1.40 accepts the JSON our [`Codec`] renders, over
//! REST xDS.
//!
//! The test runs, all on 127.0.0.1: a backend HTTP server; a minimal REST
//! xDS server serving one Cluster (EDS), one ClusterLoadAssignment, one
//! Listener (HttpConnectionManager with RDS) and one RouteConfiguration, each
//! written as snake_case JSON here, parsed with `Codec::parse_any` and
//! rendered with `Codec::render_any` (the code under test); and Envoy with a
//! bootstrap whose LDS and CDS poll that server. It then asserts that Envoy
//! applied every update (admin `/stats`: `update_success >= 1`,
//! `update_rejected == 0` for CDS, EDS, LDS and RDS), acknowledged version
//! "1" on its next poll of each type, and routes a request through its
//! listener to the backend; and that Envoy's requests were snake_case
//! `DiscoveryRequest`s carrying its node.
//!
//! With `XDS_GATEWAY_CAPTURE_REQUEST=<path>` set, one raw CDS request body
//! (full node, ~77 KB) is saved there for the benchmarks.

#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use xds_gateway::xds::Codec;

use process::{eventually, free_port, http_get, ChildGuard};

const TEST: &str = "envoy_rest_codec";
const NODE_ID: &str = "envoy-rest-codec-test";
const NODE_CLUSTER: &str = "xds-gateway-tests";
/// The one version the xDS server ever serves.
const VERSION: &str = "1";
const BACKEND_BODY: &str = "hello from backend";
const STAT_PREFIX: &str = "ingress_http";
/// The whole test, Envoy start-up included.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long Envoy gets to fetch, apply and serve the configuration.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(100);

const CDS_PATH: &str = "/v3/discovery:clusters";
const EDS_PATH: &str = "/v3/discovery:endpoints";
const LDS_PATH: &str = "/v3/discovery:listeners";
const RDS_PATH: &str = "/v3/discovery:routes";

const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const CLA_TYPE: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// REST path → (type URL, the resource names Envoy must ask for; empty for
/// the wildcard LDS/CDS).
const ENDPOINTS: [(&str, &str, &[&str]); 4] = [
    (CDS_PATH, CLUSTER_TYPE, &[]),
    (EDS_PATH, CLA_TYPE, &["backend"]),
    (LDS_PATH, LISTENER_TYPE, &[]),
    (RDS_PATH, ROUTE_TYPE, &["local_route"]),
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
    let cluster = format!(
        r#"{{"@type": "{CLUSTER_TYPE}",
          "name": "backend", "type": "EDS", "connect_timeout": "1s",
          "eds_cluster_config": {{"eds_config": {REST_SOURCE}}}}}"#
    );
    let cla = format!(
        r#"{{"@type": "{CLA_TYPE}",
          "cluster_name": "backend",
          "endpoints": [{{"lb_endpoints": [{{"endpoint": {{"address": {{"socket_address":
            {{"address": "127.0.0.1", "port_value": {backend_port}}}}}}}}}]}}]}}"#
    );
    let listener = format!(
        r#"{{"@type": "{LISTENER_TYPE}",
          "name": "listener_0",
          "address": {{"socket_address": {{"address": "127.0.0.1", "port_value": {listener_port}}}}},
          "filter_chains": [{{"filters": [{{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {{
              "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
              "stat_prefix": "{STAT_PREFIX}",
              "rds": {{"route_config_name": "local_route", "config_source": {REST_SOURCE}}},
              "http_filters": [{{"name": "envoy.filters.http.router", "typed_config": {{
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}}]
            }}}}]}}]}}"#
    );
    let route = format!(
        r#"{{"@type": "{ROUTE_TYPE}",
          "name": "local_route",
          "virtual_hosts": [{{"name": "backend", "domains": ["*"],
            "routes": [{{"match": {{"prefix": "/"}}, "route": {{"cluster": "backend"}}}}]}}]}}"#
    );
    [
        (CDS_PATH, cluster),
        (EDS_PATH, cla),
        (LDS_PATH, listener),
        (RDS_PATH, route),
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

fn bootstrap_yaml(admin_port: u16, xds_port: u16) -> String {
    let source = "{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], \
                  refresh_delay: 0.2s}";
    format!(
        r#"node:
  id: {NODE_ID}
  cluster: {NODE_CLUSTER}
admin:
  address:
    socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}
dynamic_resources:
  lds_config:
    resource_api_version: V3
    api_config_source: {source}
  cds_config:
    resource_api_version: V3
    api_config_source: {source}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}
"#
    )
}

/// Serves `router` on 127.0.0.1:0; returns the port.
async fn serve(router: Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        axum::serve(listener, router).await.expect("axum server");
    });
    port
}

/// The stats this test asserts on: (label, update_success, update_rejected).
fn watched_stats() -> [(&'static str, String, String); 4] {
    let pair = |label, prefix: &str| {
        (
            label,
            format!("{prefix}.update_success"),
            format!("{prefix}.update_rejected"),
        )
    };
    [
        pair("cds", "cluster_manager.cds"),
        pair("eds", "cluster.backend"),
        pair("lds", "listener_manager.lds"),
        pair("rds", &format!("http.{STAT_PREFIX}.rds.local_route")),
    ]
}

/// Admin `/stats` text → name → counter value.
fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
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
    let Some(envoy) = process::require_envoy(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("envoy.log");
    let started = Instant::now();
    match tokio::time::timeout(TEST_TIMEOUT, run(&envoy, dir.path())).await {
        Ok(()) => eprintln!("{TEST}: passed in {:.1?}", started.elapsed()),
        Err(_) => {
            process::print_log_file("envoy", &log);
            panic!("{TEST}: did not finish within {TEST_TIMEOUT:?}");
        }
    }
}

async fn run(envoy: &Path, dir: &Path) {
    let backend_port = serve(Router::new().fallback(|| async { BACKEND_BODY })).await;
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
    let xds_port = serve(
        Router::new()
            .fallback(xds_handler)
            .with_state(state.clone()),
    )
    .await;

    let config = dir.join("envoy.yaml");
    std::fs::write(&config, bootstrap_yaml(admin_port, xds_port)).expect("write bootstrap");
    let log = dir.join("envoy.log");
    let stderr = std::fs::File::create(&log).expect("create envoy.log");
    let base_id = process::envoy_base_id();
    let child = Command::new(envoy)
        .arg("--config-path")
        .arg(&config)
        .args(["--base-id", &base_id.to_string()])
        .args([
            "-l",
            "warning",
            "--concurrency",
            "1",
            "--disable-hot-restart",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", envoy.display()));
    let mut envoy = ChildGuard::new("envoy", child).with_log(&log);
    eprintln!(
        "{TEST}: envoy pid {} base-id {base_id}, admin :{admin_port}, listener :{listener_port}, \
         xds :{xds_port}, backend :{backend_port}",
        envoy.id()
    );

    // 1. Every update applied, none rejected, and every type acknowledged
    //    (a later poll carries version "1").
    let last_stats = Mutex::new(String::from("(admin never answered)"));
    let last_stats = &last_stats;
    let state_ref = &state;
    let observed =
        eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || {
            if let Some(status) = envoy.try_exit_status() {
                panic!("envoy exited early: {status}");
            }
            async move {
                let (status, text) = http_get(admin_port, "/stats?filter=update_").await.ok()?;
                *last_stats.lock().unwrap() = format!("status {status}:\n{text}");
                if status != 200 {
                    return None;
                }
                let stats = parse_stats(&text);
                let mut seen = Vec::new();
                for (label, success, rejected) in watched_stats() {
                    let rejected_n = stats.get(&rejected).copied().unwrap_or(0);
                    assert_eq!(
                        rejected_n, 0,
                        "Envoy rejected a {label} update ({rejected}); stats:\n{text}"
                    );
                    let success_n = *stats.get(&success)?;
                    if success_n < 1 {
                        return None;
                    }
                    seen.push(format!(
                        "{success}: {success_n}, {rejected}: {}",
                        stats.get(&rejected).map_or("absent".into(), u64::to_string)
                    ));
                }
                let acknowledged = check_requests(&state_ref.received());
                if acknowledged.len() < ENDPOINTS.len() {
                    return None;
                }
                Some(seen)
            }
        })
        .await
        .unwrap_or_else(|| {
            panic!(
            "Envoy did not apply CDS/EDS/LDS/RDS within {CONVERGE_TIMEOUT:?}; last /stats:\n{}\n\
             requests received: {:?}",
            last_stats.lock().unwrap(),
            state.received().iter().map(|r| r.path.clone()).collect::<Vec<_>>()
        )
        });
    for line in &observed {
        eprintln!("{TEST}: {line}");
    }

    // 2. A request through Envoy's listener reaches the backend.
    let last_reply = Mutex::new(String::from("(listener never answered)"));
    let last_reply = &last_reply;
    let reply = eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async move {
        let result = http_get(listener_port, "/anything").await;
        *last_reply.lock().unwrap() = format!("{result:?}");
        match result {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no 200 through Envoy's listener within {CONVERGE_TIMEOUT:?}; last: {}",
            last_reply.lock().unwrap()
        )
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
    let warnings = envoy.log_text();
    if !warnings.trim().is_empty() {
        eprintln!("{TEST}: envoy stderr:\n{warnings}");
    }
}
