//! Scale benchmark: what memory and update latency a capacity plan needs, at
//! 10,000 clusters (and as many EDS ClusterLoadAssignments) behind up to 100
//! node identities, against the release gateway binary (2 worker threads)
//! in front of the scripted ADS control plane.
//!
//! Memory: the gateway's resident set size after each step, and the growth
//! per resource, per distinct name set and per session (identity), each
//! identity sending Envoy 1.40's real 77 KB node. Update latency: from the
//! upstream's push of a CDS update in which 1 of the 10,000 clusters changed
//! to (a) a held long poll answering 200 and (b) the next poll after it
//! answering the new version, with 1 and with 100 identities subscribed.
//!
//! Run: `cargo bench --bench scale` (about 2 minutes). `SCALE_CLUSTERS`
//! (10000), `SCALE_IDENTITIES` (100) and `SCALE_ROUNDS` (10) shape it;
//! `XDS_GATEWAY_BIN` runs another build of the gateway (to compare two
//! commits back to back).
//! Loopback only; every wait is bounded.

#[path = "../tests/support/fake_ads.rs"]
mod fake_ads;

mod cds_fixtures;
mod gateway_process;

use cds_fixtures::{clusters, endpoints, env_number};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use xds_gateway::xds::{Codec, ResourceType};

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();
const WITHIN: Duration = Duration::from_secs(60);

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The captured Envoy 1.40 request with node id `node`, presenting
/// `version` for `type_url` and `names`.
fn body(
    template: &serde_json::Value,
    node: &str,
    type_url: &str,
    names: &[String],
    version: &str,
) -> Bytes {
    let mut v = template.clone();
    v["node"]["id"] = node.into();
    v["version_info"] = version.into();
    v["type_url"] = type_url.into();
    v["resource_names"] = names
        .iter()
        .map(|n| serde_json::Value::from(n.as_str()))
        .collect();
    Bytes::from(serde_json::to_vec(&v).expect("serialise"))
}

