//! The gateway in front of java-control-plane (issue 42), the Java xDS
//! server library, run as a test peer (`tests/peers/java-control-plane/`,
//! `support/java_peer.rs`): a control plane that says less than
//! go-control-plane (no RTDS, no Fetch, no answer to a request at the version
//! the client holds; its README lists what was observed).
//!
//! The smoke test here: SotW ADS, a snapshot of two clusters and one EDS
//! assignment, and REST GETs of clusters and endpoints for a node return
//! exactly those names.
//!
//! The node has a snapshot of its own, and every other node a default one:
//! java-control-plane looks each request up by the node *that request*
//! carries (README.md of the peer, observed behaviour (g)), so the gateway
//! sends the node on every request by default, as Envoy does (with the node
//! on the first request only, the ACK and the EDS request were served the
//! default snapshot of node `""`).
//!
//! The gateway runs in process on kernel-chosen loopback ports; the peer is
//! a child process (`java -jar`), killed when the test ends.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/java_peer.rs"]
mod java_peer;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::time::Duration;

use serde_json::{json, Value};

use inproc::InProcess;
use java_peer::JavaControlPlane;
use process::http_get;
use rest::{bounded, CDS, EDS};
use xds_gateway::config::{Config, UpstreamMode, UpstreamStreams};

/// No test may take longer than this in total (a JVM start included).
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The resource names of a REST answer, sorted.
fn names(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("no resources in {body}"))
        .iter()
        .map(|r| {
            r.get("name")
                .or_else(|| r.get("clusterName"))
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("a resource without a name: {r}"))
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_ads_serves_java_control_plane_clusters_and_endpoints() {
    const TEST: &str = "sotw_ads_serves_java_control_plane_clusters_and_endpoints";
    bounded(TEST_TIMEOUT, async {
        let mut cp = JavaControlPlane::start(TEST);
        let eds_cluster = |name: &str| {
            json!({
                "@type": CDS,
                "name": name,
                "type": "EDS",
                "eds_cluster_config": {"eds_config": {"ads": {}}},
                "connect_timeout": "1s"
            })
        };
        cp.set_snapshot(
            "*",
            "default-1",
            &[(CDS, vec![eds_cluster("default-only")])],
        )
        .await;
        let answer = cp
            .set_snapshot(
                "java-smoke",
                "java-1",
                &[
                    (CDS, vec![eds_cluster("backend"), eds_cluster("payments")]),
                    (
                        EDS,
                        vec![json!({
                            "@type": EDS,
                            "cluster_name": "backend",
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                                "socket_address": {"address": "127.0.0.1", "port_value": 8081}
                            }}}]}]
                        })],
                    ),
                ],
            )
            .await;
        assert_eq!(answer["version"], "java-1", "{answer}");

        let config = Config {
            upstream: Some(cp.upstream()),
            upstream_mode: UpstreamMode::Sotw,
            upstream_streams: UpstreamStreams::Aggregated,
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;

        let port = gw.rest_port;
        let get = |path: String| async move {
            let (status, body) = http_get(port, &path)
                .await
                .unwrap_or_else(|e| panic!("GET {path}: {e}"));
            assert_eq!(status, 200, "GET {path}: {body}");
            serde_json::from_str::<Value>(&body)
                .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
        };
        let clusters = get("/v3/discovery:clusters?node=java-smoke".to_owned()).await;
        assert_eq!(clusters["typeUrl"], CDS, "{clusters}");
        assert_eq!(names(&clusters), ["backend", "payments"], "{clusters}");

        let endpoints =
            get("/v3/discovery:endpoints?node=java-smoke&names=backend".to_owned()).await;
        // After the ACKs, still the node's own snapshot.
        let again = get("/v3/discovery:clusters?node=java-smoke".to_owned()).await;
        assert_eq!(names(&again), ["backend", "payments"], "{again}");
        assert_eq!(endpoints["typeUrl"], EDS, "{endpoints}");
        assert_eq!(names(&endpoints), ["backend"], "{endpoints}");
        let address = &endpoints["resources"][0]["endpoints"][0]["lbEndpoints"][0]["endpoint"]
            ["address"]["socketAddress"];
        assert_eq!(address["portValue"], 8081, "{endpoints}");

        // java-control-plane saw the gateway's SotW ADS stream for that node.
        let stats = cp.stats().await;
        let requests = stats["requests"].as_array().expect("requests");
        assert!(
            requests.iter().any(|r| r["node_id"] == "java-smoke"
                && r["type_url"] == CDS
                && r["delta"] == false),
            "no SotW CDS request of node java-smoke recorded: {stats}"
        );
        cp.assert_running();
        gw.stop().await;
    })
    .await;
}

