//! Gateway load benchmark: the cache-hit path under load with the real 77 KB
//! Envoy 1.40 request body, against a minimal hyper server that reads the same
//! body and returns the same bytes, measured in the same run.
//!
//! 1. **External** (the result): `wrk` (one thread, 16 keep-alive
//!    connections) against the gateway binary and against the baseline
//!    server, each its own process on 2 worker threads, alternating, for
//!    several rounds; medians and spread. Cases: CDS of 1,000 clusters
//!    (wildcard) and EDS of one cluster (named), each answered 200 (empty
//!    version presented) and 304 (the current version presented).
//! 2. **In process** (quick iterations): the same two 200 cases with a hyper
//!    client in this process; it reads higher than the external figure,
//!    because client and server share the allocator and scheduler.
//! 3. **Per poll** (issue 41, `bench/per_poll.rs`): the CPU per request of
//!    the gateway process and of the floor process (the same baseline
//!    server, which speaks HTTP/1.1 and h2c as the gateway does) for EDS of
//!    one cluster answered 200 and 304, over HTTP/1.1 keep-alive (`wrk`)
//!    and over HTTP/2 with many streams per connection (`h2load`),
//!    alternating, for several rounds: absolute µs per poll and the ratio.
//!    With `XDS_GATEWAY_BASELINE_BIN`, another build's gateway takes its
//!    turn in the same rounds, against the same floor.
//! 4. **Instructions per poll** (`bench/instructions.rs`, only when asked:
//!    `GATEWAY_BENCH=instructions`): the per-poll cases under callgrind,
//!    user-space instructions per poll of the gateway and of the floor over
//!    `GATEWAY_POLLS` (2,000) identical polls: repeatable on a loaded
//!    machine, kernel time not counted. Needs `valgrind`.
//! 5. **Fan-in**: many pollers of one node identity while the upstream
//!    changes once a second: client polls per second against upstream
//!    messages.
//!
//! Run: `cargo bench --bench gateway` (about 8 minutes). Needs `wrk` and
//! `h2load`: `apt-get install wrk nghttp2-client`; the parts that use them
//! panic if they are missing. `GATEWAY_BENCH=external|perpoll|instructions|inprocess|fanin`
//! runs one part; `GATEWAY_ROUNDS` (5) and `GATEWAY_SECONDS` (5) shape the
//! external and per-poll parts. Loopback only; every loop and every child is
//! bounded in time.

#[path = "../tests/support/fake_ads.rs"]
mod fake_ads;

mod external;
mod gateway_process;
mod instructions;
mod per_poll;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
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
        .map(|i| any(codec, &external::cluster(i).to_string()))
        .collect()
}

