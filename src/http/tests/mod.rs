//! Router tests with `oneshot`: routing, the error table, and that the
//! OpenAPI document lists exactly the routes served ([`poll`] has the poll
//! path against a scripted source). Everything runs in process; no control
//! plane is needed.

mod poll;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::{router, served_routes, Gateway};
use crate::cache::Renderer;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::source::scripted::Script;
use crate::source::{FileFeeder, Origin, Sessions, Source};
use crate::xds::Codec;

/// A gateway over sessions fed by a [`Script`], and the script.
fn scripted(config: Config) -> (Arc<Gateway>, Arc<Script>) {
    let renderer = Renderer::new(Codec::embedded());
    let script = Script::new(renderer.clone());
    let metrics = Arc::new(Metrics::new());
    let source = Sessions::start(script.feeder(), renderer.clone(), metrics.clone(), &config);
    (assemble(source, renderer, metrics, config), script)
}

fn gateway(config: Config) -> Arc<Gateway> {
    scripted(config).0
}

/// A gateway on the embedded demo snapshot.
fn demo_gateway(config: Config) -> Arc<Gateway> {
    let renderer = Renderer::new(Codec::embedded());
    let feeder = FileFeeder::start(Origin::EmbeddedDemo, renderer.clone());
    let metrics = Arc::new(Metrics::new());
    let source = Sessions::start(feeder, renderer.clone(), metrics.clone(), &config);
    assemble(source, renderer, metrics, config)
}

fn assemble(
    source: Arc<dyn Source>,
    renderer: Renderer,
    metrics: Arc<Metrics>,
    config: Config,
) -> Arc<Gateway> {
    Arc::new(Gateway::new(Arc::new(config), source, renderer, metrics))
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
    let (status, body) = call(Config::default(), "DELETE", "/v3/discovery:clusters", b"").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["code"], 12);
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
async fn body_over_limit_is_400() {
    let config = Config {
        max_body_bytes: 1024,
        ..Config::default()
    };
    let big: &'static [u8] = Box::leak(vec![b' '; 4096].into_boxed_slice());
    let (status, json) = call(config, "POST", "/v3/discovery:clusters", big).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert!(json["message"].as_str().unwrap().contains("1024"), "{json}");
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
    let text = include_str!("../../../openapi/xds-gateway.yaml");
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).unwrap();
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_mapping().unwrap() {
        for method in item.as_mapping().unwrap().keys() {
            documented.push((
                path.as_str().unwrap().to_owned(),
                method.as_str().unwrap().to_owned(),
            ));
        }
    }
    let mut served: Vec<(String, String)> = served_routes()
        .into_iter()
        .map(|(p, m)| (p, m.to_owned()))
        .collect();
    documented.sort();
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
    for (path, _) in served_routes().into_iter().skip(1) {
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
    assert!(body.contains("too many upstream sessions"), "{body}");
}
