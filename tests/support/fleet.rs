//! A fleet-sized scenario: one real Envoy polling N EDS clusters over REST
//! through the gateway, in front of the scripted ADS server
//! (`fake_ads.rs`), whose clusters carry `ads: {}` EDS config sources as an
//! ADS control plane's do (the gateway rewrites them into REST sources).
//! Shared by `tests/envoy_fleet.rs` (1,000 clusters, bounded, in the test
//! command) and `bench/fleet.rs` (the same, longer, for the figures in
//! bench/RESULTS.md).
//!
//! Include it after `process.rs`, `envoy.rs` and `fake_ads.rs`.

#![allow(dead_code)] // the test and the bench use different parts

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use envoy_types::pb::google::protobuf::Any;
use serde_json::{json, Value};
use xds_gateway::xds::{Codec, ResourceType};

use crate::envoy::{self, Envoy, NODE_CLUSTER, POLL_INTERVAL};
use crate::fake_ads::FakeAds;
use crate::process::{free_port, http_get, ChildGuard};

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();
const LDS: &str = ResourceType::Listeners.type_url();

/// The name of cluster `i`.
pub fn cluster_name(i: usize) -> String {
    format!("svc_{i:04}")
}

/// The scripted control plane of a fleet: no listeners, `clusters` EDS
/// clusters with `ads: {}` sources and one endpoint each, all at version 1.
pub async fn control_plane(codec: &Codec, clusters: usize) -> FakeAds {
    let ads = FakeAds::start().await;
    ads.set(LDS, "1", Vec::new());
    ads.set(CDS, "1", (0..clusters).map(|i| cluster(codec, i)).collect());
    ads.set(
        EDS,
        "1",
        (0..clusters).map(|i| assignment(codec, i, 0)).collect(),
    );
    ads
}

/// One fleet: the processes, their ports, and the upstream's state.
pub struct Fleet {
    pub envoy: Envoy,
    pub gateway: ChildGuard,
    pub ads: FakeAds,
    pub envoy_admin: u16,
    pub gateway_admin: u16,
    pub clusters: usize,
    /// When Envoy was started.
    pub started: Instant,
    codec: Codec,
    /// Per cluster, the generation of its endpoints (bumped by [`change`](Self::change)).
    generations: Vec<u32>,
    eds_version: u64,
}

fn any(codec: &Codec, json: &Value) -> Any {
    let any = codec
        .parse_any(json.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("fixture {json}: {e}"));
    Any {
        type_url: any.type_url,
        value: any.value,
    }
}

pub fn cluster(codec: &Codec, i: usize) -> Any {
    let ads = json!({"ads": {}, "resource_api_version": "V3"});
    any(codec, &cluster_json(i, ads))
}

/// Cluster `i` as JSON, its endpoints from `eds_config`.
fn cluster_json(i: usize, eds_config: Value) -> Value {
    json!({"@type": CDS, "name": cluster_name(i), "type": "EDS", "connect_timeout": "1s",
           "eds_cluster_config": {"eds_config": eds_config}})
}

/// Cluster `i`'s endpoints at `generation`: 127.0.0.1 on a port that
/// changes with it (nothing listens: only the config matters).
pub fn assignment(codec: &Codec, i: usize, generation: u32) -> Any {
    any(codec, &assignment_json(i, generation))
}

