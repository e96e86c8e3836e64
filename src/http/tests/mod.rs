//! Router tests with `oneshot`: routing, the error table, and that the
//! OpenAPI document lists exactly the routes served ([`poll`] has the poll
//! path against a scripted source). Everything runs in process; no control
//! plane is needed.

mod bounds;
mod changes;
mod fuzz;
mod poll;
mod proxies;
mod watch;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::discovery::{MAX_CLIENT_STRING_BYTES, MAX_NODE_ID_BYTES};
use super::{router, Gateway};
use crate::cache::{Assembler, Intake};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::Script;
use crate::store::{Inspect, Sessions, Source};
use crate::upstream::Origin;
use crate::xds::Codec;
use crate::xds::{Endpoint, ResourceType};

/// Every (path, method) the router serves (kept in step with openapi/ by a test).
fn served_routes() -> Vec<(String, &'static str)> {
    let mut routes = vec![("/".to_owned(), "get")];
    // Extra types are served like these; the documents describe them once,
    // generically (and other tests of this process register some).
    for kind in ResourceType::BUILT_IN {
        let path = Endpoint::Discovery(kind).path();
        routes.push((path.clone(), "post"));
        routes.push((path, "get"));
    }
    // Every extra type's `/v3/discovery:NAME`, as the document templates it.
    let extra = "/v3/discovery:{extraType}";
    routes.push((extra.to_owned(), "post"));
    routes.push((extra.to_owned(), "get"));
    for endpoint in [Endpoint::HealthCheck, Endpoint::ClientStatus] {
        routes.push((endpoint.path(), "post"));
    }
    routes
}

