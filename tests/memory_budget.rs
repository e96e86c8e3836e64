//! One memory budget (`--memory-budget-bytes`) every kind of state clients
//! make the gateway hold sits inside: the gateway binary, given a budget,
//! is filled with all of them at once, as a client that can reach the REST
//! port could, and its peak resident memory (`VmHWM`) stays under the
//! budget.
//!
//! At once, against the scripted control plane serving ~3 MB of clusters
//! (and pushing a new version every few hundred milliseconds, which every
//! session records in the config history):
//! - sessions: POSTs with ~900 KB nodes, each its own identity (the
//!   sessions' nodes, the parsed-request memo and its interned nodes, the
//!   client book);
//! - renditions: YAML of distinct selections of ~1,000 clusters each (the
//!   renditions memo and the body memo);
//! - many small clients (the client book).
//!
//! Refusals are the bounds working (503 past the sessions' shares: their
//! nodes, and the upstream answers their streams would hold at once): the
//! test counts them and requires some 200s of every kind.
//!
//! What it leaves out: the default budget read from a cgroup (the test
//! machine's limit is not the test's to set; `crates/config/src/memory.rs` tests
//! the reading), watches and long polls (bounded by count, not bytes), and
//! the per-type streams of `--upstream-streams per-type` (a session then
//! holds up to one answer per type at once, and is weighed as one).

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use fake_ads::FakeAds;
use gateway::Gateway;

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const BUDGET: u64 = 256 << 20;
const CLUSTERS: usize = 3_000;
const BIG_SESSIONS: usize = 120;
const NODE_PAD: usize = 900_000;
const RENDITIONS: usize = 60;
const SMALL_CLIENTS: usize = 400;

/// `CLUSTERS` clusters of ~1 KB, `changed` the version one of them says.
fn clusters(changed: usize) -> Vec<Any> {
    let codec = xds_gateway::xds::Codec::embedded();
    let padding = "x".repeat(900);
    (0..CLUSTERS)
        .map(|i| {
            let text = if i == changed % CLUSTERS {
                format!("{padding}{changed}")
            } else {
                padding.clone()
            };
            let json = format!(
                r#"{{"@type":"{CDS}","name":"cluster-{i}","connect_timeout":"1s",
                "metadata":{{"filter_metadata":{{"pad":{{"text":"{text}"}}}}}}}}"#
            );
            let any = codec.parse_any(json.as_bytes()).expect("fixture");
            Any {
                type_url: any.type_url,
                value: any.value,
            }
        })
        .collect()
}

/// The peak resident set of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

