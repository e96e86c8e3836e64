//! What the store's memo of merged states (`Routes::merges`, in
//! `federation.rs`) earns. A poll naming clusters of two upstreams is
//! answered from the union of both parts' states; the memo keeps that union
//! per pair of part states, so the next poll of the same parts gets the
//! same state, and with it the answers memo's body and selection digest.
//!
//! Cases, each a poll through the sessions of two upstreams (the store's
//! poll, then the state's answer, as the REST face makes them), answered
//! 304 (the client presents the version it holds) and 200 (it presents
//! none):
//! - across both upstreams, the memo holding the merge from the poll before;
//! - across both upstreams, the memo emptied before each poll: the parts
//!   merged into a new state and its answer worked out again, which is what
//!   every poll would cost without the memo;
//! - the floor: the same number of clusters of one upstream, which the
//!   store hands to that upstream's sessions untouched.
//!
//! Both upstreams are scripted feeders in this process (the store's
//! `Script`, as the REST face's own tests use), each holding
//! `FEDERATION_CLUSTERS` clusters (default 1,000; every one is named by
//! the poll). Rounds alternate the cases; medians and the spread of the
//! rounds' medians.
//!
//! Emptying the memo is measured apart and taken out of the ratios.
//!
//! Run: `cargo bench --bench federation` (`FEDERATION_ROUNDS`, default 7).
//! Without `--bench` (under `cargo test --all-targets`) a smoke run: 20
//! clusters, one round.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};
use xds_gateway::config::{Config, SessionKey};
use xds_gateway::xds::{Codec, ResourceType};
use xds_gateway_cache::{Answer, Assembler, Intake, ParsedRequest, ParsedRequests};
use xds_gateway_metrics::Metrics;
use xds_gateway_observe::ConfigHistory;
use xds_gateway_store::{Namespace, Script, Sessions, Source, UpstreamSlot};

const CDS: ResourceType = ResourceType::Clusters;
const EDGE: &str = "edge.example";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cluster(name: &str) -> Value {
    json!({"@type": CDS.type_url(), "name": name, "type": "EDS",
           "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
           "connect_timeout": "1s"})
}

fn edge_name(i: usize) -> String {
    format!("xdstp://{EDGE}/envoy.config.cluster.v3.Cluster/edge-{i}")
}

/// A poll body of node `bench` naming `names`.
fn request(parsed: &ParsedRequests, names: &[String]) -> Arc<ParsedRequest> {
    let body = json!({"node": {"id": "bench", "cluster": "bench"},
                      "type_url": CDS.type_url(), "resource_names": names});
    parsed
        .parse(Bytes::from(body.to_string()))
        .expect("the poll parses")
}

/// An upstream scripted to serve `names`.
async fn upstream(intake: &Intake, names: &[String]) -> Arc<Script> {
    let script = Script::new(intake.clone());
    let resources: Vec<Value> = names.iter().map(|n| cluster(n)).collect();
    script.set(CDS, "1", &resources).await;
    script
}

/// Sessions of the upstreams "mesh" (the default) and "edge" (claiming
/// [`EDGE`]), fed by `mesh` and `edge`.
fn federated(intake: &Intake, mesh: &Arc<Script>, edge: &Arc<Script>) -> Arc<Sessions> {
    let slot = |name: &str, script: &Arc<Script>| UpstreamSlot {
        name: name.to_owned(),
        feeder: Arc::new(script.feeder()),
    };
    let claims = BTreeMap::from([(EDGE.to_owned(), "edge".to_owned())]);
    Sessions::federated(
        vec![slot("mesh", mesh), slot("edge", edge)],
        Namespace::new(claims, "mesh", "mesh"),
        intake.clone(),
        ConfigHistory::default(),
        Arc::new(Metrics::new()),
        &Config::default(),
    )
}

