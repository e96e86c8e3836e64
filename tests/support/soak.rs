//! The soak: about twenty REST-polling Envoy 1.40 processes through one
//! `xds-gateway` process in front of the go-control-plane peer
//! (`go_peer.rs`), for a set time, while
//!
//! - the control plane changes one cluster every second and is restarted
//!   (killed, and started again on the same gRPC port with the state it
//!   had) every `restart_every`;
//! - long-pollers (`?wait=`) and watchers (`?watch`, NDJSON) come and go,
//!   some hanging up mid-wait;
//! - a few clients send garbage: bad JSON, bad types, bodies over
//!   `--max-body-bytes`, random bytes;
//!
//! and a sampler records the gateway's RSS, open file descriptors, threads,
//! tokio tasks (`xds_gateway_runtime_tasks`) and open connections.
//!
//! [`Report::check`] is the verdict: RSS growth under 5 % after warm-up
//! (in a run of half an hour or more; a shorter one catches gross leaks
//! only, [`SHORT_RUN_RSS_GROWTH_MAX`]), the config history within its bound,
//! file descriptors and threads back to their warm level, tasks bounded, no
//! failed poll (`update_failure`/`update_rejected` on any Envoy), no 5xx
//! (the gateway's `xds_gateway_requests_total`, and what the soak's own
//! clients saw), every client answered as the protocol says, and every
//! Envoy converged on the final version at the end.
//!
//! Shared by `tests/soak.rs` (3 minutes, in the test command) and
//! `bench/soak.rs` (an hour by default). Include it after `process.rs`,
//! `envoy.rs`, `gateway.rs` and `go_peer.rs`.

#![allow(dead_code)] // the test and the bench use different parts

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use xds_gateway::xds::ResourceType;

use crate::envoy::{self, Envoy};
use crate::gateway::{http_request, metric_sum};
use crate::go_peer::GoControlPlane;
use crate::process::{free_port, http_get, requests_by_status, LOOPBACK};

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();
const LDS: &str = ResourceType::Listeners.type_url();

/// Clusters whose address changes (STATIC, endpoints inline): one changes
/// every second, round robin.
const STATIC_CLUSTERS: usize = 8;
/// Clusters with `ads: {}` EDS sources (rewritten to REST): their
/// endpoints never change, so their polls are 304s.
const EDS_CLUSTERS: usize = 2;
/// The gateway's `--max-body-bytes` in the soak: the oversized garbage is
/// twice that. Not smaller: an Envoy 1.40's own request is over 64 KiB (its
/// node lists every extension it was built with).
const MAX_BODY: usize = 512 * 1024;
/// Long-polling clients, watchers and garbage senders running at once.
const LONG_POLLERS: usize = 4;
const WATCHERS: usize = 4;
const GARBAGE: usize = 2;
/// How long the soak's own clients wait for one answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);
/// The Envoys' REST `request_timeout` (their default is 1 s): see
/// [`bootstrap`].
const ENVOY_REQUEST_TIMEOUT: &str = "5s";
/// Allowed RSS growth from the end of warm-up to the end, in a run of
/// [`FLATNESS_RUN`] or longer: the issue's rule, judged by the hour-long
/// `cargo bench --bench soak`.
pub const RSS_GROWTH_MAX: f64 = 0.05;
/// Allowed RSS growth in a shorter run, such as the test command's 3
/// minutes. Its 90 s after warm-up cannot tell 5 % from noise: samples of
/// one debug-build run swing by ±8 % around their median (the memos filling
/// and emptying on their one-minute window, the allocator keeping pages),
/// and a CI run of a leak-free build measured +10.9 % between the medians
/// of its first and last 5 samples, then settled 14 % below the warm
/// level. A leak of anything per request (12,000 requests in 3 minutes)
/// still shows far above this.
pub const SHORT_RUN_RSS_GROWTH_MAX: f64 = 0.25;
/// From this length on a run is held to [`RSS_GROWTH_MAX`].
pub const FLATNESS_RUN: Duration = Duration::from_secs(30 * 60);
/// The gateway's `--history-max-bytes` in the soak. The history grows by
/// every version of every identity (about 35 KiB/s here), up to its bound,
/// so at the default (64 MiB) it would fill for half an hour: growth by
/// design, not a leak. At 1 MiB it is full within the first minute of
/// warm-up, and the soak checks in every sample that the bound holds.
const HISTORY_MAX_BYTES: u64 = 1024 * 1024;
/// Allowed file descriptors above the warm level once the churning clients
/// stopped (sockets still closing).
const FD_SLACK: i64 = 8;
/// Allowed threads above the warm level at the end (tokio's blocking pool
/// keeps idle threads for 10 s).
const THREAD_SLACK: i64 = 8;
/// Allowed tokio tasks above the warm level at the end.
const TASK_SLACK: f64 = 16.0;
/// The gateway's `--idle-timeout` (sessions, and the history of what was
/// served): every client of the soak polls or watches well within it.
const IDLE_TIMEOUT: &str = "60s";
/// How long every Envoy has to converge on the final version.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// From the Envoys' start to the end of the churn.
    pub duration: Duration,
    pub envoys: usize,
    /// The control plane is killed and started again this often.
    pub restart_every: Duration,
    /// Samples before this are not held to the flatness rule.
    pub warm_up: Duration,
    pub sample_every: Duration,
    /// The Envoys' `refresh_delay` (LDS, CDS, and the rewritten EDS).
    pub refresh: Duration,
    pub seed: u64,
}