fn endpoints(codec: &Codec, version: usize) -> Vec<PbAny> {
    vec![any(
        codec,
        &external::endpoints(10_000 + version as u32).to_string(),
    )]
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

/// The baseline server of [`external::serve_fixed`], in this process.
async fn baseline_server(answer: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(external::serve_fixed(
        listener,
        hyper::StatusCode::OK,
        answer,
    ));
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

fn main() {
    if external::raw_server_main() {
        return;
    }
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(bench());
}

/// Which parts run (`GATEWAY_BENCH`; all but `instructions` by default).
fn part(name: &str) -> bool {
    std::env::var("GATEWAY_BENCH").map_or(name != "instructions", |p| p == name)
}

/// The `versionInfo` of a JSON answer.
fn version_of(answer: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(answer).expect("JSON answer");
    v["versionInfo"].as_str().expect("versionInfo").to_owned()
}

/// One external case: what is posted where, and what the baseline answers.
struct Case {
    name: &'static str,
    path: &'static str,
    body: Bytes,
    status: u16,
    answer: Bytes,
}

/// Runs every case against the gateway process at `gateway` and against a
/// baseline process of its own, alternating, and prints medians.
fn external_part(gateway: u16, gateway_pid: u32, cases: &[Case]) {
    let rounds = external::env_number("GATEWAY_ROUNDS", 5).max(1);
    let seconds = external::env_number("GATEWAY_SECONDS", 5).max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "\n## External: wrk -t1 -c16, {rounds} rounds of {seconds}s per server, medians (min-max)\n"
    );
    println!("| case | gateway req/s | p50 / p99 ms | gateway CPU per request | baseline req/s | p50 / p99 ms | gateway/baseline |");
    println!("|---|---|---|---|---|---|---|");
    for (i, case) in cases.iter().enumerate() {
        let port = gateway_process::free_port();
        let _baseline = external::start_raw_server(dir.path(), port, case.status, &case.answer);
        gateway_process::wait_listening(port);
        let script = external::script(dir.path(), &format!("case-{i}"), &case.body);
        let target = |port: u16, pids: Vec<u32>| external::Target {
            script: script.clone(),
            url: format!("http://127.0.0.1:{port}{}", case.path),
            pids,
        };
        let [base, gw] = external::alternate(
            [&target(port, vec![]), &target(gateway, vec![gateway_pid])],
            rounds,
            seconds,
        );
        let latency = |m: &external::Measured| {
            let (p50, p99) = m.latency_ms();
            format!("{p50:.2} / {p99:.2}")
        };
        println!(
            "| {} | {} | {} | {:.0} µs | {} | {} | {:.2} |",
            case.name,
            gw.rps_text(),
            latency(&gw),
            gw.cpu(0),
            base.rps_text(),
            latency(&base),
            gw.rps() / base.rps()
        );
    }
}

async fn bench() {
    let codec = Codec::embedded();
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "c1", clusters(&codec, 1000));
    upstream.set(EDS, "e1", endpoints(&codec, 1));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let cds_body = external::request_body(CDS, &[]);
    let eds_body = external::request_body(EDS, &["cluster-0"]);
    println!("request body: {} bytes (Envoy 1.40 node)", cds_body.len());

    if part("external") || part("perpoll") || part("instructions") {
        let (port, admin) = (gateway_process::free_port(), gateway_process::free_port());
        let log = tempfile::NamedTempFile::new().expect("log file");
        let gateway_child =
            gateway_process::start_gateway(&upstream.url(), port, admin, log.path());
        gateway_process::wait_listening(port);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let (status, cds) = post(&client, addr, "/v3/discovery:clusters", cds_body.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&cds));
        let (status, eds) = post(&client, addr, "/v3/discovery:endpoints", eds_body.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&eds));
        println!(
            "CDS response: {} bytes; EDS response: {} bytes",
            cds.len(),
            eds.len()
        );
        let cases = [
            Case {
                name: "CDS 1,000 clusters, 200",
                path: "/v3/discovery:clusters",
                body: cds_body.clone(),
                status: 200,
                answer: cds.clone(),
            },
            Case {
                name: "CDS 1,000 clusters, 304",
                path: "/v3/discovery:clusters",
                body: external::presenting(&cds_body, &version_of(&cds)),
                status: 304,
                answer: Bytes::new(),
            },
            Case {
                name: "EDS 1 cluster, 200",
                path: "/v3/discovery:endpoints",
                body: eds_body.clone(),
                status: 200,
                answer: eds.clone(),
            },
            Case {
                name: "EDS 1 cluster, 304",
                path: "/v3/discovery:endpoints",
                body: external::presenting(&eds_body, &version_of(&eds)),
                status: 304,
                answer: Bytes::new(),
            },
        ];
        // The 304 cases must really be 304s.
        for case in cases.iter().filter(|c| c.status == 304) {
            let (status, _) = post(&client, addr, case.path, case.body.clone()).await;
            assert_eq!(status, 304, "{}", case.name);
        }
        let pid = gateway_child.0.id();
        if part("external") {
            tokio::task::block_in_place(|| external_part(port, pid, &cases));
        }
        if part("perpoll") {
            let eds: Vec<&Case> = cases.iter().filter(|c| c.name.starts_with("EDS")).collect();
            // Another build in the same rounds (`XDS_GATEWAY_BASELINE_BIN`).
            let baseline_log = tempfile::NamedTempFile::new().expect("log file");
            let baseline = match std::env::var_os("XDS_GATEWAY_BASELINE_BIN") {
                Some(bin) if !bin.is_empty() => {
                    let (child, port, _) = gateway_process::start_gateway_listening(
                        std::path::Path::new(&bin),
                        &[],
                        &upstream.url(),
                        baseline_log.path(),
                    );
                    let addr = SocketAddr::from(([127, 0, 0, 1], port));
                    for case in &eds {
                        let (status, answer) =
                            post(&client, addr, case.path, case.body.clone()).await;
                        assert_eq!(status, case.status, "baseline: {}", case.name);
                        // The same answer but for its nonce (another upstream stream's).
                        assert_eq!(answer.len(), case.answer.len(), "baseline: {}", case.name);
                    }
                    Some((child, port))
                }
                _ => None,
            };
            let other = baseline.as_ref().map(|(child, port)| (*port, child.0.id()));
            tokio::task::block_in_place(|| per_poll::part(port, pid, other, &eds));
        }
        if part("instructions") {
            let eds: Vec<&Case> = cases.iter().filter(|c| c.name.starts_with("EDS")).collect();
            tokio::task::block_in_place(|| instructions::part(&upstream.url(), &eds));
        }
        drop(gateway_child);
    }

    let (gateway, admin) = start_gateway(upstream.url()).await;
    if part("inprocess") {
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
        println!("\n## In process (hyper client in the bench process), {RUN:?} each\n");
        println!("| case | gateway req/s | p50 ms | p99 ms | baseline req/s | p50 ms | p99 ms | gateway/baseline |");
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
    }
    if !part("fanin") {
        return;
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