async fn exchange(port: u16, method: http::Method, path: &str, body: String) -> u16 {
    let headers: &[(&str, &str)] = &[("content-type", "application/json")];
    match tokio::time::timeout(
        Duration::from_secs(60),
        process::http_exchange(port, method, path, headers, bytes::Bytes::from(body)),
    )
    .await
    {
        Ok(Ok((status, _, _))) => status,
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_state_at_once_stays_under_the_memory_budget() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "v0", clusters(0));
    let budget = BUDGET.to_string();
    let gw = Gateway::start(&upstream.url(), &["--memory-budget-bytes", &budget]).await;
    let port = gw.port;

    // The control plane keeps changing: every session records each version.
    let pushing = Arc::new(AtomicBool::new(true));
    let pusher = {
        let (pushing, upstream) = (pushing.clone(), Arc::new(upstream));
        let fake = upstream.clone();
        let task = tokio::spawn(async move {
            let mut version = 1;
            while pushing.load(Ordering::Relaxed) {
                fake.set(CDS, &format!("v{version}"), clusters(version));
                version += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        (task, upstream)
    };

    let pad = "p".repeat(NODE_PAD);
    let sessions = async {
        let mut statuses = Vec::new();
        for i in 0..BIG_SESSIONS {
            let body = format!(
                r#"{{"node":{{"id":"big-{i}","metadata":{{"pad":"{pad}"}}}},"resource_names":["cluster-{i}"]}}"#
            );
            statuses.push(exchange(port, http::Method::POST, "/v3/discovery:clusters", body).await);
        }
        statuses
    };
    let renditions = async {
        let mut statuses = Vec::new();
        for i in 0..RENDITIONS {
            let names: Vec<String> = (0..1_000)
                .map(|j| format!("cluster-{}", (i * 37 + j) % CLUSTERS))
                .collect();
            let body = format!(
                r#"{{"node":{{"id":"render"}},"resource_names":{}}}"#,
                serde_json::to_string(&names).expect("names")
            );
            let path = "/v3/discovery:clusters?format=yaml";
            statuses.push(exchange(port, http::Method::POST, path, body).await);
        }
        statuses
    };
    let small = async {
        let mut statuses = Vec::new();
        for i in 0..SMALL_CLIENTS {
            let body = format!(r#"{{"node":{{"id":"render","cluster":"c{i}"}}}}"#);
            statuses.push(exchange(port, http::Method::POST, "/v3/discovery:clusters", body).await);
        }
        statuses
    };
    let (sessions, renditions, small) = tokio::join!(sessions, renditions, small);
    pushing.store(false, Ordering::Relaxed);
    let (task, _upstream) = pusher;
    let _ = task.await;

    let count = |statuses: &[u16], status: u16| statuses.iter().filter(|s| **s == status).count();
    let peak = peak_rss(gw.pid());
    eprintln!(
        "big sessions: {} answered 200, {} refused 503; renditions: {} of {}; small clients: {} of \
         {}; peak RSS {} MiB of a {} MiB budget",
        count(&sessions, 200),
        count(&sessions, 503),
        count(&renditions, 200),
        RENDITIONS,
        count(&small, 200),
        SMALL_CLIENTS,
        peak >> 20,
        BUDGET >> 20
    );
    for (what, statuses) in [
        ("big sessions", &sessions),
        ("renditions", &renditions),
        ("small clients", &small),
    ] {
        assert!(count(statuses, 200) > 0, "{what}: {statuses:?}");
        assert!(
            statuses.iter().all(|s| matches!(s, 200 | 503)),
            "{what}: only 200 and the bound's 503: {statuses:?}"
        );
    }
    assert!(
        peak <= BUDGET,
        "peak RSS {} MiB over the {} MiB budget",
        peak >> 20,
        BUDGET >> 20
    );
}

/// A session is admitted only while every session's stream could hold the
/// upstream's largest answer at once within the answers' share of the
/// budget: past it, a 503 in `google.rpc.Status` shape that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_admitted_while_their_answers_fit_the_budget() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "v0", clusters(0));
    let config = xds_gateway::config::Config {
        upstream: Some(upstream.url()),
        memory_budget_bytes: 128 << 20,
        ..Default::default()
    }
    .validate()
    .expect("a valid config");
    let share = config.memory.answers;
    let gw = inproc::InProcess::start(config).await;
    let mut answered = 0;
    let refusal = loop {
        let body = format!(r#"{{"node":{{"id":"n{answered}"}}}}"#);
        let (status, _, body) = process::http_exchange(
            gw.rest_port,
            http::Method::POST,
            "/v3/discovery:clusters",
            &[("content-type", "application/json")],
            bytes::Bytes::from(body),
        )
        .await
        .expect("an answer");
        if status != 200 {
            assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
            break serde_json::from_slice::<serde_json::Value>(&body).expect("JSON");
        }
        answered += 1;
        assert!(answered < 100, "no bound: {answered} sessions answered");
    };
    // Each answer is about 3 MB: the share holds that many streams' worth.
    let answer = upstream.responses()[0].names.len() as u64 * 1_000;
    assert!(answered >= 1, "the first session fits");
    assert!(
        (answered as u64) * answer <= share,
        "{answered} sessions of ~{answer}-byte answers within a share of {share}"
    );
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(message.contains("largest answer"), "{refusal}");
    assert_eq!(refusal["code"], 14, "{refusal}");
    gw.stop().await;
}
