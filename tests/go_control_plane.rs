//! The gateway in front of go-control-plane (issue 21), the xDS server
//! library most production control planes are built on, run as a test peer
//! (`tests/peers/go-control-plane/`, `support/go_peer.rs`): in every
//! upstream transport the gateway has (SotW and delta, each on ADS and on
//! the per-type services, the latter against a peer that serves no ADS;
//! unary Fetch; auto), every resource type is served as protobuf's reference
//! JSON of what go-control-plane sent (Python `json_format` with
//! `xds-protos`) and presenting the version served is a 304; a change of
//! one cluster reaches a client; a restart of go-control-plane's gRPC
//! listener leaves the last good config in service and the gateway back in
//! step after; and a resource go-control-plane serves that Envoy's rules
//! refuse is NACKed upstream, go-control-plane itself recording the NACK
//! with the gateway's `error_detail`; and auto finds the per-type services
//! of a control plane without ADS.
//!
//! The gateway runs in process on kernel-chosen loopback ports; the peer
//! and the reference JSON are child processes, killed when the test ends.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/json_reference.rs"]
mod json_reference;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};

use gateway::{discover_on, Reply};
use go_peer::GoControlPlane;
use inproc::InProcess;
use process::{eventually, http_get, require_python};
use rest::{
    bounded, cluster, main_cases, names_of, node, other_cases, request, upstream_of, version_of,
    Case, CDS,
};
use xds_gateway::config::{Config, UpstreamMode, UpstreamStreams};

/// No test may take longer than this in total.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a change may take to reach a poll.
const CHANGE_WAIT: Duration = Duration::from_secs(15);
/// Every transport: SotW or delta on ADS or on the per-type services,
/// unary Fetch, and auto (which finds delta ADS on go-control-plane).
const MODES: [(UpstreamMode, UpstreamStreams); 6] = [
    (UpstreamMode::Sotw, UpstreamStreams::Aggregated),
    (UpstreamMode::Delta, UpstreamStreams::Aggregated),
    (UpstreamMode::Sotw, UpstreamStreams::PerType),
    (UpstreamMode::Delta, UpstreamStreams::PerType),
    (UpstreamMode::Fetch, UpstreamStreams::Aggregated),
    (UpstreamMode::Auto, UpstreamStreams::Aggregated),
];

/// Whether a served version carries the upstream's version as it is: in
/// delta (auto picks delta here) it is a digest of the resource versions.
fn carries_upstream_version((mode, _): (UpstreamMode, UpstreamStreams)) -> bool {
    matches!(mode, UpstreamMode::Sotw | UpstreamMode::Fetch)
}

/// The transports that hold a stream (SotW and delta, ADS and per-type).
fn stream_transports() -> impl Iterator<Item = (UpstreamMode, UpstreamStreams)> {
    MODES
        .into_iter()
        .filter(|(mode, _)| matches!(mode, UpstreamMode::Sotw | UpstreamMode::Delta))
}

/// The first NACK of CDS that go-control-plane recorded from `node`,
/// waiting for it up to [`CHANGE_WAIT`].
async fn recorded_nack(cp: &GoControlPlane, node: &str) -> Option<Value> {
    eventually(CHANGE_WAIT, Duration::from_millis(100), || async {
        cp.stats().await["nacks"]
            .as_array()?
            .iter()
            .find(|nack| nack["node_id"] == node && nack["type_url"] == CDS)
            .cloned()
    })
    .await
}

/// Every corpus case: the four main types and SRDS, SDS, RTDS, ECDS.
fn cases() -> Vec<Case> {
    main_cases().into_iter().chain(other_cases()).collect()
}

/// go-control-plane twice: serving ADS and the per-type services, and the
/// per-type services only (`--no-ads`), so that a per-type transport is
/// proven to use them.
struct Peers {
    full: GoControlPlane,
    per_type_only: GoControlPlane,
}