impl SoakConfig {
    /// `duration` with its scaled defaults: warm-up half of it (at most 5
    /// minutes: the gateway's memos drop what was not asked for in a
    /// minute, its history what was not asked for in `--idle-timeout`,
    /// [`IDLE_TIMEOUT`] here), a restart every 5 minutes, or every third of a shorter
    /// run (so a 3-minute run restarts twice), and ~40 samples (at least
    /// one every 10 s, at most one a second) and a fresh seed.
    pub fn for_duration(duration: Duration, envoys: usize) -> SoakConfig {
        let restart_every = Duration::from_secs(300).min(duration / 3);
        let warm_up = (duration / 2).min(Duration::from_secs(300));
        let sample_every = (duration / 40).clamp(Duration::from_secs(1), Duration::from_secs(10));
        SoakConfig {
            duration,
            envoys,
            restart_every,
            warm_up,
            sample_every,
            refresh: Duration::from_secs(1),
            seed: rand::random(),
        }
    }
}

/// One look at the gateway process.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    pub tasks: f64,
    pub connections: f64,
    pub watches: f64,
    pub long_polls: f64,
    pub requests: f64,
    /// What the gateway's config history holds (`xds_gateway_history_bytes`).
    pub history_kib: u64,
}

/// What the soak's own clients and the control plane did.
#[derive(Debug, Default)]
pub struct Counts {
    pub changes: AtomicU64,
    pub restarts: AtomicU64,
    pub long_polls: AtomicU64,
    pub long_polls_200: AtomicU64,
    pub long_polls_abandoned: AtomicU64,
    pub watches: AtomicU64,
    pub watch_events: AtomicU64,
    pub garbage: AtomicU64,
    /// Garbage whose connection the gateway closed before answering (a body
    /// over the limit may be cut off while still being sent).
    pub garbage_cut: AtomicU64,
    /// Answers the protocol does not allow, with what they were.
    pub wrong: std::sync::Mutex<Vec<String>>,
    pub client_5xx: AtomicU64,
}

impl Counts {
    fn wrong(&self, what: String) {
        let mut wrong = self.wrong.lock().unwrap_or_else(|e| e.into_inner());
        if wrong.len() < 50 {
            wrong.push(what);
        }
    }
}

/// The figures of one run.
#[derive(Debug)]
pub struct Report {
    pub config: SoakConfig,
    pub samples: Vec<Sample>,
    /// After the churn stopped and the sockets closed.
    pub settled: Sample,
    pub counts: Arc<Counts>,
    /// Per Envoy: (node id, summed update_failure, summed update_rejected).
    pub envoy_failures: Vec<(String, u64, u64)>,
    pub gateway_5xx: f64,
    pub gateway_statuses: BTreeMap<String, f64>,
    /// How long after the churn every Envoy showed the final version.
    pub converged_in: Option<Duration>,
    pub not_converged: Vec<String>,
    /// The Envoys' own log lines about failed polls (timestamped), first 50.
    pub envoy_failure_lines: Vec<String>,
    pub final_version: String,
}

fn cluster_name(i: usize) -> String {
    format!("soak_c{i:02}")
}

fn eds_cluster_name(i: usize) -> String {
    format!("soak_e{i:02}")
}

fn port_of(i: usize, generation: u64) -> u64 {
    20_000 + (i as u64 * 97 + generation) % 40_000
}

fn static_cluster(i: usize, generation: u64) -> Value {
    let name = cluster_name(i);
    json!({"@type": CDS, "name": name, "type": "STATIC", "connect_timeout": "1s",
           "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
               {"endpoint": {"address": {"socket_address":
                   {"address": "127.0.0.1", "port_value": port_of(i, generation)}}}}]}]}})
}