/// [`assignment`] as JSON.
fn assignment_json(i: usize, generation: u32) -> Value {
    let port = 20_000 + (i as u32 * 7 + generation) % 40_000;
    json!({"@type": EDS, "cluster_name": cluster_name(i), "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]})
}

/// How the fleet's Envoy reaches the gateway: its `xds_cluster`'s protocol,
/// connect timeout and, if set, its circuit breaker's `max_connections`
/// (with `max_pending_requests` 100,000, so that polls past it wait).
#[derive(Debug, Clone, Copy)]
pub struct XdsLink {
    pub http2: bool,
    pub connect_timeout: Duration,
    pub max_connections: Option<u32>,
}

impl Default for XdsLink {
    /// HTTP/2, a 1 s connect timeout (`examples/envoy-rest-bootstrap.yaml`),
    /// Envoy's default circuit breaker.
    fn default() -> XdsLink {
        XdsLink {
            http2: true,
            connect_timeout: Duration::from_secs(1),
            max_connections: None,
        }
    }
}

impl XdsLink {
    /// The YAML lines it adds to the `xds_cluster` (indented for its fields).
    fn cluster_lines(&self) -> String {
        let mut lines = String::new();
        if self.http2 {
            lines.push_str(envoy::XDS_CLUSTER_HTTP2);
        }
        if let Some(max) = self.max_connections {
            lines.push_str(&format!(
                "    circuit_breakers:\n      thresholds:\n      - max_connections: {max}\n        max_pending_requests: 100000\n"
            ));
        }
        lines
    }
}

impl Fleet {
    /// Starts the upstream with `clusters` EDS clusters, the gateway (its
    /// EDS sources rewritten to poll every `refresh`), then Envoy.
    pub async fn start(
        envoy_bin: &Path,
        dir: &Path,
        clusters: usize,
        refresh: Duration,
        debug_log: bool,
    ) -> Fleet {
        let link = XdsLink::default();
        Fleet::start_with(envoy_bin, dir, clusters, refresh, debug_log, link).await
    }

    /// [`Fleet::start`] with Envoy reaching the gateway over `link`.
    pub async fn start_with(
        envoy_bin: &Path,
        dir: &Path,
        clusters: usize,
        refresh: Duration,
        debug_log: bool,
        link: XdsLink,
    ) -> Fleet {
        let codec = Codec::embedded();
        let ads = control_plane(&codec, clusters).await;

        let gateway = envoy::start_gateway(&ads.url(), refresh, &[], debug_log, dir).await;
        let (gateway_port, gateway_admin) = (gateway.port, gateway.admin);
        let gateway = gateway.guard;
        let envoy_admin = free_port();
        let lines = link.cluster_lines();
        let bootstrap = envoy::rest_bootstrap_with("fleet", envoy_admin, gateway_port, &lines);
        // The bootstrap's one connect timeout is its xds_cluster's.
        let timeout = format!("connect_timeout: {}s", link.connect_timeout.as_secs_f64());
        let bootstrap = bootstrap.replacen("connect_timeout: 1s", &timeout, 1);
        let envoy = Envoy::start(envoy_bin, dir, &bootstrap);
        let started = Instant::now();
        envoy::wait_admin(
            envoy_admin,
            "/stats?filter=server.live",
            "the fleet's Envoy",
        )
        .await;
        Fleet {
            envoy,
            gateway,
            ads,
            envoy_admin,
            gateway_admin,
            clusters,
            started,
            codec,
            generations: vec![0; clusters],
            eds_version: 1,
        }
    }

    /// Panics (logs printed by the guards) if a child has exited.
    pub fn check_alive(&mut self) {
        self.envoy.assert_running();
        self.gateway.assert_running();
    }

    /// Envoy's counters starting with one of `prefixes`.
    pub async fn envoy_counters(&mut self, prefixes: &[&str]) -> BTreeMap<String, u64> {
        self.check_alive();
        envoy::counters(self.envoy_admin, prefixes).await
    }

    /// Per EDS cluster: `update_success`; and the sums of `update_failure`
    /// and `update_rejected` over all of them.
    pub async fn eds_counters(&mut self) -> (BTreeMap<String, u64>, u64, u64) {
        self.check_alive();
        eds_counters(self.envoy_admin).await
    }

    /// Waits until every EDS cluster has taken its first update; how long
    /// that took since Envoy started.
    pub async fn wait_warm(&mut self, timeout: Duration) -> Duration {
        self.check_alive();
        wait_eds_warm(self.envoy_admin, self.clusters, self.started, timeout).await
    }

    /// The gateway's EDS answers so far: (200s, 304s, others).
    pub async fn gateway_eds_answers(&mut self) -> (f64, f64, f64) {
        self.check_alive();
        let (_, text) = http_get(self.gateway_admin, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("gateway /metrics: {e}"));
        let (mut ok, mut not_modified, mut other) = (0.0, 0.0, 0.0);
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("xds_gateway_requests_total{") else {
                continue;
            };
            if !rest.contains(r#"type="endpoints""#) {
                continue;
            }
            let value: f64 = rest
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if rest.contains(r#"status="200""#) {
                ok += value;
            } else if rest.contains(r#"status="304""#) {
                not_modified += value;
            } else {
                other += value;
            }
        }
        (ok, not_modified, other)
    }

    /// The gateway process's CPU time so far (user + system, from /proc).
    pub fn gateway_cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.gateway.id()))
            .unwrap_or_default();
        // Fields after the parenthesised command name: utime is 14th, stime 15th overall.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 = fields
            .get(11..13)
            .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
        // The kernel's USER_HZ is 100 on every Linux the tests run on.
        Duration::from_millis(ticks * 10)
    }

    /// Gives cluster `i` new endpoints (a new upstream EDS version).
    pub fn change(&mut self, i: usize) {
        self.generations[i] += 1;
        self.eds_version += 1;
        let resources = (0..self.clusters)
            .map(|c| assignment(&self.codec, c, self.generations[c]))
            .collect();
        self.ads.set(EDS, &self.eds_version.to_string(), resources);
    }

    /// The node cluster Envoy presents.
    pub fn node_cluster(&self) -> &'static str {
        NODE_CLUSTER
    }
}

/// Per EDS cluster of the Envoy whose admin listens on `admin`:
/// `update_success`; and the sums of `update_failure` and `update_rejected`
/// over all of them.
pub async fn eds_counters(admin: u16) -> (BTreeMap<String, u64>, u64, u64) {
    let stats = envoy::counters(admin, &["cluster.svc_"]).await;
    let mut success = BTreeMap::new();
    let (mut failures, mut rejected) = (0, 0);
    for (name, value) in stats {
        let Some(cluster) = name.strip_prefix("cluster.") else {
            continue;
        };
        if let Some(cluster) = cluster.strip_suffix(".update_success") {
            success.insert(cluster.to_owned(), value);
        } else if cluster.ends_with(".update_failure") {
            failures += value;
        } else if cluster.ends_with(".update_rejected") {
            rejected += value;
        }
    }
    (success, failures, rejected)
}