/// One poll through `federation` and its answer: a 304 when `presented` is
/// the version the poll is served, else the body's length.
async fn poll(
    federation: &Sessions,
    assembler: &Assembler,
    request: &ParsedRequest,
    presented: &str,
) -> (String, usize) {
    let polled = federation
        .poll(CDS, request, None)
        .await
        .expect("the poll is answered");
    let answer = polled
        .state()
        .answer(assembler, request.names(), presented, None)
        .expect("the state answers");
    match answer {
        Answer::Body { json, version, .. } => (version, json.len()),
        Answer::NotModified { version } => (version, 0),
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Allocates as the gateway binary does (mimalloc), so the figures are the
/// shipped allocator's: glibc's malloc adds heap consolidation work that
/// follows this bench's own allocation pattern, not the gateway's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let clusters = if full {
        env_or("FEDERATION_CLUSTERS", 1_000)
    } else {
        20
    };
    let rounds = if full {
        env_or("FEDERATION_ROUNDS", 7)
    } else {
        1
    };
    let polls = if full { 200 } else { 2 };
    let intake = Intake::new(Codec::embedded());
    let assembler = Assembler::new(intake.codec().clone());
    let mesh_names: Vec<String> = (0..clusters).map(|i| format!("mesh-{i}")).collect();
    let edge_names: Vec<String> = (0..clusters).map(edge_name).collect();
    let (mesh, edge) = (
        upstream(&intake, &mesh_names).await,
        upstream(&intake, &edge_names).await,
    );
    // The memo is emptied in sessions of their own, so that emptying it
    // never touches the memo the "kept" cases read.
    let kept = federated(&intake, &mesh, &edge);
    let emptied = federated(&intake, &mesh, &edge);
    let parsed = ParsedRequests::new(SessionKey::Node);
    let half = clusters / 2;
    let across: Vec<String> = mesh_names[..half]
        .iter()
        .chain(&edge_names[..clusters - half])
        .cloned()
        .collect();
    let across = request(&parsed, &across);
    let one = request(&parsed, &mesh_names);
    let (across_version, across_len) = poll(&kept, &assembler, &across, "").await;
    let (one_version, one_len) = poll(&kept, &assembler, &one, "").await;
    assert!(across_len > 0 && one_len > 0, "both polls are answered");
    emptied.forget_merges();
    assert_eq!(
        poll(&emptied, &assembler, &across, "").await.0,
        across_version,
        "a merge made again serves the same version"
    );
    println!(
        "federation bench ({}): {clusters} clusters named per poll (half of each upstream, or all of one); \
         {rounds} rounds x {polls} polls per case",
        if full { "bench" } else { "smoke test" }
    );

    type Case = (&'static str, bool, bool, bool);
    // (label, across both upstreams, the memo emptied per poll, answered 304)
    let cases: [Case; 6] = [
        ("across both, memo kept, 304", true, false, true),
        ("across both, memo emptied per poll, 304", true, true, true),
        ("one upstream (floor), 304", false, false, true),
        ("across both, memo kept, 200", true, false, false),
        ("across both, memo emptied per poll, 200", true, true, false),
        ("one upstream (floor), 200", false, false, false),
    ];
    let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for step in 0..cases.len() {
            let index = (step + round) % cases.len();
            let (_, is_across, fresh, not_modified) = cases[index];
            let (request, version) = if is_across {
                (&across, &across_version)
            } else {
                (&one, &one_version)
            };
            let presented = if not_modified { version.as_str() } else { "" };
            let started = Instant::now();
            for _ in 0..polls {
                let sessions = if fresh {
                    emptied.forget_merges();
                    &emptied
                } else {
                    &kept
                };
                let answered = poll(sessions, &assembler, request, presented).await;
                assert_eq!(&answered.0, version, "the same version each poll");
                assert_eq!(answered.1 == 0, not_modified, "{}", cases[index].0);
            }
            per_round[index].push(started.elapsed().as_secs_f64() / polls as f64);
        }
    }
    // What emptying the memo alone costs (part of each poll of the
    // "emptied" cases, and no part of a poll without the memo).
    let started = Instant::now();
    for _ in 0..polls {
        emptied.forget_merges();
    }
    let building = started.elapsed().as_secs_f64() / polls as f64;
    let show = |secs: f64| format!("{:.1} µs", secs * 1e6);
    println!("\n| case | median per poll | rounds' range |");
    println!("|---|---|---|");
    let mut medians = Vec::new();
    for ((label, ..), samples) in cases.iter().zip(per_round.iter_mut()) {
        let m = median(samples);
        let (lo, hi) = (samples[0], samples[samples.len() - 1]);
        println!("| {label} | {} | {}–{} |", show(m), show(lo), show(hi));
        medians.push(m);
    }
    println!("\nemptying the memo alone: {}", show(building));
    println!(
        "without the memo a poll across both costs {:.1}x (304) and {:.1}x (200) what it costs with it; \
         with it, {:.2}x (304) and {:.2}x (200) the floor's",
        (medians[1] - building) / medians[0],
        (medians[4] - building) / medians[3],
        medians[0] / medians[2],
        medians[3] / medians[5]
    );
}