fn eds_cluster(i: usize) -> Value {
    json!({"@type": CDS, "name": eds_cluster_name(i), "type": "EDS", "connect_timeout": "1s",
           "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}})
}

fn eds_assignment(i: usize) -> Value {
    json!({"@type": EDS, "cluster_name": eds_cluster_name(i), "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 19_000 + i}}}}]}]})
}

/// The control plane's whole state: per static cluster its generation.
#[derive(Debug, Clone)]
struct State {
    generations: Vec<u64>,
    version: u64,
}

impl State {
    fn snapshot(&self) -> Vec<(&'static str, Vec<Value>)> {
        let mut clusters: Vec<Value> = (0..STATIC_CLUSTERS)
            .map(|i| static_cluster(i, self.generations[i]))
            .collect();
        clusters.extend((0..EDS_CLUSTERS).map(eds_cluster));
        vec![
            (LDS, Vec::new()),
            (CDS, clusters),
            (EDS, (0..EDS_CLUSTERS).map(eds_assignment).collect()),
        ]
    }

    fn version(&self) -> String {
        format!("v{}", self.version)
    }
}

/// An Envoy's bootstrap: node `node_id`, LDS and CDS over REST from
/// `xds_cluster` (HTTP/2 when `http2`) at the gateway, every `refresh`.
/// `request_timeout` is [`ENVOY_REQUEST_TIMEOUT`], not Envoy's 1 s: twenty
/// Envoys, the gateway and the control plane share two cores with whatever
/// else the machine runs, and a poll that a stalled machine holds a second
/// is a fact about the machine, not the gateway (the EDS sources the
/// gateway writes carry its own `--request-timeout` for the same reason).
fn bootstrap(node_id: &str, admin: u16, gateway: u16, refresh: Duration, http2: bool) -> String {
    let source = format!(
        "{{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], \
         refresh_delay: {}s, request_timeout: {ENVOY_REQUEST_TIMEOUT}}}",
        refresh.as_secs_f64()
    );
    let protocol = if http2 { envoy::XDS_CLUSTER_HTTP2 } else { "" };
    envoy::rest_bootstrap_from(node_id, admin, gateway, &source, protocol)
}

/// One REST Envoy of the soak.
struct SoakEnvoy {
    node: String,
    admin: u16,
    envoy: Envoy,
}

/// `VmRSS` (KiB) and `Threads` of `pid`, and its open file descriptors.
fn process_figures(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (field("VmRSS:"), field("Threads:"), fds)
}

/// Samples the gateway (`pid`, admin on `admin`) at `at`.
async fn sample(pid: u32, admin: u16, at: Duration) -> Sample {
    let (rss_kib, threads, fds) = process_figures(pid);
    let (_, metrics) = http_get(admin, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("soak: gateway /metrics: {e}"));
    Sample {
        at,
        rss_kib,
        fds,
        threads,
        tasks: metric_sum(&metrics, "xds_gateway_runtime_tasks"),
        connections: metric_sum(&metrics, "xds_gateway_connections_open"),
        watches: metric_sum(&metrics, "xds_gateway_watches_open"),
        long_polls: metric_sum(&metrics, "xds_gateway_long_polls_held"),
        requests: metric_sum(&metrics, "xds_gateway_requests_total"),
        history_kib: metric_sum(&metrics, "xds_gateway_history_bytes") as u64 / 1024,
    }
}

/// The gateway's answers so far by status (every type).
async fn gateway_statuses(admin: u16) -> BTreeMap<String, f64> {
    let (_, text) = http_get(admin, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("soak: gateway /metrics: {e}"));
    requests_by_status(&text)
}

fn node(id: &str) -> Value {
    json!({"id": id, "cluster": envoy::NODE_CLUSTER})
}

/// POST a discovery request to the gateway over a fresh connection.
async fn post(
    port: u16,
    path: &str,
    body: impl Into<Bytes>,
    content_type: &str,
    timeout: Duration,
) -> Result<crate::gateway::Reply, String> {
    http_request(
        port,
        http::Method::POST,
        path,
        &[("content-type", content_type)],
        body,
        timeout,
    )
    .await
}

/// A long-polling client: polls CDS with `?wait=`, presenting what it was
/// last answered; one poll in five it hangs up mid-wait. 200 and 304 are
/// the only right answers.
async fn long_poller(k: usize, port: u16, seed: u64, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let id = format!("soak-lp-{k}");
    let mut version = String::new();
    while !stop.load(Ordering::Relaxed) {
        let wait = rng.random_range(1..=5);
        let path = format!("/v3/discovery:clusters?wait={wait}s");
        let body = json!({"node": node(&id), "version_info": version}).to_string();
        counts.long_polls.fetch_add(1, Ordering::Relaxed);
        if rng.random_ratio(1, 5) {
            let give_up = Duration::from_millis(rng.random_range(10..2_000));
            if tokio::time::timeout(
                give_up,
                post(port, &path, body, "application/json", CLIENT_TIMEOUT),
            )
            .await
            .is_err()
            {
                counts.long_polls_abandoned.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        match post(port, &path, body, "application/json", CLIENT_TIMEOUT).await {
            Ok(reply) if reply.status == 200 => {
                counts.long_polls_200.fetch_add(1, Ordering::Relaxed);
                let json: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
                match json["versionInfo"].as_str() {
                    Some(v) => v.clone_into(&mut version),
                    None => counts.wrong(format!("long poll 200 without versionInfo: {json}")),
                }
            }
            Ok(reply) if reply.status == 304 => {}
            Ok(reply) => {
                if reply.status >= 500 {
                    counts.client_5xx.fetch_add(1, Ordering::Relaxed);
                }
                counts.wrong(format!("long poll {}: {}", reply.status, reply.text()));
            }
            Err(e) => counts.wrong(format!("long poll failed: {e}")),
        }
    }
}

/// A watcher: opens `GET ...?watch` (NDJSON), reads events for 1-15 s,
/// hangs up, pauses, again. Each watch must answer 200 and carry its first
/// event (the current state).
async fn watcher(k: usize, port: u16, seed: u64, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let id = format!("soak-w-{k}");
    while !stop.load(Ordering::Relaxed) {
        let stay = Duration::from_millis(rng.random_range(1_000..15_000));
        counts.watches.fetch_add(1, Ordering::Relaxed);
        match watch_once(port, &id, stay).await {
            Ok(0) => counts.wrong(format!("watch {id}: no first event within {stay:?}")),
            Ok(events) => {
                counts.watch_events.fetch_add(events, Ordering::Relaxed);
            }
            Err((status, what)) => {
                if status >= 500 {
                    counts.client_5xx.fetch_add(1, Ordering::Relaxed);
                }
                counts.wrong(format!("watch {id}: {what}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..2_000))).await;
    }
}

/// One watch held for `stay`: the events it carried, or (status, why).
async fn watch_once(port: u16, id: &str, stay: Duration) -> Result<u64, (u16, String)> {
    let fail = |e: &dyn std::fmt::Display| (0, e.to_string());
    let stream = tokio::net::TcpStream::connect((LOOPBACK, port))
        .await
        .map_err(|e| fail(&e))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| fail(&e))?;
    let conn = tokio::spawn(conn);
    let request = http::Request::get(format!("/v3/discovery:clusters?node={id}&watch"))
        .header(http::header::HOST, format!("127.0.0.1:{port}"))
        .header(http::header::ACCEPT, "application/x-ndjson")
        .body(Full::new(Bytes::new()))
        .map_err(|e| fail(&e))?;
    let response = tokio::time::timeout(CLIENT_TIMEOUT, sender.send_request(request))
        .await
        .map_err(|e| fail(&e))?
        .map_err(|e| fail(&e))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    if status != 200 {
        let text = tokio::time::timeout(CLIENT_TIMEOUT, body.collect())
            .await
            .ok()
            .and_then(|b| b.ok())
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        conn.abort();
        return Err((status, format!("status {status}: {text}")));
    }
    let mut events = 0;
    let mut partial = Vec::new();
    let until = tokio::time::Instant::now() + stay;
    loop {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => break,
            Ok(None) => {
                conn.abort();
                return Err((0, "the stream ended".into()));
            }
            Ok(Some(Err(e))) => {
                conn.abort();
                return Err((0, format!("the stream failed: {e}")));
            }
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    partial.extend_from_slice(data);
                    while let Some(end) = partial.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = partial.drain(..=end).collect();
                        if line.len() > 1 {
                            let event: Value = serde_json::from_slice(&line)
                                .map_err(|e| (0, format!("an event is not JSON: {e}")))?;
                            if event["versionInfo"].as_str().is_none() {
                                return Err((0, format!("an event has no versionInfo: {event}")));
                            }
                            events += 1;
                        }
                    }
                }
            }
        }
    }
    conn.abort();
    Ok(events)
}

/// A garbage sender: bad JSON, bad types, bodies over the limit, random
/// bytes, unknown fields, a wrong content type. Each must get a 4xx.
async fn garbage(port: u16, seed: u64, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let (body, content_type): (Vec<u8>, &str) = match rng.random_range(0..6) {
            0 => (
                br#"{"node": {"id": "soak-g", "#.to_vec(),
                "application/json",
            ),
            1 => (
                br#"{"node": 5, "resource_names": "all"}"#.to_vec(),
                "application/json",
            ),
            2 => {
                let mut big = br#"{"node": {"id": "soak-g"}, "resource_names": ["#.to_vec();
                while big.len() < 2 * MAX_BODY {
                    big.extend_from_slice(br#""xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","#);
                }
                big.extend_from_slice(br#""x"]}"#);
                (big, "application/json")
            }
            3 => {
                let len = rng.random_range(1..4_096);
                (
                    (0..len).map(|_| rng.random::<u8>()).collect(),
                    "application/json",
                )
            }
            4 => (
                br#"{"node": {"id": "soak-g"}, "version_info": 7, "no_such_field": true}"#.to_vec(),
                "application/json",
            ),
            _ => (br#"{"node": {"id": "soak-g"}}"#.to_vec(), "text/plain"),
        };
        counts.garbage.fetch_add(1, Ordering::Relaxed);
        match post(
            port,
            "/v3/discovery:clusters",
            body,
            content_type,
            CLIENT_TIMEOUT,
        )
        .await
        {
            Ok(reply) if (400..500).contains(&reply.status) => {}
            Ok(reply) => {
                if reply.status >= 500 {
                    counts.client_5xx.fetch_add(1, Ordering::Relaxed);
                }
                counts.wrong(format!(
                    "garbage answered {}: {}",
                    reply.status,
                    reply.text()
                ));
            }
            // A body over the limit may be cut off while it is still sent.
            Err(_) => {
                counts.garbage_cut.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
    }
}

/// Starts the control plane (on `grpc`'s port, if given) and sets `state`.
async fn start_control_plane(test: &str, grpc: Option<&str>, state: &State) -> GoControlPlane {
    let mut flags = vec!["--record=false"];
    if let Some(grpc) = grpc {
        flags.extend(["--grpc", grpc]);
    }
    let peer = GoControlPlane::start_with(test, &flags);
    peer.set_snapshot("*", &state.version(), &state.snapshot())
        .await;
    peer
}

/// An Envoy's summed `update_failure` and `update_rejected` (LDS, CDS and
/// every EDS cluster).
async fn envoy_failures(admin: u16) -> (u64, u64) {
    let stats = envoy::counters(
        admin,
        &[
            "cluster_manager.cds.",
            "listener_manager.lds.",
            "cluster.soak_e",
        ],
    )
    .await;
    let sum = |suffix: &str| -> u64 {
        stats
            .iter()
            .filter(|(k, _)| k.ends_with(suffix))
            .map(|(_, v)| v)
            .sum()
    };
    (sum(".update_failure"), sum(".update_rejected"))
}

/// Whether the Envoy on `admin` shows `state`: every static cluster at its
/// generation's port, every EDS cluster present.
async fn envoy_shows(admin: u16, state: &State) -> Result<(), String> {
    let (status, text) = http_get(admin, "/config_dump?resource=dynamic_active_clusters").await?;
    if status != 200 {
        return Err(format!("config_dump {status}"));
    }
    let dump: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mut ports = BTreeMap::new();
    for config in dump["configs"].as_array().into_iter().flatten() {
        let cluster = &config["cluster"];
        let Some(name) = cluster["name"].as_str() else {
            continue;
        };
        let port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
            ["address"]["socket_address"]["port_value"]
            .as_u64();
        ports.insert(name.to_owned(), port);
    }
    for i in 0..STATIC_CLUSTERS {
        let want = port_of(i, state.generations[i]);
        let got = ports.get(&cluster_name(i)).copied().flatten();
        if got != Some(want) {
            return Err(format!("{}: port {got:?}, not {want}", cluster_name(i)));
        }
    }
    for i in 0..EDS_CLUSTERS {
        if !ports.contains_key(&eds_cluster_name(i)) {
            return Err(format!("{} missing", eds_cluster_name(i)));
        }
    }
    Ok(())
}

/// Runs the soak in `dir`; prints a line per sample as it goes.
pub async fn run(test: &str, envoy_bin: &Path, dir: &Path, config: SoakConfig) -> Report {
    eprintln!("{test}: {config:?} (seed {})", config.seed);
    let mut state = State {
        generations: vec![0; STATIC_CLUSTERS],
        version: 1,
    };
    let mut peer = start_control_plane(test, None, &state).await;
    let grpc = peer.grpc.clone();
    let max_body = MAX_BODY.to_string();
    let gateway = envoy::start_gateway(
        &peer.upstream(),
        config.refresh,
        &[
            "--max-body-bytes",
            &max_body,
            "--idle-timeout",
            IDLE_TIMEOUT,
            "--history-max-bytes",
            &HISTORY_MAX_BYTES.to_string(),
        ],
        false,
        dir,
    )
    .await;
    let (port, admin) = (gateway.port, gateway.admin);
    let mut gateway_guard = gateway.guard;
    let pid = gateway_guard.id();

    let mut envoys = Vec::new();
    for i in 0..config.envoys {
        let sub: PathBuf = dir.join(format!("envoy-{i:02}"));
        std::fs::create_dir_all(&sub).expect("an Envoy's directory");
        let node_id = format!("soak-{i:02}");
        let envoy_admin = free_port();
        let envoy = Envoy::start(
            envoy_bin,
            &sub,
            &bootstrap(&node_id, envoy_admin, port, config.refresh, i % 2 == 1),
        );
        envoys.push(SoakEnvoy {
            node: node_id,
            admin: envoy_admin,
            envoy,
        });
    }
    for e in &envoys {
        envoy::wait_admin(e.admin, "/ready", &e.node).await;
    }
    eprintln!("{test}: {} Envoys ready", envoys.len());

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let mut clients = Vec::new();
    let mut seeds = StdRng::seed_from_u64(config.seed);
    for k in 0..LONG_POLLERS {
        clients.push(tokio::spawn(long_poller(
            k,
            port,
            seeds.random(),
            stop.clone(),
            counts.clone(),
        )));
    }
    for k in 0..WATCHERS {
        clients.push(tokio::spawn(watcher(
            k,
            port,
            seeds.random(),
            stop.clone(),
            counts.clone(),
        )));
    }
    for _ in 0..GARBAGE {
        clients.push(tokio::spawn(garbage(
            port,
            seeds.random(),
            stop.clone(),
            counts.clone(),
        )));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut next_restart = config.restart_every;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = started.elapsed();
        if at >= config.duration {
            break;
        }
        gateway_guard.assert_running();
        for e in &mut envoys {
            e.envoy.assert_running();
        }
        if at >= next_restart {
            next_restart += config.restart_every;
            let was = Instant::now();
            drop(peer);
            peer = start_control_plane(test, Some(&grpc), &state).await;
            counts.restarts.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "{test}: {:>6.0?} control plane restarted in {:.1?}",
                at,
                was.elapsed()
            );
        } else {
            let i = (state.version as usize) % STATIC_CLUSTERS;
            state.generations[i] += 1;
            state.version += 1;
            peer.assert_running();
            peer.set_cluster(
                "*",
                &state.version(),
                static_cluster(i, state.generations[i]),
            )
            .await;
            counts.changes.fetch_add(1, Ordering::Relaxed);
        }
        if at >= next_sample {
            next_sample += config.sample_every;
            let s = sample(pid, admin, at).await;
            eprintln!(
                "{test}: {:>6.0?} rss {} KiB, history {} KiB, fds {}, threads {}, tasks {}, connections {}, watches {}, long polls {}, requests {}",
                s.at, s.rss_kib, s.history_kib, s.fds, s.threads, s.tasks, s.connections, s.watches, s.long_polls, s.requests
            );
            samples.push(s);
        }
    }

    // The churn stops; every Envoy must show the final state.
    stop.store(true, Ordering::Relaxed);
    let churn_ended = Instant::now();
    let mut not_converged = Vec::new();
    for e in &envoys {
        let deadline = churn_ended + CONVERGE_TIMEOUT;
        loop {
            match envoy_shows(e.admin, &state).await {
                Ok(()) => break,
                Err(why) if Instant::now() >= deadline => {
                    not_converged.push(format!("{}: {why}", e.node));
                    break;
                }
                Err(_) => tokio::time::sleep(envoy::POLL_INTERVAL).await,
            }
        }
    }
    let converged_in = not_converged.is_empty().then(|| churn_ended.elapsed());
    for client in clients {
        let _ = tokio::time::timeout(CLIENT_TIMEOUT * 2, client).await;
    }
    // Sockets of the churning clients close; the blocking pool's idle
    // threads end (10 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    gateway_guard.assert_running();
    let settled = sample(pid, admin, started.elapsed()).await;
    let mut envoy_failures_out = Vec::new();
    let mut envoy_failure_lines = Vec::new();
    for e in &envoys {
        let (failures, rejected) = envoy_failures(e.admin).await;
        envoy_failures_out.push((e.node.clone(), failures, rejected));
        envoy_failure_lines.extend(
            e.envoy
                .log_text()
                .lines()
                .filter(|l| l.contains("failed") || l.contains("timeout"))
                .map(|l| format!("{}: {l}", e.node)),
        );
    }
    envoy_failure_lines.sort();
    envoy_failure_lines.truncate(50);
    let gateway_statuses = gateway_statuses(admin).await;
    let gateway_5xx = gateway_statuses
        .iter()
        .filter(|(status, _)| status.starts_with('5'))
        .map(|(_, n)| n)
        .sum();
    drop(peer);
    Report {
        config,
        samples,
        settled,
        counts,
        envoy_failures: envoy_failures_out,
        gateway_5xx,
        gateway_statuses,
        converged_in,
        not_converged,
        envoy_failure_lines,
        final_version: state.version(),
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

impl Report {
    /// Samples from the end of warm-up on.
    fn after_warm_up(&self) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.at >= self.config.warm_up)
            .collect()
    }

    /// RSS at the end of warm-up (median of the first 5 samples after it)
    /// and at the end (median of the last 5).
    pub fn rss_warm_and_end(&self) -> (u64, u64) {
        let after = self.after_warm_up();
        let n = after.len().min(5);
        let warm = median(after.iter().take(n).map(|s| s.rss_kib).collect());
        let end = median(after.iter().rev().take(n).map(|s| s.rss_kib).collect());
        (warm, end)
    }

    /// The RSS rule for this run's length.
    pub fn rss_growth_max(&self) -> f64 {
        if self.config.duration >= FLATNESS_RUN {
            RSS_GROWTH_MAX
        } else {
            SHORT_RUN_RSS_GROWTH_MAX
        }
    }

    pub fn rss_growth(&self) -> f64 {
        let (warm, end) = self.rss_warm_and_end();
        end as f64 / warm.max(1) as f64 - 1.0
    }

    /// The warm level: per figure, the median of the first 5 samples after
    /// warm-up (one sample alone may fall on a control-plane restart, when
    /// the upstream streams and their tasks are being replaced).
    fn warm(&self) -> Option<Sample> {
        let after = self.after_warm_up();
        let first: Vec<&Sample> = after.iter().take(5).copied().collect();
        let at = first.first()?.at;
        let med = |f: &dyn Fn(&Sample) -> f64| -> f64 {
            let mut v: Vec<f64> = first.iter().map(|s| f(s)).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Some(Sample {
            at,
            rss_kib: med(&|s| s.rss_kib as f64) as u64,
            fds: med(&|s| s.fds as f64) as u64,
            threads: med(&|s| s.threads as f64) as u64,
            tasks: med(&|s| s.tasks),
            connections: med(&|s| s.connections),
            watches: med(&|s| s.watches),
            long_polls: med(&|s| s.long_polls),
            requests: med(&|s| s.requests),
            history_kib: med(&|s| s.history_kib as f64) as u64,
        })
    }

    /// Panics with every broken rule.
    pub fn check(&self) {
        let mut broken = Vec::new();
        let after = self.after_warm_up();
        if after.len() < 6 {
            broken.push(format!(
                "only {} samples after warm-up: run longer",
                after.len()
            ));
        }
        let growth = self.rss_growth();
        let growth_max = self.rss_growth_max();
        if growth >= growth_max {
            let (warm, end) = self.rss_warm_and_end();
            broken.push(format!(
                "RSS grew {:.1} % after warm-up ({warm} KiB -> {end} KiB; at most {:.0} % in a run of {:?})",
                growth * 100.0,
                growth_max * 100.0,
                self.config.duration
            ));
        }
        if let Some(over) = self
            .samples
            .iter()
            .find(|s| s.history_kib * 1024 > HISTORY_MAX_BYTES)
        {
            broken.push(format!(
                "the config history held {} KiB at {:?}, over --history-max-bytes {HISTORY_MAX_BYTES}",
                over.history_kib, over.at
            ));
        }
        if let Some(warm) = &self.warm() {
            if self.settled.fds as i64 > warm.fds as i64 + FD_SLACK {
                broken.push(format!(
                    "open file descriptors {} at the end, {} after warm-up",
                    self.settled.fds, warm.fds
                ));
            }
            if self.settled.threads as i64 > warm.threads as i64 + THREAD_SLACK {
                broken.push(format!(
                    "threads {} at the end, {} after warm-up",
                    self.settled.threads, warm.threads
                ));
            }
            // Tasks follow connections, the Envoys' and the churn's: with
            // the churn gone, no more than after warm-up.
            if self.settled.tasks > warm.tasks + TASK_SLACK {
                broken.push(format!(
                    "tokio tasks {} at the end, {} after warm-up",
                    self.settled.tasks, warm.tasks
                ));
            }
        }
        for (node, failures, rejected) in &self.envoy_failures {
            if *failures > 0 || *rejected > 0 {
                broken.push(format!(
                    "{node}: {failures} failed polls, {rejected} rejected updates"
                ));
            }
        }
        if self.gateway_5xx > 0.0 {
            broken.push(format!(
                "the gateway answered {} 5xx: {:?}",
                self.gateway_5xx, self.gateway_statuses
            ));
        }
        let c = &self.counts;
        let client_5xx = c.client_5xx.load(Ordering::Relaxed);
        if client_5xx > 0 {
            broken.push(format!("the soak's clients saw {client_5xx} 5xx"));
        }
        let wrong = c.wrong.lock().unwrap_or_else(|e| e.into_inner());
        if !wrong.is_empty() {
            broken.push(format!("wrong answers: {wrong:#?}"));
        }
        if c.restarts.load(Ordering::Relaxed) == 0 {
            broken.push("the control plane was never restarted: run longer".into());
        }
        if c.watch_events.load(Ordering::Relaxed) == 0
            || c.long_polls_200.load(Ordering::Relaxed) == 0
        {
            broken.push("watchers or long-pollers saw no change".into());
        }
        if !self.not_converged.is_empty() {
            broken.push(format!(
                "Envoys not on the final version ({}) within {CONVERGE_TIMEOUT:?}: {:?}",
                self.final_version, self.not_converged
            ));
        }
        assert!(broken.is_empty(), "soak failed:\n- {}", broken.join("\n- "));
    }

    /// The figures as Markdown (bench/RESULTS.md).
    pub fn markdown(&self) -> String {
        let c = &self.counts;
        let (warm, end) = self.rss_warm_and_end();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = format!(
            "{} s, {} Envoys, seed {}; warm-up {} s; control-plane restart every {} s\n\n",
            self.config.duration.as_secs(),
            self.config.envoys,
            self.config.seed,
            self.config.warm_up.as_secs(),
            self.config.restart_every.as_secs()
        );
        out += &format!(
            "- RSS {warm} KiB after warm-up, {end} KiB at the end: {:+.2} % (rule for this length: under {:.0} %); config history at most {} KiB of its {} KiB bound\n",
            self.rss_growth() * 100.0,
            self.rss_growth_max() * 100.0,
            self.samples.iter().map(|s| s.history_kib).max().unwrap_or(0),
            HISTORY_MAX_BYTES / 1024
        );
        if let Some(w) = self.warm() {
            out += &format!(
                "- after warm-up (medians of 5 samples) / settled at the end: fds {} / {}, threads {} / {}, tokio tasks {} / {}\n",
                w.fds, self.settled.fds, w.threads, self.settled.threads, w.tasks, self.settled.tasks
            );
        }
        let failures: u64 = self.envoy_failures.iter().map(|(_, f, _)| f).sum();
        let rejected: u64 = self.envoy_failures.iter().map(|(_, _, r)| r).sum();
        out += &format!(
            "- {} cluster changes, {} control-plane restarts; Envoys: {failures} failed polls, {rejected} rejected updates\n",
            load(&c.changes),
            load(&c.restarts)
        );
        out += &format!(
            "- gateway answers by status: {:?} (5xx: {})\n",
            self.gateway_statuses, self.gateway_5xx as u64
        );
        out += &format!(
            "- long polls {} ({} answered 200, {} abandoned mid-wait), watches {} ({} events), garbage {} ({} cut off while sending), client-seen 5xx {}\n",
            load(&c.long_polls),
            load(&c.long_polls_200),
            load(&c.long_polls_abandoned),
            load(&c.watches),
            load(&c.watch_events),
            load(&c.garbage),
            load(&c.garbage_cut),
            load(&c.client_5xx)
        );
        if !self.envoy_failure_lines.is_empty() {
            out += &format!(
                "- the Envoys' log lines about failed polls (first 50):\n\n```\n{}\n```\n",
                self.envoy_failure_lines.join("\n")
            );
        }
        out += &format!(
            "- every Envoy on the final version ({}): {}\n\n",
            self.final_version,
            match self.converged_in {
                Some(d) => format!("yes, {:.1?} after the churn stopped", d),
                None => format!("no: {:?}", self.not_converged),
            }
        );
        out += "| t (s) | RSS (KiB) | history (KiB) | fds | threads | tokio tasks | connections | watches | long polls held |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for s in &self.samples {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                s.at.as_secs(),
                s.rss_kib,
                s.history_kib,
                s.fds,
                s.threads,
                s.tasks,
                s.connections,
                s.watches,
                s.long_polls
            );
        }
        out += &format!(
            "| settled | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            self.settled.rss_kib,
            self.settled.history_kib,
            self.settled.fds,
            self.settled.threads,
            self.settled.tasks,
            self.settled.connections,
            self.settled.watches,
            self.settled.long_polls
        );
        out
    }
}
