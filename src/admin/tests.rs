//! The admin router: every route of [`ROUTES`] answers, `openapi/admin.yaml`
//! documents exactly those, and admin tokens are read from Bearer and Basic
//! credentials.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::{admin_token, router, Admin};
use crate::cache::{Assembler, Intake};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::observe::ClientBook;
use crate::store::Sessions;
use crate::upstream::FileFeeder;
use crate::xds::Codec;

/// Every (path, method) the admin router answers besides the CSDS gRPC
/// service: what `openapi/admin.yaml` documents.
const ROUTES: [(&str, &str); 10] = [
    ("/", "get"),
    ("/healthz", "get"),
    ("/readyz", "get"),
    ("/metrics", "get"),
    ("/debug/clients", "get"),
    ("/debug/sessions", "get"),
    ("/debug/config", "get"),
    ("/debug/client_status", "get"),
    ("/debug/history", "get"),
    ("/debug/diff", "get"),
];

fn admin() -> Arc<Admin> {
    let config = Config::default();
    let intake = Intake::new(Codec::embedded());
    let feeder = FileFeeder::start(crate::demo::origin(), intake.clone(), config.session_key);
    let metrics = Arc::new(Metrics::new());
    let history = crate::observe::ConfigHistory::default();
    let source = Sessions::start(
        Arc::new(feeder),
        intake.clone(),
        history.clone(),
        metrics.clone(),
        &config,
    );
    let clients = Arc::new(ClientBook::new(Duration::from_secs(60), 3));
    Arc::new(Admin::new(
        source,
        metrics,
        clients,
        intake.opaque_types().clone(),
        Assembler::new(intake.codec().clone()),
        history,
        config.admin_views(),
    ))
}

async fn status_of(path: &str) -> StatusCode {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    router(admin()).oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn every_listed_route_is_served_and_nothing_else() {
    for (path, _) in ROUTES {
        // The views of one node without `?node=` are 400s that name what
        // is missing.
        let status = status_of(path).await;
        let needs_node = ["/debug/config", "/debug/history", "/debug/diff"].contains(&path);
        assert!(
            status == StatusCode::OK || (needs_node && status == StatusCode::BAD_REQUEST),
            "{path}: {status}"
        );
    }
    assert_eq!(status_of("/debug/nothing").await, StatusCode::NOT_FOUND);
}

#[test]
fn openapi_admin_lists_exactly_the_served_routes() {
    let documented =
        crate::openapi_paths::documented_routes(include_str!("../../openapi/admin.yaml"));
    let mut served: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
        .collect();
    served.sort();
    assert_eq!(documented, served);
}

#[test]
fn admin_tokens_come_as_bearer_or_as_the_basic_password() {
    assert_eq!(admin_token("Bearer abc").as_deref(), Some("abc"));
    assert_eq!(admin_token("bearer  abc ").as_deref(), Some("abc"));
    // base64("anyone:s3cret:with-colon")
    assert_eq!(
        admin_token("Basic YW55b25lOnMzY3JldDp3aXRoLWNvbG9u").as_deref(),
        Some("s3cret:with-colon")
    );
    assert_eq!(admin_token("Basic not-base64!"), None);
    // base64("no-colon")
    assert_eq!(admin_token("Basic bm8tY29sb24="), None);
    assert_eq!(admin_token("Digest abc"), None);
    assert_eq!(admin_token("abc"), None);
}

/// The admin views read a served answer as JSON through `answer_json`,
/// which takes serde_json's private raw-value key for what it is in a
/// resource: a key (`cargo fuzz`, fuzz/README.md finding 6). With
/// `serde_json::Value`'s own parser, `/debug/config` answered a 500 here.
#[tokio::test]
async fn answers_with_serde_jsons_private_key_read_as_written() {
    use crate::cache::{Coverage, Names, TypeState};
    use crate::xds::ResourceType;
    let admin = admin();
    let intake = Intake::new(Codec::embedded());
    let json = br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c",
        "metadata":{"filter_metadata":{"x":{"$serde_json::private::RawValue":33.5}}}}"#;
    let any = intake.codec().parse_any(json).unwrap();
    let resource = intake
        .resource(ResourceType::Clusters, any.value.into())
        .unwrap();
    let state = TypeState::new(
        ResourceType::Clusters,
        "v1".into(),
        "n1".into(),
        crate::cache::ResourceMap::from([("c".to_owned(), resource)]),
        Coverage {
            wildcard: true,
            names: Default::default(),
        },
    );
    let response = super::debug::answer_json(&admin, &state, &Names::Wildcard, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        response["resources"][0]["metadata"]["filterMetadata"]["x"]
            ["$serde_json::private::RawValue"],
        33.5
    );
}

/// However many types an upstream sends opaque, `/readyz` lists a bounded
/// few and counts the rest.
#[tokio::test]
async fn readiness_lists_a_bounded_number_of_opaque_types() {
    let admin = admin();
    let many: Vec<String> = (0..3000)
        .map(|i| format!("type.googleapis.com/t{i}"))
        .collect();
    let _held = admin.opaque_types.note(many.into());
    let problems = admin.readiness().problems;
    let opaque = problems
        .iter()
        .filter(|p| p.starts_with("no descriptor for"))
        .count();
    assert_eq!(opaque, 32, "{problems:?}");
    assert!(
        problems.iter().any(|p| p.starts_with("2968 more types")),
        "{problems:?}"
    );
}