/// A query of `pairs` (for tests of the parameter readers).
pub(crate) fn query_of(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A gateway over sessions fed by a [`Script`], and the script.
fn scripted(config: Config) -> (Arc<Gateway>, Arc<Script>) {
    let (gw, script, _) = scripted_inspected(config);
    (gw, script)
}

/// [`scripted`], and what the admin face would read of its sessions.
fn scripted_inspected(config: Config) -> (Arc<Gateway>, Arc<Script>, Arc<dyn Inspect>) {
    let intake = Intake::new(Codec::embedded());
    let script = Script::new(intake.clone());
    let metrics = Arc::new(Metrics::new());
    let source = Sessions::start(
        Arc::new(script.feeder()),
        intake.clone(),
        crate::observe::ConfigHistory::default(),
        metrics.clone(),
        &config,
    );
    let inspected = source.clone();
    (assemble(source, intake, metrics, config), script, inspected)
}

fn gateway(config: Config) -> Arc<Gateway> {
    scripted(config).0
}

/// A gateway on the embedded demo snapshot.
fn demo_gateway(config: Config) -> Arc<Gateway> {
    file_gateway(crate::demo::origin(), config)
}

/// A gateway on the snapshot `origin`.
fn file_gateway(origin: Origin, config: Config) -> Arc<Gateway> {
    file_gateway_inspected(origin, config).0
}

/// [`file_gateway`], and what the admin face would read of its sessions.
fn file_gateway_inspected(origin: Origin, config: Config) -> (Arc<Gateway>, Arc<dyn Inspect>) {
    super::fuzz::file_gateway(origin, Intake::new(Codec::embedded()), &config)
}

fn assemble(
    source: Arc<dyn Source>,
    intake: Intake,
    metrics: Arc<Metrics>,
    config: Config,
) -> Arc<Gateway> {
    let assembler = Assembler::new(intake.codec().clone());
    Arc::new(Gateway::new(config.rest(), source, assembler, metrics))
}

/// One request through the router: status and body.
async fn send(
    gw: Arc<Gateway>,
    method: &str,
    path: &str,
    body: impl Into<Body>,
) -> (StatusCode, bytes::Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let response = router(gw).oneshot(request).await.unwrap();
    let status = response.status();
    (
        status,
        axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap(),
    )
}

async fn call(
    config: Config,
    method: &str,
    path: &str,
    body: &'static [u8],
) -> (StatusCode, serde_json::Value) {
    let (status, bytes) = send(gateway(config), method, path, body).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn envoy_short_names_and_admin_paths_get_pointed_to_the_right_place() {
    let (status, body) = call(Config::default(), "POST", "/v3/discovery:cds", b"{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("/v3/discovery:clusters"), "{body}");

    let admin: std::net::SocketAddr = "127.0.0.1:9911".parse().unwrap();
    let gw = Arc::new(
        Arc::try_unwrap(gateway(Config::default()))
            .unwrap()
            .with_admin_address(admin),
    );
    for path in ["/healthz", "/readyz", "/metrics", "/debug/sessions"] {
        let (status, bytes) = send(gw.clone(), "GET", path, Body::empty()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("http://127.0.0.1:9911{path}")),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn misspelled_path_is_404_naming_the_closest() {
    let (status, body) = call(Config::default(), "POST", "/v3/discovery:cluster", b"{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], 5);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("/v3/discovery:clusters"),
        "{body}"
    );
}

#[tokio::test]
async fn wrong_method_is_405_json() {
    for (method, path, allowed) in [
        ("DELETE", "/v3/discovery:clusters", "use POST or GET"),
        ("GET", "/v3/discovery:health_check", "use POST"),
        ("POST", "/", "use GET"),
        ("PUT", "/", "use GET"),
    ] {
        let (status, body) = call(Config::default(), method, path, b"").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(body["code"], 12, "{method} {path}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.ends_with(allowed), "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn bad_bodies_are_400_json() {
    for body in [&b"not json"[..], b"[]", br#"{"resource_names": 3}"#] {
        let body: &'static [u8] = body;
        let (status, json) = call(Config::default(), "POST", "/v3/discovery:clusters", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
        assert_eq!(json["code"], 3);
    }
    let (status, json) = call(
        Config::default(),
        "POST",
        "/v3/discovery:clusters",
        br#"{"type_url":"type.googleapis.com/envoy.config.listener.v3.Listener"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json["message"].as_str().unwrap().contains("contradicts"),
        "{json}"
    );
}

#[tokio::test]
async fn body_over_limit_is_413() {
    let config = Config {
        max_body_bytes: 1024,
        ..Config::default()
    };
    let big: &'static [u8] = Box::leak(vec![b' '; 4096].into_boxed_slice());
    let (status, json) = call(config, "POST", "/v3/discovery:clusters", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{json}");
    assert_eq!(json["code"], 8, "RESOURCE_EXHAUSTED: {json}");
    assert!(json["message"].as_str().unwrap().contains("1024"), "{json}");
}

/// A GET is held to the limit its POST is: a node's `?metadata=` (or a
/// profile) can make the request it stands for larger than its query.
#[tokio::test]
async fn a_get_over_the_body_limit_is_400() {
    let config = Config {
        max_body_bytes: 2048,
        ..Config::default()
    };
    let metadata = format!("%7B%22big%22%3A%22{}%22%7D", "x".repeat(3000));
    let path = format!("/v3/discovery:clusters?node=n&metadata={metadata}");
    let (status, bytes) = send(demo_gateway(config), "GET", &path, Body::empty()).await;
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert_eq!(json["code"], 3, "INVALID_ARGUMENT: {json}");
    let message = json["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-body-bytes"), "{json}");
}

#[tokio::test]
async fn secrets_need_allow_secrets() {
    let (status, json) = call(Config::default(), "POST", "/v3/discovery:secrets", b"{}").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(json["message"]
        .as_str()
        .unwrap()
        .contains("--allow-secrets"));
}

#[test]
fn openapi_lists_exactly_the_served_routes() {
    let documented =
        crate::openapi_paths::documented_routes(include_str!("../../../openapi/xds-gateway.yaml"));
    let mut served: Vec<(String, String)> = served_routes()
        .into_iter()
        .map(|(p, m)| (p, m.to_owned()))
        .collect();
    served.sort();
    assert_eq!(documented, served);
}

#[tokio::test]
async fn index_lists_every_endpoint() {
    let response = router(gateway(Config::default()))
        .oneshot(Request::builder().uri("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(
        axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    // The extra types' templated path stands for names this gateway has none of.
    for (path, _) in served_routes().into_iter().skip(1) {
        if path.contains('{') {
            continue;
        }
        assert!(text.contains(&path), "{path} missing from\n{text}");
    }
}

#[tokio::test]
async fn unknown_query_parameters_are_400() {
    let (status, json) = call(
        Config::default(),
        "POST",
        "/v3/discovery:clusters?wiat=5s",
        b"{}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json["message"].as_str().unwrap().contains("wiat"), "{json}");
}

#[tokio::test]
async fn sessions_are_bounded() {
    let gw = demo_gateway(Config {
        max_sessions: 1,
        ..Config::default()
    });
    let post = |node: &'static str| {
        let gw = gw.clone();
        async move {
            let body = format!(r#"{{"node":{{"id":"{node}"}}}}"#);
            let (status, bytes) = send(gw, "POST", "/v3/discovery:clusters", body).await;
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    assert_eq!(post("first").await.0, StatusCode::OK);
    assert_eq!(
        post("first").await.0,
        StatusCode::OK,
        "the same identity reuses its session"
    );
    let (status, body) = post("second").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("too many sessions"), "{body}");
    assert!(
        !body.contains("upstream"),
        "a snapshot has no upstream: {body}"
    );
}

#[tokio::test]
async fn post_bodies_must_say_they_are_json() {
    for content_type in [
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
        None,
    ] {
        let mut request = Request::post("/v3/discovery:clusters");
        if let Some(value) = content_type {
            request = request.header("content-type", value);
        }
        let request = request.body(Body::from(r#"{"node":{"id":"n"}}"#)).unwrap();
        let response = router(demo_gateway(Config::default()))
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["code"], 3);
        assert!(
            json["message"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{json}"
        );
    }
    let request = Request::post("/v3/discovery:clusters")
        .header("content-type", "application/json; charset=utf-8")
        .body(Body::from(r#"{"node":{"id":"n"}}"#))
        .unwrap();
    let response = router(demo_gateway(Config::default()))
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// What axum's extractors would answer with an empty or bare-text 400 is a
/// JSON 400 that names the problem.
#[tokio::test]
async fn malformed_query_strings_and_if_none_match_are_json_400s() {
    let gw = demo_gateway(Config::default());
    let get = |path: &'static str, inm: Option<&'static [u8]>| {
        let gw = gw.clone();
        async move {
            let mut request = Request::get(path);
            if let Some(value) = inm {
                request = request.header(
                    "if-none-match",
                    axum::http::HeaderValue::from_bytes(value).unwrap(),
                );
            }
            let response = router(gw)
                .oneshot(request.body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&body).unwrap_or_default(),
            )
        }
    };
    for (path, inm, needle) in [
        ("/v3/discovery:clusters?node=a&node=b", None, "twice"),
        ("/v3/discovery:clusters?node=%80", None, "UTF-8"),
        (
            "/v3/discovery:clusters?node=demo",
            Some(&b"\x80v1"[..]),
            "If-None-Match",
        ),
        (
            "/v3/discovery:clusters?node=demo",
            Some(&b"\"a\", \"b\""[..]),
            "If-None-Match",
        ),
        (
            "/v3/discovery:clusters?node=demo",
            Some(&b"*"[..]),
            "If-None-Match",
        ),
        (
            "/v3/discovery:clusters?node=demo",
            Some(&b"\"v1"[..]),
            "If-None-Match",
        ),
    ] {
        let (status, json) = get(path, inm).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {inm:?}: {json}");
        assert_eq!(json["code"], 3, "{path} {inm:?}: {json}");
        assert!(
            json["message"]
                .as_str()
                .unwrap_or_default()
                .contains(needle),
            "{path} {inm:?}: {json}"
        );
    }
}

/// POSTs `body` to CDS on `gw`: status and JSON body.
async fn post_json(gw: &Arc<Gateway>, body: String) -> (StatusCode, serde_json::Value) {
    let (status, bytes) = send(gw.clone(), "POST", "/v3/discovery:clusters", body).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

fn request_naming(node: &str, names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    serde_json::json!({"node": {"id": node}, "resource_names": names}).to_string()
}

/// Names per request and per session are bounded.
#[tokio::test]
async fn names_are_bounded_per_request_and_per_session() {
    let gw = demo_gateway(Config {
        max_names_per_request: 10,
        max_names_per_session: 15,
        ..Config::default()
    });
    let (status, json) =
        post_json(&gw, request_naming("n", (0..11).map(|i| format!("c{i}")))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("--max-names-per-request"),
        "{json}"
    );

    let (status, json) =
        post_json(&gw, request_naming("n", (0..10).map(|i| format!("a{i}")))).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    let (status, json) =
        post_json(&gw, request_naming("n", (0..10).map(|i| format!("b{i}")))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert_eq!(json["code"], 14);
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("--max-names-per-session"),
        "{json}"
    );
    // What the session already holds is still served; another node has its own.
    let (status, _) = post_json(&gw, request_naming("n", (0..10).map(|i| format!("a{i}")))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post_json(&gw, request_naming("m", (0..10).map(|i| format!("b{i}")))).await;
    assert_eq!(status, StatusCode::OK);
}

/// A node of `keys` metadata entries.
fn big_node_request(id: &str, keys: usize) -> String {
    let metadata: serde_json::Map<String, serde_json::Value> = (0..keys)
        .map(|i| (format!("k{i}"), serde_json::Value::from(format!("v{i}"))))
        .collect();
    serde_json::json!({"node": {"id": id, "metadata": metadata}}).to_string()
}

/// A node is bounded in size, and so are the bytes of
/// nodes all sessions hold (not only their number).
#[tokio::test]
async fn node_bytes_are_bounded_per_request_and_across_sessions() {
    let gw = demo_gateway(Config {
        max_node_bytes: 20_000,
        max_session_bytes: 50_000,
        ..Config::default()
    });
    let (status, json) = post_json(&gw, big_node_request("huge", 2_000)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("--max-node-bytes"),
        "{json}"
    );

    // ~15 KB each: three fit in 50 KB, the fourth does not.
    for id in ["a", "b", "c"] {
        let (status, json) = post_json(&gw, big_node_request(id, 1_000)).await;
        assert_eq!(status, StatusCode::OK, "{id}: {json}");
    }
    let (status, json) = post_json(&gw, big_node_request("d", 1_000)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("--max-session-bytes"),
        "{json}"
    );
    // Existing sessions still answer, and small nodes that fit still get in.
    let (status, _) = post_json(&gw, big_node_request("a", 1_000)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post_json(&gw, big_node_request("small", 1)).await;
    assert_eq!(status, StatusCode::OK);
}

/// A gateway on the snapshot directory `dir`.
fn snapshot_gateway(dir: &std::path::Path, config: Config) -> Arc<Gateway> {
    file_gateway(Origin::Dir(dir.to_owned()), config)
}

/// With `--session-key cluster`, a snapshot with a
/// per-node layer is refused (a node of the cluster would get another's
/// per-node resources); with the default key each node gets its own.
#[tokio::test]
async fn per_node_layers_are_refused_when_sessions_are_keyed_by_cluster() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("base.yaml"),
        "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: shared\nconnect_timeout: 1s\n",
    )
    .unwrap();
    let node_a = dir.path().join("nodes/nodeA");
    std::fs::create_dir_all(&node_a).unwrap();
    std::fs::write(
        node_a.join("private.yaml"),
        "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: only_for_a\nconnect_timeout: 1s\n",
    )
    .unwrap();
    let poll = |gw: Arc<Gateway>, node: &'static str| async move {
        let body = format!(r#"{{"node":{{"id":"{node}","cluster":"c1"}}}}"#);
        let (status, bytes) = send(gw, "POST", "/v3/discovery:clusters", body).await;
        (status, String::from_utf8_lossy(&bytes).into_owned())
    };

    let (by_cluster, inspected) = file_gateway_inspected(
        Origin::Dir(dir.path().to_owned()),
        Config {
            session_key: crate::config::SessionKey::Cluster,
            ..Config::default()
        },
    );
    for node in ["nodeA", "nodeB"] {
        let (status, body) = poll(by_cluster.clone(), node).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{node}: {body}");
        assert!(body.contains("--session-key cluster"), "{body}");
        assert!(!body.contains("only_for_a\""), "{body}");
    }
    let problems = inspected.status().problems;
    assert!(
        problems.iter().any(|p| p.contains("nodes/nodeA")),
        "{problems:?}"
    );

    let by_node = snapshot_gateway(dir.path(), Config::default());
    let (status, body) = poll(by_node.clone(), "nodeA").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("only_for_a"), "{body}");
    let (status, body) = poll(by_node, "nodeB").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        !body.contains("only_for_a"),
        "nodeB got nodeA's layer: {body}"
    );
}

/// A node id (or cluster, resource name, user agent,
/// version) long enough to fill the log, the history files and the status
/// page is a 400 that does not echo it, before any session or history
/// holds it; one at the limit is served.
#[tokio::test]
async fn client_strings_that_reach_logs_and_history_are_bounded() {
    let gw = demo_gateway(Config::default());
    let long_id = "x".repeat(MAX_NODE_ID_BYTES + 1);
    let long_name = "n".repeat(MAX_CLIENT_STRING_BYTES + 1);
    for (what, body) in [
        ("node id", serde_json::json!({"node": {"id": long_id}})),
        (
            "node cluster",
            serde_json::json!({"node": {"id": "edge-1", "cluster": long_id}}),
        ),
        (
            "resource name",
            serde_json::json!({"node": {"id": "edge-1"}, "resource_names": [long_name]}),
        ),
        (
            "user agent name",
            serde_json::json!({"node": {"id": "edge-1", "user_agent_name": long_name}}),
        ),
        (
            "version_info",
            serde_json::json!({"node": {"id": "edge-1"}, "version_info": long_name}),
        ),
    ] {
        let (status, json) = post_json(&gw, body.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {json}");
        let message = json["message"].as_str().unwrap();
        assert!(message.contains("at most"), "{what}: {message}");
        assert!(message.len() < 200, "{what}: echoed: {message}");
    }
    // A GET's ?node= is bounded the same way.
    let (status, text) = send(
        gw.clone(),
        "GET",
        &format!("/v3/discovery:clusters?node={long_id}"),
        String::new(),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&text)
    );
    assert_eq!(
        gw.answer_log.held().entries,
        0,
        "nothing refused was remembered"
    );
    let at_limit = "y".repeat(MAX_NODE_ID_BYTES);
    let (status, json) = post_json(
        &gw,
        serde_json::json!({"node": {"id": at_limit, "cluster": at_limit}}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{json}");
}