/// A cluster as java-control-plane serves it.
fn eds_cluster(name: &str, timeout: &str) -> Value {
    json!({
        "@type": CDS,
        "name": name,
        "type": "EDS",
        "eds_cluster_config": {"eds_config": {"ads": {}}},
        "connect_timeout": timeout
    })
}

/// GET `path` on `port`: status, whether it is stale-marked, and the body.
async fn get_marked(port: u16, path: &str) -> (u16, bool, Value) {
    let reply = gateway::http_request(
        port,
        http::Method::GET,
        path,
        &[],
        bytes::Bytes::new(),
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let json = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let stale = reply.headers.contains_key("x-xds-gateway-stale-since");
    (reply.status, stale, json)
}

/// The transports the issue names: SotW and delta on ADS, auto, per-type.
fn transports() -> [(&'static str, UpstreamMode, UpstreamStreams); 4] {
    [
        ("sotw", UpstreamMode::Sotw, UpstreamStreams::Aggregated),
        ("delta", UpstreamMode::Delta, UpstreamStreams::Aggregated),
        ("auto", UpstreamMode::Auto, UpstreamStreams::Aggregated),
        ("per-type", UpstreamMode::Sotw, UpstreamStreams::PerType),
    ]
}

async fn gateway_on(
    cp: &JavaControlPlane,
    mode: UpstreamMode,
    streams: UpstreamStreams,
) -> InProcess {
    let config = Config {
        upstream: Some(cp.upstream()),
        upstream_mode: mode,
        upstream_streams: streams,
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

/// java-control-plane serves no runtime: over ADS, asking for it ends the
/// node's whole stream; per type, its stream is UNIMPLEMENTED. A runtime
/// poll gets a prompt error, and a cluster change still reaches the same
/// node's held poll promptly, not stale-marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_type_leaves_the_nodes_other_types_prompt_and_fresh() {
    const TEST: &str = "an_unserved_type_leaves_the_nodes_other_types_prompt_and_fresh";
    bounded(Duration::from_secs(240), async {
        let cp = JavaControlPlane::start(TEST);
        for (name, mode, streams) in transports() {
            cp.set_snapshot(
                "*",
                &format!("{name}-1"),
                &[(CDS, vec![eds_cluster("a", "1s")])],
            )
            .await;
            let gw = gateway_on(&cp, mode, streams).await;
            let port = gw.rest_port;
            let clusters = "/v3/discovery:clusters?node=n1";
            let (status, _, body) = get_marked(port, clusters).await;
            assert_eq!(status, 200, "{name}: {body}");
            let started = std::time::Instant::now();
            let (status, _, body) =
                get_marked(port, "/v3/discovery:runtime?node=n1&names=rt").await;
            let took = started.elapsed();
            assert!(
                status == 501 || status == 502,
                "{name}: runtime answered {status}: {body}"
            );
            assert!(
                took < Duration::from_secs(3),
                "{name}: the runtime error took {took:?}"
            );
            // Back to fresh: the other types are not stale-marked.
            let fresh = process::eventually(
                Duration::from_secs(10),
                Duration::from_millis(50),
                || async {
                    let (status, stale, body) = get_marked(port, clusters).await;
                    (status == 200 && !stale).then_some(body)
                },
            )
            .await
            .unwrap_or_else(|| panic!("{name}: clusters stay stale-marked"));
            let version = fresh["versionInfo"].as_str().expect("a version").to_owned();
            // A held poll of the node's clusters, woken by a change.
            let held = tokio::spawn(async move {
                let path = format!("/v3/discovery:clusters?node=n1&version={version}&wait=5s");
                let (status, stale, body) = get_marked(port, &path).await;
                (status, stale, body, std::time::Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pushed = std::time::Instant::now();
            cp.set_cluster("*", &format!("{name}-2"), eds_cluster("a", "7s"))
                .await;
            let (status, stale, body, woken) = held.await.expect("the held poll");
            assert_eq!(status, 200, "{name}: {body}");
            assert!(!stale, "{name}: the change came stale-marked");
            assert_eq!(
                body["resources"][0]["connectTimeout"], "7s",
                "{name}: {body}"
            );
            let latency = woken.saturating_duration_since(pushed);
            eprintln!("{TEST}: {name}: change reached the held poll in {latency:?}");
            assert!(latency < Duration::from_millis(100), "{name}: {latency:?}");
            gw.stop().await;
        }
    })
    .await;
}

/// java-control-plane answers a resubscription at the version the client
/// holds with nothing at all. After its restart with nothing changed the
/// node's answers are not stale-marked once the stream is open again, and
/// `/readyz` counts no stale session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_nothing_changed_leaves_no_stale_mark() {
    const TEST: &str = "a_restart_with_nothing_changed_leaves_no_stale_mark";
    bounded(Duration::from_secs(240), async {
        let cp = JavaControlPlane::start(TEST);
        cp.set_snapshot("*", "r1", &[(CDS, vec![eds_cluster("a", "1s")])])
            .await;
        for (name, mode, streams) in transports() {
            let gw = gateway_on(&cp, mode, streams).await;
            let port = gw.rest_port;
            let clusters = "/v3/discovery:clusters?node=n1";
            assert_eq!(get_marked(port, clusters).await.0, 200, "{name}");
            cp.grpc_stop().await;
            let stale = process::eventually(
                Duration::from_secs(10),
                Duration::from_millis(50),
                || async { get_marked(port, clusters).await.1.then_some(()) },
            )
            .await;
            assert!(stale.is_some(), "{name}: the stop was noticed");
            cp.grpc_start().await;
            let fresh = process::eventually(
                Duration::from_secs(15),
                Duration::from_millis(100),
                || async {
                    let (status, stale, _) = get_marked(port, clusters).await;
                    (status == 200 && !stale).then_some(())
                },
            )
            .await;
            assert!(
                fresh.is_some(),
                "{name}: still stale-marked after the restart"
            );
            let (_, ready) = http_get(gw.admin_port, "/readyz").await.expect("readyz");
            let ready: Value = serde_json::from_str(&ready).expect("JSON");
            assert_eq!(ready["stale_sessions"], 0, "{name}: {ready}");
            gw.stop().await;
        }
    })
    .await;
}

/// Two java-control-planes with the same snapshot, `failover-after = 3s`:
/// the primary restarted for 2 s has nothing new to say afterwards, which
/// is silence, not a failure: no switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_primary_back_within_failover_after_is_kept() {
    const TEST: &str = "a_quiet_primary_back_within_failover_after_is_kept";
    bounded(Duration::from_secs(120), async {
        use xds_gateway::config::UpstreamTable;
        let primary = JavaControlPlane::start(TEST);
        let backup = JavaControlPlane::start(TEST);
        for cp in [&primary, &backup] {
            cp.set_snapshot("*", "s1", &[(CDS, vec![eds_cluster("a", "1s")])])
                .await;
        }
        let table = |name: &str, cp: &JavaControlPlane| UpstreamTable {
            name: name.into(),
            address: cp.upstream().replace("http://", "grpc://"),
            ..UpstreamTable::default()
        };
        let config = Config {
            upstream_tables: vec![
                UpstreamTable {
                    failover: Some("backup".into()),
                    failover_after: Some(Duration::from_secs(3)),
                    ..table("primary", &primary)
                },
                table("backup", &backup),
            ],
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        let clusters = "/v3/discovery:clusters?node=n1";
        assert_eq!(get_marked(gw.rest_port, clusters).await.0, 200);
        primary.grpc_stop().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        primary.grpc_start().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, sessions) = http_get(gw.admin_port, "/debug/sessions")
            .await
            .expect("sessions");
        let sessions: Value = serde_json::from_str(&sessions).expect("JSON");
        let session = sessions["sessions"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["node_id"] == "n1"))
            .cloned()
            .unwrap_or_else(|| panic!("no session n1: {sessions}"));
        assert_eq!(
            session["upstream"]["upstream"], "primary",
            "switched: {session}"
        );
        let (status, stale, _) = get_marked(gw.rest_port, clusters).await;
        assert_eq!((status, stale), (200, false));
        gw.stop().await;
    })
    .await;
}