impl Peers {
    fn start(test: &str) -> Peers {
        Peers {
            full: GoControlPlane::start(test),
            per_type_only: GoControlPlane::start_with(test, &["--no-ads"]),
        }
    }

    /// The peer a transport is tested against.
    fn of(&self, (_, streams): (UpstreamMode, UpstreamStreams)) -> &GoControlPlane {
        match streams {
            UpstreamStreams::Aggregated => &self.full,
            UpstreamStreams::PerType => &self.per_type_only,
        }
    }
}

/// The gateway in process in front of `upstream`, in `mode` on `streams`.
async fn gateway_of(upstream: String, transport: (UpstreamMode, UpstreamStreams)) -> InProcess {
    gateway_with(upstream, transport, Config::default()).await
}

/// [`gateway_of`] with the rest of `config`.
async fn gateway_with(
    upstream: String,
    (mode, streams): (UpstreamMode, UpstreamStreams),
    config: Config,
) -> InProcess {
    let config = Config {
        upstream: Some(upstream),
        upstream_mode: mode,
        upstream_streams: streams,
        allow_secrets: true,
        ..config
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

async fn discover(gw: &InProcess, endpoint: &str, body: &Value) -> Reply {
    discover_on(gw.rest_port, endpoint, body.to_string())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Protobuf's reference JSON (`json_format`) of each upstream resource of
/// `cases`, by type URL and then name.
fn reference_json(test: &str, cases: &[Case]) -> BTreeMap<(String, String), Value> {
    let python = require_python(test);
    let items: Vec<Value> = cases.iter().flat_map(|c| c.upstream.clone()).collect();
    let answers = json_reference::reference(&python, &[json!({"op": "roundtrip", "items": items})]);
    let results = answers[0]["results"].as_array().expect("reference results");
    results
        .iter()
        .map(|result| {
            let text = result["json"]
                .as_str()
                .unwrap_or_else(|| panic!("{test}: reference failed: {result}"));
            let any: Value = serde_json::from_str(text).unwrap();
            let type_url = any["@type"].as_str().unwrap().to_owned();
            ((type_url, resource_name(&any)), any)
        })
        .collect()
}

fn resource_name(resource: &Value) -> String {
    resource
        .get("name")
        .or_else(|| resource.get("clusterName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_serves_go_control_plane_config_as_protobuf_renders_it() {
    const TEST: &str = "every_mode_serves_go_control_plane_config_as_protobuf_renders_it";
    let cases = cases();
    let reference = reference_json(TEST, &cases);
    bounded(TEST_TIMEOUT, async {
        let peers = Peers::start(TEST);
        let resources: Vec<(&str, Vec<Value>)> = cases
            .iter()
            .map(|c| (c.type_url, c.upstream.clone()))
            .collect();
        for cp in [&peers.full, &peers.per_type_only] {
            cp.set_snapshot("*", "gcp-1", &resources).await;
        }
        for (i, mode) in MODES.into_iter().enumerate() {
            let gw = gateway_of(peers.of(mode).upstream(), mode).await;
            let n = node(&format!("gcp-{i}"));
            for case in &cases {
                let what = format!("{mode:?} {}", case.endpoint);
                let reply = discover(&gw, case.endpoint, &request(&n, "", &case.asked)).await;
                assert_eq!(reply.status, 200, "{what}: {}", reply.text());
                let body = reply.json();
                assert_eq!(body["typeUrl"], json!(case.type_url), "{what}");
                assert_eq!(names_of(&reply), case.expected, "{what}: names");
                for got in body["resources"].as_array().unwrap() {
                    let key = (case.type_url.to_owned(), resource_name(got));
                    assert_eq!(
                        Some(got),
                        reference.get(&key),
                        "{what}: not protobuf's reference JSON of what go-control-plane sent"
                    );
                }
                if carries_upstream_version(mode) {
                    assert_eq!(upstream_of(&reply), "gcp-1", "{what}");
                }
                let again = discover(
                    &gw,
                    case.endpoint,
                    &request(&n, &version_of(&reply), &case.asked),
                )
                .await;
                assert_eq!(
                    again.status,
                    304,
                    "{what}: presenting the version served: {}",
                    again.text()
                );
            }
            gw.stop().await;
        }
    })
    .await;
}

/// A CDS long poll for `n` presenting `version`, held up to 30 s (longer
/// than [`CHANGE_WAIT`], so an answer within that is the change's).
fn hold_cds(port: u16, n: &Value, version: &str) -> tokio::task::JoinHandle<Reply> {
    let body = request(n, version, &[]).to_string();
    tokio::spawn(async move {
        gateway::http_request(
            port,
            http::Method::POST,
            "/v3/discovery:clusters?wait=30s",
            &[("content-type", "application/json")],
            body,
            CHANGE_WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("the held poll was not answered by the change: {e}"))
    })
}

/// Polls CDS for `n`, presenting `version`, until the answer is a new
/// version; returns it.
async fn next_cds(gw: &InProcess, n: &Value, version: &str) -> Reply {
    let found = eventually(CHANGE_WAIT, Duration::from_millis(50), || async {
        let reply = discover(gw, "clusters", &request(n, version, &[])).await;
        (reply.status == 200).then_some(reply)
    })
    .await;
    found.unwrap_or_else(|| panic!("no new CDS version after {version} within {CHANGE_WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_and_a_restart_of_go_control_plane_in_every_mode() {
    const TEST: &str = "a_change_and_a_restart_of_go_control_plane_in_every_mode";
    bounded(TEST_TIMEOUT, async {
        let peers = Peers::start(TEST);
        for (i, mode) in MODES.into_iter().enumerate() {
            let cp = peers.of(mode);
            let id = format!("restart-{i}");
            let n = node(&id);
            cp.set_snapshot(&id, "v1", &[(CDS, vec![cluster("a"), cluster("b")])])
                .await;
            let gw = gateway_of(cp.upstream(), mode).await;
            let first = discover(&gw, "clusters", &request(&n, "", &[])).await;
            assert_eq!(first.status, 200, "{mode:?}: {}", first.text());
            assert_eq!(names_of(&first), ["a", "b"], "{mode:?}");

            // One cluster changes.
            // One cluster changes while a long poll is held: the poll is
            // answered with it, well before its wait ends.
            let held = hold_cds(gw.rest_port, &n, &version_of(&first));
            let mut changed = cluster("b");
            changed["connect_timeout"] = json!("7s");
            tokio::time::sleep(Duration::from_millis(200)).await;
            cp.set_cluster(&id, "v2", changed).await;
            let second = held.await.unwrap();
            assert_eq!(
                second.status,
                200,
                "{mode:?}: the held poll: {}",
                second.text()
            );
            if carries_upstream_version(mode) {
                assert_eq!(upstream_of(&second), "v2", "{mode:?}");
            }
            assert!(
                second.text().contains("\"7s\""),
                "{mode:?}: {}",
                second.text()
            );
            // A client that holds nothing gets the new state too, at once
            // (in fetch mode, not the first poll's answer memoised for the
            // TTL: a version never goes back).
            let fresh = discover(&gw, "clusters", &request(&n, "", &[])).await;
            assert_eq!(fresh.body, second.body, "{mode:?}: a version went back");

            // go-control-plane's gRPC listener goes away: the last good
            // state is served, marked stale, and presenting it is a 304.
            let streams_before = streams_of(&requests(cp).await);
            cp.stop_grpc().await;
            let during = discover(&gw, "clusters", &request(&n, &version_of(&second), &[])).await;
            assert_eq!(
                during.status,
                304,
                "{mode:?} while the upstream is down: {}",
                during.text()
            );
            let marked = eventually(CHANGE_WAIT, Duration::from_millis(50), || async {
                let full = discover(&gw, "clusters", &request(&n, "", &[])).await;
                assert_eq!(full.status, 200, "{mode:?}: {}", full.text());
                assert_eq!(full.body, second.body, "{mode:?}: the last good state");
                full.headers
                    .contains_key("x-xds-gateway-stale-since")
                    .then_some(())
            })
            .await;
            assert!(marked.is_some(), "{mode:?}: never marked stale");

            // It comes back with a change: the gateway is in step again.
            cp.start_grpc().await;
            let mut third = cluster("c");
            third["connect_timeout"] = json!("3s");
            cp.set_cluster(&id, "v3", third).await;
            let after = next_cds(&gw, &n, &version_of(&second)).await;
            if carries_upstream_version(mode) {
                assert_eq!(upstream_of(&after), "v3", "{mode:?}");
            }
            assert_eq!(names_of(&after), ["a", "b", "c"], "{mode:?}");
            check_resubscription(mode, &requests(cp).await, &streams_before, &id);
            gw.stop().await;
        }
    })
    .await;
}

/// A recorded request's stream: go-control-plane numbers SotW and delta
/// streams apart.
fn stream_of(request: &Value) -> (bool, i64) {
    (
        request["delta"] == true,
        request["stream"].as_i64().unwrap_or(-1),
    )
}

/// The streams `requests` came on.
fn streams_of(requests: &[Value]) -> BTreeSet<(bool, i64)> {
    requests.iter().map(stream_of).collect()
}

/// Every stream request go-control-plane has recorded, oldest first.
async fn requests(cp: &GoControlPlane) -> Vec<Value> {
    cp.stats().await["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The first CDS request of `node` on a stream opened after a restart of
/// go-control-plane is one go-control-plane takes as a resumption: delta
/// presents the versions it holds (`initial_resource_versions`, so only
/// what changed is sent again); SotW the version it ACKed last, with no
/// nonce (a nonce belongs to the stream that sent it, and go-control-plane
/// ignores a request whose nonce it did not send on that stream).
fn check_resubscription(
    mode: (UpstreamMode, UpstreamStreams),
    requests: &[Value],
    streams_before: &BTreeSet<(bool, i64)>,
    node: &str,
) {
    // The first request on a stream opened after the restart (an ACK on
    // the old stream may be recorded after the restart began).
    let Some(first) = requests
        .iter()
        .filter(|r| !streams_before.contains(&stream_of(r)))
        .find(|r| r["node_id"] == node && r["type_url"] == CDS)
    else {
        assert_eq!(
            mode.0,
            UpstreamMode::Fetch,
            "{mode:?}: no request after the restart"
        );
        return;
    };
    assert_eq!(first["response_nonce"], "", "{mode:?}: {first}");
    if first["delta"] == true {
        let held = first["initial_resource_versions"]
            .as_object()
            .map(|versions| versions.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        assert_eq!(held, ["a", "b"], "{mode:?}: {first}");
    } else {
        assert_eq!(first["version_info"], "v2", "{mode:?}: {first}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_envoy_would_refuse_is_nacked_to_go_control_plane() {
    const TEST: &str = "a_resource_envoy_would_refuse_is_nacked_to_go_control_plane";
    bounded(TEST_TIMEOUT, async {
        let peers = Peers::start(TEST);
        for (i, mode) in stream_transports().enumerate() {
            let cp = peers.of(mode);
            let id = format!("nack-{i}");
            let n = node(&id);
            cp.set_snapshot(&id, "good", &[(CDS, vec![cluster("a")])])
                .await;
            let gw = gateway_of(cp.upstream(), mode).await;
            let good = discover(&gw, "clusters", &request(&n, "", &[])).await;
            assert_eq!(good.status, 200, "{mode:?}: {}", good.text());

            // connect_timeout must be > 0 (Envoy's field rules).
            let mut bad = cluster("a");
            bad["connect_timeout"] = json!("-1s");
            cp.set_cluster(&id, "bad", bad).await;
            let nacked = recorded_nack(cp, &id).await;
            let nack =
                nacked.unwrap_or_else(|| panic!("{mode:?}: go-control-plane recorded no NACK"));
            let message = nack["error_detail"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("connect_timeout"),
                "{mode:?}: the NACK's error_detail does not say what was wrong: {nack}"
            );
            // The last good state stays in service.
            let same = discover(&gw, "clusters", &request(&n, &version_of(&good), &[])).await;
            assert_eq!(same.status, 304, "{mode:?}: {}", same.text());
            gw.stop().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_finds_the_per_type_services_of_a_control_plane_without_ads() {
    const TEST: &str = "auto_finds_the_per_type_services_of_a_control_plane_without_ads";
    bounded(TEST_TIMEOUT, async {
        let cp = GoControlPlane::start_with(TEST, &["--no-ads"]);
        cp.set_snapshot("*", "v1", &[(CDS, vec![cluster("a")])])
            .await;
        // Without ADS an aggregated stream mode gets nothing...
        let aggregated = gateway_of(
            cp.upstream(),
            (UpstreamMode::Sotw, UpstreamStreams::Aggregated),
        )
        .await;
        let n = node("no-ads");
        let refused = discover(&aggregated, "clusters", &request(&n, "", &[])).await;
        assert_eq!(refused.status, 503, "{}", refused.text());
        aggregated.stop().await;
        // ...and auto finds the per-type streams (delta, which
        // go-control-plane's per-type services speak too) and serves.
        let auto = gateway_of(
            cp.upstream(),
            (UpstreamMode::Auto, UpstreamStreams::Aggregated),
        )
        .await;
        let served = eventually(CHANGE_WAIT, Duration::from_millis(100), || async {
            let reply = discover(&auto, "clusters", &request(&n, "", &[])).await;
            (reply.status == 200).then_some(reply)
        })
        .await
        .expect("auto mode never served the per-type streams");
        assert_eq!(names_of(&served), ["a"]);
        let readyz = http_get(auto.admin_port, "/readyz")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(readyz.1.contains("delta, per-type streams"), "{readyz:?}");
        let stats = cp.stats().await;
        assert!(
            stats["requests"].as_array().is_some_and(|r| r
                .iter()
                .any(|r| r["node_id"] == "no-ads" && r["delta"] == true)),
            "{stats}"
        );
        auto.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspected_rejection_is_forwarded_to_go_control_plane_in_every_stream_transport() {
    const TEST: &str =
        "a_suspected_rejection_is_forwarded_to_go_control_plane_in_every_stream_transport";
    bounded(TEST_TIMEOUT, async {
        let peers = Peers::start(TEST);
        for (i, mode) in stream_transports().enumerate() {
            let cp = peers.of(mode);
            let id = format!("rejecting-{i}");
            let n = node(&id);
            cp.set_snapshot(&id, "v1", &[(CDS, vec![cluster("a")])])
                .await;
            let forwarding = Config {
                rejection_threshold: 2,
                forward_rejections: true,
                ..Config::default()
            };
            let gw = gateway_with(cp.upstream(), mode, forwarding).await;
            let first = discover(&gw, "clusters", &request(&n, "", &[])).await;
            assert_eq!(first.status, 200, "{mode:?}: {}", first.text());
            let v1 = version_of(&first);
            cp.set_cluster(&id, "v2", cluster("b")).await;
            let second = next_cds(&gw, &n, &v1).await;
            let v2 = version_of(&second);
            // The client keeps presenting v1: it rejected v2.
            for _ in 0..3 {
                let stale = discover(&gw, "clusters", &request(&n, &v1, &[])).await;
                assert_eq!(version_of(&stale), v2, "{mode:?}");
            }
            let forwarded = recorded_nack(cp, &id)
                .await
                .unwrap_or_else(|| panic!("{mode:?}: go-control-plane recorded no NACK"));
            let message = forwarded["error_detail"]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(
                message.contains(&v1) && message.contains(&v2),
                "{mode:?}: the NACK does not say which versions: {forwarded}"
            );
            gw.stop().await;
        }
    })
    .await;
}
