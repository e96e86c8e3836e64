//! Gateway load benchmark: the cache-hit path under load with the real 77 KB
//! Envoy 1.40 request body, against a minimal hyper server that reads the same
//! body and returns the same bytes, measured in the same run.
//!
//! Cases: CDS of 1,000 clusters (wildcard) and EDS of one cluster (named).
//! Then fan-in: many pollers of one node identity while the upstream changes
//! once a second: client polls per second against upstream messages.
//!
//! Run: `cargo bench --bench gateway` (about a minute). Loopback only; every
//! loop is bounded in time.

#[path = "../tests/support/fake_ads.rs"]
mod fake_ads;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use envoy_types::pb::google::protobuf::Any as PbAny;
use xds_gateway::config::Config;
use xds_gateway::xds::Codec;

const CONCURRENCY: usize = 16;
const RUN: Duration = Duration::from_secs(6);
const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const EDS: &str = xds_gateway::xds::ResourceType::Endpoints.type_url();

fn any(codec: &Codec, json: &str) -> PbAny {
    let a = codec.parse_any(json.as_bytes()).expect("fixture parses");
    PbAny {
        type_url: a.type_url,
        value: a.value,
    }
}

fn clusters(codec: &Codec, n: usize) -> Vec<PbAny> {
    (0..n)
        .map(|i| {
            any(
                codec,
                &format!(
                    r#"{{"@type":"{CDS}","name":"cluster-{i}","type":"EDS","connect_timeout":"1s",
                "eds_cluster_config":{{"eds_config":{{"ads":{{}},"resource_api_version":"V3"}}}},
                "circuit_breakers":{{"thresholds":[{{"max_connections":{i}}}]}}}}"#
                ),
            )
        })
        .collect()
}

fn endpoints(codec: &Codec, version: usize) -> Vec<PbAny> {
    vec![any(
        codec,
        &format!(
            r#"{{"@type":"{EDS}","cluster_name":"cluster-0","endpoints":[{{"lb_endpoints":[
            {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{}}}}}}}}}]}}]}}"#,
            10000 + version
        ),
    )]
}