/// Waits until each of the `clusters` EDS clusters of the Envoy whose admin
/// listens on `admin` has taken its first update; how long that took since
/// `started`. Panics after `timeout`, saying how many were warm.
pub async fn wait_eds_warm(
    admin: u16,
    clusters: usize,
    started: Instant,
    timeout: Duration,
) -> Duration {
    let deadline = Instant::now() + timeout;
    loop {
        let (success, _, _) = eds_counters(admin).await;
        let warm = success.len() == clusters && success.values().all(|v| *v >= 1);
        if warm {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{} of {clusters} EDS clusters warm after {timeout:?}",
            success.values().filter(|v| **v >= 1).count(),
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What the floor server answers: per path, the body of version "1".
struct FloorBodies {
    listeners: Bytes,
    clusters: Bytes,
    /// Per cluster name, its ClusterLoadAssignment's answer.
    endpoints: BTreeMap<String, Bytes>,
}

/// The cold-start floor of a fleet: the same Envoy, as `Fleet::start`
/// starts it, polling `clusters` EDS clusters with the same endpoints from
/// a plain REST server that answers each poll from a body made in advance
/// (a 304 to a poll presenting version "1", as a REST server does for an
/// unchanged resource), with the sources the gateway writes (`refresh`,
/// a 10 s `request_timeout`). How long it took to warm every cluster since
/// Envoy started: the same machine's own cost of a cold start, against
/// which a gateway's is judged in the same run. Envoy is killed at the end.
pub async fn floor_warm(
    envoy_bin: &Path,
    dir: &Path,
    clusters: usize,
    refresh: Duration,
    timeout: Duration,
) -> Duration {
    std::fs::create_dir_all(dir).expect("create the floor's directory");
    let response = |type_url: &str, resources: Vec<Value>| -> Bytes {
        json!({"version_info": "1", "resources": resources, "type_url": type_url})
            .to_string()
            .into()
    };
    let source = json!({"resource_api_version": "V3", "api_config_source": {
        "api_type": "REST", "transport_api_version": "V3", "cluster_names": ["xds_cluster"],
        "refresh_delay": format!("{:.3}s", refresh.as_secs_f64()), "request_timeout": "10s"}});
    let cluster_list = (0..clusters)
        .map(|i| cluster_json(i, source.clone()))
        .collect();
    let endpoints = (0..clusters)
        .map(|i| (cluster_name(i), response(EDS, vec![assignment_json(i, 0)])))
        .collect();
    let bodies = Arc::new(FloorBodies {
        listeners: response(LDS, Vec::new()),
        clusters: response(CDS, cluster_list),
        endpoints,
    });
    let port = serve_many_streams(Router::new().fallback(floor_answer).with_state(bodies)).await;
    let admin = free_port();
    let lines = XdsLink::default().cluster_lines();
    let bootstrap = envoy::rest_bootstrap_with("fleet", admin, port, &lines);
    let mut envoy = Envoy::start(envoy_bin, dir, &bootstrap);
    let started = Instant::now();
    envoy::wait_admin(admin, "/stats?filter=server.live", "the floor's Envoy").await;
    let warm = wait_eds_warm(admin, clusters, started, timeout).await;
    envoy.assert_running();
    warm
}

/// Serves `router` on 127.0.0.1:0 over HTTP/1.1 and HTTP/2 (prior
/// knowledge), taking as many HTTP/2 streams at once as the gateway does
/// (`--max-streams-per-connection`, 4,096): Envoy sends a cold start's
/// polls before it reads the server's limit, and hyper's default of 200
/// would refuse the rest. Returns the port.
async fn serve_many_streams(router: Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            tokio::spawn(async move {
                let mut builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                builder.http2().max_concurrent_streams(4096);
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = builder.serve_connection(io, service).await;
            });
        }
    });
    port
}

/// One poll of the floor server: the body for its path (and, for EDS, its
/// one name), or a 304 when it presents version "1".
async fn floor_answer(State(bodies): State<Arc<FloorBodies>>, uri: Uri, body: Bytes) -> Response {
    // Only the two fields read: the node (77 KB from Envoy 1.40) is skipped.
    #[derive(serde::Deserialize)]
    struct Poll {
        #[serde(default)]
        version_info: String,
        #[serde(default)]
        resource_names: Vec<String>,
    }
    let Ok(poll) = serde_json::from_slice::<Poll>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if poll.version_info == "1" {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let answer = match uri.path() {
        "/v3/discovery:listeners" => Some(bodies.listeners.clone()),
        "/v3/discovery:clusters" => Some(bodies.clusters.clone()),
        "/v3/discovery:endpoints" => poll
            .resource_names
            .first()
            .and_then(|name| bodies.endpoints.get(name).cloned()),
        _ => None,
    };
    match answer {
        Some(body) => ([("content-type", "application/json")], body).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
