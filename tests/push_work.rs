//! Work per upstream push is proportional to what changed (issue 26):
//! go-control-plane serves 1,000 clusters to 50 node identities (50
//! sessions, 50 SotW streams); one cluster changes, every stream gets all
//! 1,000 again (each in Go's map order of its own), and the gateway decodes
//! the changed one once in all: the first session to take the new answer
//! decodes that one cluster and takes the 999 others as they were (their
//! bytes under the same name unchanged); the 49 others find the answer's
//! set that session made (the same bytes, in another order) and decode
//! nothing, as `xds_gateway_upstream_resources_{decoded,reused}_total`
//! count. Over delta streams, where the upstream sends only the changed
//! cluster: 50 decodes, nothing reused (nothing unchanged was sent), and
//! one session builds the set of 1,000 the change makes while the 49
//! others find it (`xds_gateway_upstream_delta_sets_{built,shared}_total`).
//! Either way the changed content is rendered and checked against Envoy's
//! rules once, not once per session (`xds_gateway_resources_rendered_total`):
//! the 50 sessions receive the same bytes, and the intake memoises by
//! content.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::time::Duration;

use serde_json::{json, Value};

use gateway::{discover_on, http_request, metric_sum};
use go_peer::GoControlPlane;
use inproc::InProcess;
use process::eventually;
use rest::{bounded, cluster, node, request, upstream_of, CDS};
use xds_gateway::config::{Config, UpstreamMode};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const CLUSTERS: usize = 1_000;
const SESSIONS: usize = 50;

async fn metrics(gw: &InProcess) -> String {
    http_request(
        gw.admin_port,
        http::Method::GET,
        "/metrics",
        &[],
        bytes::Bytes::new(),
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .text()
}

/// Resources decoded, reused and rendered so far.
async fn counts(gw: &InProcess) -> (f64, f64, f64) {
    let text = metrics(gw).await;
    (
        metric_sum(&text, "xds_gateway_upstream_resources_decoded_total"),
        metric_sum(&text, "xds_gateway_upstream_resources_reused_total"),
        metric_sum(&text, "xds_gateway_resources_rendered_total"),
    )
}

/// Delta sessions' held sets built by walking them, and found as another
/// session made them, so far.
async fn delta_sets(gw: &InProcess) -> (f64, f64) {
    let text = metrics(gw).await;
    (
        metric_sum(&text, "xds_gateway_upstream_delta_sets_built_total"),
        metric_sum(&text, "xds_gateway_upstream_delta_sets_shared_total"),
    )
}

/// The served version of every session's wildcard CDS answer.
async fn served_all(gw: &InProcess) -> Vec<String> {
    let mut versions = Vec::new();
    for i in 0..SESSIONS {
        let body = request(&node(&format!("pod-{i}")), "", &[]).to_string();
        let reply = discover_on(gw.rest_port, "clusters", body)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status, 200, "{}", reply.text());
        let version: Value = serde_json::from_str(&reply.text()).expect("JSON");
        versions.push(
            version["versionInfo"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    versions
}

async fn poll_all(gw: &InProcess) -> Vec<String> {
    let mut versions = Vec::new();
    for i in 0..SESSIONS {
        let body = request(&node(&format!("pod-{i}")), "", &[]).to_string();
        let reply = discover_on(gw.rest_port, "clusters", body)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status, 200, "{}", reply.text());
        versions.push(upstream_of(&reply));
    }
    versions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_decodes_only_what_changed() {
    const TEST: &str = "a_push_decodes_only_what_changed";
    bounded(TEST_TIMEOUT, async {
        let cp = GoControlPlane::start_with(TEST, &["--record=false"]);
        let clusters: Vec<Value> = (0..CLUSTERS)
            .map(|i| cluster(&format!("c{i:04}")))
            .collect();
        cp.set_snapshot("*", "v1", &[(CDS, clusters)]).await;
        let config = Config {
            upstream: Some(cp.upstream()),
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        assert!(poll_all(&gw).await.iter().all(|v| v == "v1"));
        let (decoded, reused, rendered) = counts(&gw).await;
        assert_eq!(
            (decoded as usize, reused as usize),
            (CLUSTERS, CLUSTERS * (SESSIONS - 1)),
            "the first answer is decoded once, its set shared by the 49 other sessions"
        );
        assert_eq!(rendered as usize, CLUSTERS, "each content rendered once");

        let mut changed = cluster("c0500");
        changed["connect_timeout"] = json!("7s");
        cp.set_cluster("*", "v2", changed).await;
        eventually(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async { poll_all(&gw).await.iter().all(|v| v == "v2").then_some(()) },
        )
        .await
        .expect("every session took v2");
        let (after_decoded, after_reused, after_rendered) = counts(&gw).await;
        assert_eq!(
            (after_decoded - decoded) as usize,
            1,
            "one decode in all: the changed cluster, by the first session"
        );
        assert_eq!(
            (after_reused - reused) as usize,
            CLUSTERS * SESSIONS - 1,
            "everything else taken as it was, or shared"
        );
        assert_eq!(after_rendered - rendered, 1.0, "the new content, once");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_push_decodes_only_what_changed() {
    const TEST: &str = "a_delta_push_decodes_only_what_changed";
    bounded(TEST_TIMEOUT, async {
        let cp = GoControlPlane::start_with(TEST, &["--record=false"]);
        let clusters: Vec<Value> = (0..CLUSTERS)
            .map(|i| cluster(&format!("c{i:04}")))
            .collect();
        cp.set_snapshot("*", "v1", &[(CDS, clusters)]).await;
        let config = Config {
            upstream: Some(cp.upstream()),
            upstream_mode: UpstreamMode::Delta,
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        let first = served_all(&gw).await;
        let (decoded, reused, rendered) = counts(&gw).await;
        assert_eq!(
            decoded as usize,
            CLUSTERS * SESSIONS,
            "the first answers are decoded"
        );
        assert_eq!(reused, 0.0);
        assert_eq!(rendered as usize, CLUSTERS, "each content rendered once");
        let (built, shared) = delta_sets(&gw).await;
        assert_eq!(
            (built as usize, shared as usize),
            (1, SESSIONS - 1),
            "the first session builds what the first answer holds, the others find it"
        );

        let mut changed = cluster("c0500");
        changed["connect_timeout"] = json!("7s");
        cp.set_cluster("*", "v2", changed).await;
        eventually(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async {
                let now = served_all(&gw).await;
                now.iter().zip(&first).all(|(a, b)| a != b).then_some(())
            },
        )
        .await
        .expect("every session took the change");
        let (after_decoded, after_reused, after_rendered) = counts(&gw).await;
        assert_eq!(
            (after_decoded - decoded) as usize,
            SESSIONS,
            "one decode per session: the changed cluster, all the upstream sent"
        );
        assert_eq!(after_reused, 0.0, "a delta answer repeats nothing");
        assert_eq!(after_rendered - rendered, 1.0, "the new content, once");
        let (after_built, after_shared) = delta_sets(&gw).await;
        assert_eq!(
            (
                (after_built - built) as usize,
                (after_shared - shared) as usize
            ),
            (1, SESSIONS - 1),
            "one session walks the 1,000 held to apply the change, the others find its set \
             in work proportional to the change"
        );
    })
    .await;
}