/// One POST: the status and the `versionInfo` of a 200 ("" otherwise).
async fn post(client: &HttpClient, addr: SocketAddr, path: &str, body: Bytes) -> (u16, String) {
    let req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let resp = tokio::time::timeout(WITHIN, client.request(req))
        .await
        .expect("an answer within a minute")
        .expect("the gateway answers");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    // The intake writes versionInfo first; reading only it keeps the
    // client's own cost out of the latency (a CDS answer is 3.7 MB).
    let version = if status == 200 {
        let text = std::str::from_utf8(&bytes[..bytes.len().min(512)]).unwrap_or_default();
        text.split_once("\"versionInfo\":\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(version, _)| version.to_owned())
            .expect("versionInfo at the start of the answer")
    } else {
        String::new()
    };
    (status, version)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn percentile(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    values[((values.len() as f64 * p) as usize).min(values.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_number("SCALE_CLUSTERS", 10_000);
    let identities = env_number("SCALE_IDENTITIES", 100).max(1);
    let rounds = env_number("SCALE_ROUNDS", 10).max(1);
    let codec = Codec::embedded();
    let template: serde_json::Value = serde_json::from_slice(
        &std::fs::read("bench/fixtures/envoy-1.40-cds-request.json").expect("captured request"),
    )
    .expect("JSON");
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "c0", clusters(&codec, n, 0));
    upstream.set(EDS, "e0", endpoints(&codec, n));

    let (port, admin) = (gateway_process::free_port(), gateway_process::free_port());
    let log = tempfile::NamedTempFile::new().expect("log file");
    let gateway = gateway_process::start_gateway(&upstream.url(), port, admin, log.path());
    gateway_process::wait_listening(port);
    let pid = gateway.0.id();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let settle = || tokio::time::sleep(Duration::from_secs(2));
    let node = |i: usize| format!("scale-node-{i}");

    println!(
        "gateway binary: {}",
        gateway_process::gateway_binary().display()
    );
    println!("{n} clusters and {n} ClusterLoadAssignments upstream; {identities} identities, each with Envoy 1.40's 77 KB node\n");
    println!("| step | gateway RSS | growth | per unit |");
    println!("|---|---|---|---|");
    settle().await;
    let idle = gateway_process::rss_bytes(pid);
    println!("| started, nothing polled | {} | | |", mib(idle));

    // One identity takes all clusters.
    let (status, _) = post(
        &client,
        addr,
        "/v3/discovery:clusters",
        body(&template, &node(0), CDS, &[], ""),
    )
    .await;
    assert_eq!(status, 200);
    settle().await;
    let one_cds = gateway_process::rss_bytes(pid);
    println!(
        "| identity 0: CDS, {n} clusters | {} | {} | {:.0} bytes per cluster |",
        mib(one_cds),
        mib(one_cds.saturating_sub(idle)),
        one_cds.saturating_sub(idle) as f64 / n as f64
    );

    // The same identity polls EDS cluster by cluster, as Envoy does: one
    // name set per cluster.
    let started = Instant::now();
    let upstream_requests = upstream.requests().len();
    let mut pending = Vec::new();
    for i in 0..n {
        let (client, b) = (
            client.clone(),
            body(&template, &node(0), EDS, &[format!("cluster-{i}")], ""),
        );
        pending.push(tokio::spawn(async move {
            post(&client, addr, "/v3/discovery:endpoints", b).await.0
        }));
        if pending.len() == 64 {
            for p in pending.drain(..) {
                assert_eq!(p.await.expect("poll"), 200);
            }
        }
    }
    for p in pending {
        assert_eq!(p.await.expect("poll"), 200);
    }
    let eds_took = started.elapsed();
    let upstream_requests = upstream.requests().len() - upstream_requests;
    settle().await;
    let one_eds = gateway_process::rss_bytes(pid);
    println!(
        "| identity 0: EDS, {n} polls of one cluster each, 64 at a time ({:.1} s, {upstream_requests} requests upstream) | {} | {} | {:.0} bytes per ClusterLoadAssignment and name set |",
        eds_took.as_secs_f64(),
        mib(one_eds),
        mib(one_eds.saturating_sub(one_cds)),
        one_eds.saturating_sub(one_cds) as f64 / n as f64
    );

    // More identities, CDS only.
    for i in 1..identities {
        let (status, _) = post(
            &client,
            addr,
            "/v3/discovery:clusters",
            body(&template, &node(i), CDS, &[], ""),
        )
        .await;
        assert_eq!(status, 200, "identity {i}");
    }
    settle().await;
    let all = gateway_process::rss_bytes(pid);
    println!(
        "| {} more identities: CDS, {n} clusters each | {} | {} | {} per identity |",
        identities - 1,
        mib(all),
        mib(all.saturating_sub(one_eds)),
        mib(all.saturating_sub(one_eds) / (identities as u64 - 1).max(1)),
    );

    // Update latency: one cluster of n changes upstream.
    println!("\n| update latency, 1 of {n} clusters changed, {identities} identities subscribed | p50 | max |");
    println!("|---|---|---|");
    let (mut held, mut next) = (Vec::new(), Vec::new());
    let (_, mut current) = post(
        &client,
        addr,
        "/v3/discovery:clusters",
        body(&template, &node(0), CDS, &[], ""),
    )
    .await;
    for round in 1..=rounds {
        // (a) a long poll held at the current version.
        let long_poll = {
            let (client, b) = (
                client.clone(),
                body(&template, &node(0), CDS, &[], &current),
            );
            tokio::spawn(
                async move { post(&client, addr, "/v3/discovery:clusters?wait=50s", b).await },
            )
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pushed = Instant::now();
        upstream.set(
            CDS,
            &format!("c{}", 2 * round - 1),
            clusters(&codec, n, 2 * round - 1),
        );
        let (status, version) = long_poll.await.expect("long poll");
        held.push(pushed.elapsed());
        assert_eq!(status, 200, "the held poll answers the change");
        assert_ne!(version, current);
        current = version;
        tokio::time::sleep(Duration::from_millis(300)).await;

        // (b) polls in a loop until the next change is served.
        let pushed = Instant::now();
        upstream.set(
            CDS,
            &format!("c{}", 2 * round),
            clusters(&codec, n, 2 * round),
        );
        loop {
            let (status, version) = post(
                &client,
                addr,
                "/v3/discovery:clusters",
                body(&template, &node(0), CDS, &[], &current),
            )
            .await;
            if status == 200 && version != current {
                next.push(pushed.elapsed());
                current = version;
                break;
            }
            assert!(pushed.elapsed() < WITHIN, "the change was never served");
        }
    }
    for (case, values) in [
        ("held long poll answers", &mut held),
        ("next poll serves it", &mut next),
    ] {
        let p50 = percentile(values, 0.5);
        let max = percentile(values, 1.0);
        println!(
            "| {case} | {:.1} ms | {:.1} ms |",
            p50.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    drop(gateway);
}