/// The captured Envoy request, re-targeted: empty version (a 200 every time),
/// the given type and names, the real 77 KB node.
fn request_body(type_url: &str, names: &[&str]) -> Bytes {
    let raw = std::fs::read("bench/fixtures/envoy-1.40-cds-request.json")
        .expect("captured Envoy request");
    let mut v: serde_json::Value = serde_json::from_slice(&raw).expect("captured request is JSON");
    v["version_info"] = "".into();
    v["type_url"] = type_url.into();
    v["resource_names"] = names.iter().map(|n| serde_json::Value::from(*n)).collect();
    Bytes::from(serde_json::to_vec(&v).expect("serialise"))
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// One POST; a transport error is status 0 (counted, never a panic).
async fn post(client: &HttpClient, addr: SocketAddr, path: &str, body: Bytes) -> (u16, Bytes) {
    let req = Request::post(format!("http://{addr}{path}"))
        .header("host", "xds_cluster")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let Ok(resp) = client.request(req).await else {
        return (0, Bytes::new());
    };
    let status = resp.status().as_u16();
    match resp.into_body().collect().await {
        Ok(body) => (status, body.to_bytes()),
        Err(_) => (0, Bytes::new()),
    }
}

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// CONCURRENCY workers posting `body` for RUN; every answer must be 200.
async fn load(addr: SocketAddr, path: &'static str, body: Bytes) -> Figures {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let deadline = Instant::now() + RUN;
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (client, body) = (client.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let start = Instant::now();
                let (status, _) = post(&client, addr, path, body.clone()).await;
                assert_eq!(status, 200);
                latencies.push(start.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.expect("worker"));
    }
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Figures {
        rps: all.len() as f64 / RUN.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

/// Minimal hyper server: reads the whole body, answers `answer`.
async fn baseline_server(answer: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(answer))
                                .expect("response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn start_gateway(upstream: String) -> (SocketAddr, SocketAddr) {
    let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addrs = (
        rest.local_addr().expect("addr"),
        admin.local_addr().expect("addr"),
    );
    let config = Config {
        upstream: Some(upstream),
        ..Config::default()
    }
    .validate()
    .expect("config");
    tokio::spawn(xds_gateway::app::run(
        config,
        rest,
        admin,
        std::future::pending(),
    ));
    addrs
}

fn row(case: &str, gw: &Figures, base: &Figures) {
    println!(
        "| {case} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} % |",
        gw.rps,
        gw.p50.as_secs_f64() * 1e3,
        gw.p99.as_secs_f64() * 1e3,
        base.rps,
        base.p50.as_secs_f64() * 1e3,
        base.p99.as_secs_f64() * 1e3,
        100.0 * gw.rps / base.rps
    );
}

#[tokio::main]
async fn main() {
    let codec = Codec::embedded();
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "c1", clusters(&codec, 1000));
    upstream.set(EDS, "e1", endpoints(&codec, 1));
    let (gateway, admin) = start_gateway(upstream.url()).await;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let cds_body = request_body(CDS, &[]);
    let eds_body = request_body(EDS, &["cluster-0"]);
    println!("request body: {} bytes (Envoy 1.40 node)", cds_body.len());
    let (status, cds_answer) =
        post(&client, gateway, "/v3/discovery:clusters", cds_body.clone()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&cds_answer));
    let (status, eds_answer) = post(
        &client,
        gateway,
        "/v3/discovery:endpoints",
        eds_body.clone(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&eds_answer));
    println!(
        "CDS response: {} bytes; EDS response: {} bytes",
        cds_answer.len(),
        eds_answer.len()
    );

    println!("\n| case | gateway req/s | p50 ms | p99 ms | baseline req/s | p50 ms | p99 ms | gateway/baseline |");
    println!("|---|---|---|---|---|---|---|---|");
    for (case, path, body, answer) in [
        (
            "CDS 1,000 clusters",
            "/v3/discovery:clusters",
            cds_body.clone(),
            cds_answer,
        ),
        (
            "EDS 1 cluster",
            "/v3/discovery:endpoints",
            eds_body.clone(),
            eds_answer,
        ),
    ] {
        let base_addr = baseline_server(answer).await;
        let base = load(base_addr, path, body.clone()).await;
        let gw = load(gateway, path, body).await;
        row(case, &gw, &base);
    }

    // Fan-in: 1,000 pollers of one identity (the same node), EDS, while the
    // upstream changes once a second.
    let before = upstream.requests().len();
    let streams_before = upstream.streams_opened();
    let deadline = Instant::now() + RUN;
    let changer = {
        let codec = codec.clone();
        let upstream = Arc::new(upstream);
        let u = upstream.clone();
        (
            tokio::spawn(async move {
                let mut v = 2;
                while Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    u.set(EDS, &format!("e{v}"), endpoints(&codec, v));
                    v += 1;
                }
            }),
            upstream,
        )
    };
    let mut pollers = Vec::new();
    for _ in 0..1000 {
        let (client, body) = (client.clone(), eds_body.clone());
        pollers.push(tokio::spawn(async move {
            let (mut polls, mut failed) = (0u64, 0u64);
            while Instant::now() < deadline {
                let (status, _) =
                    post(&client, gateway, "/v3/discovery:endpoints", body.clone()).await;
                polls += 1;
                failed += u64::from(status != 200);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (polls, failed)
        }));
    }
    let (mut polls, mut failed) = (0, 0);
    for p in pollers {
        let (n, f) = p.await.expect("poller");
        polls += n;
        failed += f;
    }
    let _ = changer.0.await;
    let upstream = changer.1;
    let upstream_msgs = upstream.requests().len() - before;
    let (_, metrics) = {
        let req = Request::get(format!("http://{admin}/metrics"))
            .body(Full::new(Bytes::new()))
            .expect("req");
        let resp = client.request(req).await.expect("metrics");
        (
            0,
            resp.into_body().collect().await.expect("body").to_bytes(),
        )
    };
    let hits: f64 = String::from_utf8_lossy(&metrics)
        .lines()
        .filter(|l| l.starts_with("xds_gateway_cache_hits_total{type=\"endpoints\"}"))
        .filter_map(|l| l.rsplit(" ").next()?.parse::<f64>().ok())
        .sum();
    println!(
        "\nfan-in, 1,000 pollers of one identity for {:?}: {} polls ({:.0}/s, {failed} not 200); upstream streams opened {}; gateway→upstream requests (ACKs) {} ({:.1}/s); cache hits (endpoints, whole run) {hits}",
        RUN,
        polls,
        polls as f64 / RUN.as_secs_f64(),
        upstream.streams_opened() - streams_before,
        upstream_msgs,
        upstream_msgs as f64 / RUN.as_secs_f64(),
    );
}
