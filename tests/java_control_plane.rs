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
