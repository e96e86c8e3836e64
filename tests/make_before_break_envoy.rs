//! A real REST Envoy 1.40 through a route change to a new cluster, with
//! traffic flowing, in front of a gateway run with `--make-before-break`:
//! no request is answered 503 `NC` (no cluster) during the change.
//!
//! The scripted control plane (`support/fake_ads.rs`) publishes, in one
//! step, a new EDS cluster with its endpoints and the route configuration
//! sending every request to it. Envoy polls LDS and CDS every 3 s and the
//! rewritten RDS and EDS sources every 100 ms, so its RDS poll comes first:
//! served at once, the route would name a cluster Envoy does not have for
//! up to 3 s. A client sends a request through Envoy's listener every 10 ms
//! all along; every answer must come from a backend (200, the old one's or
//! the new one's body), and Envoy's `no_cluster` counter must stay 0. The
//! gateway's `xds_gateway_withheld_answers_total{type="routes"}` shows the
//! route was held back: if Envoy's CDS poll happened to come first (the
//! change landed just before it), the round proves nothing, and the change
//! is repeated with another cluster, at most three rounds.
//!
//! Run without `--make-before-break` (by hand), the same change gives
//! `NC` 503s: that is what this test was checked against.
//!
//! All on 127.0.0.1 free ports; every process is killed when the test ends,
//! bounded by the support module's test timeout.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/process.rs"]
mod process;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use envoy_types::pb::google::protobuf::Any;

use envoy::{Envoy, CLA_TYPE, CLUSTER_TYPE, CONVERGE_TIMEOUT, LISTENER_TYPE, ROUTE_TYPE};
use fake_ads::FakeAds;
use process::{free_port, get_until, http_get};

const TEST: &str = "make_before_break_envoy";
const NODE_ID: &str = "make-before-break-envoy";
const ADS_SOURCE: &str = r#"{"ads": {}, "resource_api_version": "V3"}"#;
const WITHHELD: &str = "xds_gateway_withheld_answers_total{type=\"routes\"}";
const NO_CLUSTER: &str = "http.ingress_http.no_cluster";
/// How often Envoy polls LDS and CDS.
const CDS_REFRESH: &str = "3s";
/// Changes tried until one's routes were held back.
const ROUNDS: usize = 3;

fn any(json: &str) -> Any {
    fake_ads::json_any(json)
}

/// `local_route`: every request to `cluster`.
fn route_to(cluster: &str) -> Any {
    let json = format!(
        r#"{{"@type": "{ROUTE_TYPE}", "name": "{}",
          "virtual_hosts": [{{"name": "all", "domains": ["*"], "routes": [
            {{"match": {{"prefix": "/"}}, "route": {{"cluster": "{cluster}"}}}}]}}]}}"#,
        envoy::ROUTE_NAME
    );
    any(&json)
}

/// The clusters `backend0..=round` and their endpoints (backend `i` on
/// `ports[i]`), and the route to the last one, published at once.
fn publish(ads: &FakeAds, ports: &[u16], round: usize) {
    let version = (round + 1).to_string();
    let names: Vec<String> = (0..=round).map(|i| format!("backend{i}")).collect();
    let clusters = names
        .iter()
        .map(|n| any(&envoy::cluster_json(n, ADS_SOURCE)))
        .collect();
    let endpoints = names
        .iter()
        .zip(ports)
        .map(|(n, port)| any(&envoy::cla_json(n, *port)))
        .collect();
    ads.set(CLUSTER_TYPE, &version, clusters);
    ads.set(CLA_TYPE, &version, endpoints);
    ads.set(ROUTE_TYPE, &version, vec![route_to(&names[round])]);
}

async fn withheld(gateway_admin: u16) -> f64 {
    let (status, text) = http_get(gateway_admin, "/metrics")
        .await
        .expect("gateway /metrics");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(WITHHELD)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {WITHHELD} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_envoy_drops_no_request_while_a_route_moves_to_a_new_cluster() {
    envoy::run_bounded(TEST, run).await;
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let mut ports = Vec::new();
    for i in 0..=ROUNDS {
        let body = format!("backend{i}");
        let router = Router::new().fallback(move || {
            let body = body.clone();
            async move { body }
        });
        ports.push(envoy::serve(router).await);
    }
    let listener_port = free_port();
    let ads = FakeAds::start().await;
    ads.set(
        LISTENER_TYPE,
        "1",
        vec![any(&envoy::listener_json(
            "listener_0",
            "127.0.0.1",
            listener_port,
            ADS_SOURCE,
        ))],
    );
    publish(&ads, &ports, 0);

    let refresh = Duration::from_millis(100);
    let flags = ["--make-before-break", "30s"];
    let gateway = envoy::start_gateway(&ads.url(), refresh, &flags, true, &dir).await;
    let envoy_admin = free_port();
    let source = format!(
        "{{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], \
         refresh_delay: {CDS_REFRESH}}}"
    );
    let bootstrap = envoy::rest_bootstrap_from(NODE_ID, envoy_admin, gateway.port, &source, "");
    let mut envoy = Envoy::start(&envoy_bin, &dir, &bootstrap);
    let first = get_until(
        listener_port,
        "/",
        CONVERGE_TIMEOUT,
        envoy::POLL_INTERVAL,
        || envoy.assert_running(),
        |body| body == "backend0",
    )
    .await;
    first.unwrap_or_else(|last| panic!("Envoy never routed to backend0; last: {last}"));

    // Traffic through the listener all along: every answer is recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut answers: Vec<(u16, String)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let answer = http_get(listener_port, "/").await;
                answers.push(answer.unwrap_or_else(|e| (0, e)));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            answers
        })
    };

    let mut held_in = None;
    for round in 1..=ROUNDS {
        let before = withheld(gateway.admin).await;
        publish(&ads, &ports, round);
        let expected = format!("backend{round}");
        let moved = get_until(
            listener_port,
            "/",
            Duration::from_secs(15),
            Duration::from_millis(20),
            || envoy.assert_running(),
            |body| body == expected,
        )
        .await;
        moved.unwrap_or_else(|last| panic!("round {round}: never routed to {expected}: {last}"));
        let after = withheld(gateway.admin).await;
        eprintln!(
            "{TEST}: round {round}: routes held back {} times",
            after - before
        );
        if after > before {
            held_in = Some(round);
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let answers = traffic.await.expect("the traffic task");
    let no_cluster = envoy::counters(envoy_admin, &[NO_CLUSTER]).await;
    let failed: Vec<&(u16, String)> = answers
        .iter()
        .filter(|(status, body)| *status != 200 || !body.starts_with("backend"))
        .collect();
    eprintln!(
        "{TEST}: {} requests during the change, {} failed; envoy {no_cluster:?}",
        answers.len(),
        failed.len()
    );
    assert!(answers.len() > 50, "too little traffic: {}", answers.len());
    assert!(
        failed.is_empty(),
        "{} of {} requests failed during the change; the first: {:?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(
        no_cluster.get(NO_CLUSTER).copied().unwrap_or(0),
        0,
        "{no_cluster:?}"
    );
    assert!(
        held_in.is_some(),
        "in {ROUNDS} rounds Envoy's CDS poll always came before its RDS poll: \
         nothing was held back, so nothing was tested"
    );
    envoy.print_warnings(TEST);
}
