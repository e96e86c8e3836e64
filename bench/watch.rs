//! Watch streams at scale: N clients (default 1,000) watching one node's CDS
//! as NDJSON through the release gateway (its own process, so its memory
//! is its own), in front of the Python reference control plane
//! (`tests/support/ads_server.py`). The control plane is told to push a new
//! version every round; per round every client's time from the push (just
//! before the control plane is asked) to its event is recorded.
//!
//! Baseline, measured in the same run with the same clients and pushes:
//! the same N clients long-polling (`?version=<current>&wait=30s`, one
//! keep-alive connection each), time from the push to their 200.
//!
//! Memory per open watch: the gateway's RSS with N watches open (each has
//! had its first event) minus its RSS before, over N.
//!
//! Run: `cargo bench --bench watch` (WATCH_CLIENTS, default 1000;
//! WATCH_ROUNDS, default 20). Needs `.venv` or XDS_GATEWAY_PYTHON. Every
//! wait is bounded.

#[path = "../tests/support/gateway.rs"]
mod gateway;
#[path = "../tests/support/process.rs"]
mod process;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use gateway::ControlPlane;
use process::{eventually, free_port, http_get, ChildGuard};

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
/// Bound on every round (a push reaching every client).
const ROUND_LIMIT: Duration = Duration::from_secs(30);
/// Pause between rounds.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(200);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cluster(version: u32) -> Value {
    json!({"@type": CDS, "name": "backend", "type": "STATIC",
           "connect_timeout": format!("{}s", version + 1)})
}

/// The upstream version inside a served version (`v7~digest` → 7).
fn round_of(version: &str) -> Option<u32> {
    version.split('~').next()?.strip_prefix('v')?.parse().ok()
}

/// The gateway's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// An HTTP/1.1 connection to the gateway.
async fn connect(port: u16) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
}

fn get(path: &str) -> http::Request<Empty<Bytes>> {
    http::Request::get(path)
        .header("host", "bench")
        .body(Empty::new())
        .expect("request")
}

/// One watching client: reports (round, when) for every event.
async fn watcher(port: u16, events: mpsc::UnboundedSender<(u32, Instant)>) {
    let mut sender = connect(port).await;
    let response = sender
        .send_request(get("/v3/discovery:clusters?node=bench&watch&format=ndjson"))
        .await
        .expect("watch");
    assert_eq!(response.status(), 200, "a watch was refused");
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&data);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let at = Instant::now();
            let Ok(doc) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if let Some(round) = doc["versionInfo"].as_str().and_then(round_of) {
                if events.send((round, at)).is_err() {
                    return;
                }
            }
        }
    }
}

/// One long-polling client: polls with its current version, reports each 200.
async fn long_poller(port: u16, events: mpsc::UnboundedSender<(u32, Instant)>) {
    let mut sender = connect(port).await;
    let mut version = String::new();
    loop {
        let path = format!("/v3/discovery:clusters?node=bench&version={version}&wait=30s");
        let Ok(response) = sender.send_request(get(&path)).await else {
            return;
        };
        let status = response.status();
        let Ok(body) = response.into_body().collect().await else {
            return;
        };
        let at = Instant::now();
        if status != 200 {
            continue;
        }
        let doc: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or_default();
        let Some(served) = doc["versionInfo"].as_str() else {
            continue;
        };
        version = served.to_owned();
        if let Some(round) = round_of(served) {
            if events.send((round, at)).is_err() {
                return;
            }
        }
        if sender.ready().await.is_err() {
            return;
        }
    }
}

/// Waits until `clients` events of `round` arrived; their latencies from `pushed` (ms).
async fn collect(
    events: &mut mpsc::UnboundedReceiver<(u32, Instant)>,
    round: u32,
    clients: usize,
    pushed: Instant,
) -> Vec<f64> {
    let mut latencies = Vec::with_capacity(clients);
    let deadline = tokio::time::Instant::now() + ROUND_LIMIT;
    while latencies.len() < clients {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some((r, at))) if r == round => {
                latencies.push(at.saturating_duration_since(pushed).as_secs_f64() * 1e3)
            }
            Ok(Some(_)) => {}
            _ => panic!(
                "round {round}: {} of {clients} clients got it within {ROUND_LIMIT:?}",
                latencies.len()
            ),
        }
    }
    latencies
}

/// Pushes rounds `first..first + rounds` and collects every client's latency.
async fn run_rounds(
    cp: &ControlPlane,
    events: &mut mpsc::UnboundedReceiver<(u32, Instant)>,
    clients: usize,
    first: u32,
    rounds: u32,
) -> Vec<f64> {
    let mut all = Vec::new();
    for round in first..first + rounds {
        tokio::time::sleep(BETWEEN_ROUNDS).await;
        let pushed = Instant::now();
        cp.set(CDS, &format!("v{round}"), &[cluster(round)]).await;
        all.extend(collect(events, round, clients, pushed).await);
    }
    all.sort_by(f64::total_cmp);
    all
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clients = env_or("WATCH_CLIENTS", 1_000);
    let rounds = env_or("WATCH_ROUNDS", 20) as u32;
    let cp = ControlPlane::start("bench watch");
    cp.set(CDS, "v0", &[cluster(0)]).await;
    let (port, admin) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_xds-gateway"))
        .args(["--upstream", &cp.upstream()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .args(["--max-watches", &(clients + 10).to_string()])
        .args(["--max-long-polls", &(clients + 10).to_string()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the gateway");
    let gateway = ChildGuard::new("xds-gateway", child);
    let pid = gateway.id();
    eventually(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let (status, _) = http_get(port, "/v3/discovery:clusters?node=bench")
                .await
                .ok()?;
            (status == 200).then_some(())
        },
    )
    .await
    .expect("the gateway answers");
    let rss_before = rss_kib(pid);

    // Watches.
    let (tx, mut events) = mpsc::unbounded_channel();
    let watchers: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(watcher(port, tx.clone())))
        .collect();
    collect(&mut events, 0, clients, Instant::now()).await;
    let rss_watching = rss_kib(pid);
    let watch = run_rounds(&cp, &mut events, clients, 1, rounds).await;
    for w in watchers {
        w.abort();
    }
    drop(events);
    drop(tx);

    // Baseline: long polls on the same gateway, same pushes.
    let (tx, mut events) = mpsc::unbounded_channel();
    let pollers: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(long_poller(port, tx.clone())))
        .collect();
    collect(&mut events, rounds, clients, Instant::now()).await;
    let long_poll = run_rounds(&cp, &mut events, clients, rounds + 1, rounds).await;
    for p in pollers {
        p.abort();
    }

    let per_watch = (rss_watching.saturating_sub(rss_before)) as f64 / clients as f64;
    println!(
        "{clients} clients of one node, {rounds} pushes each way; latency = upstream push (control plane asked) to the client's answer\n"
    );
    println!("| | p50 | p99 | max |");
    println!("|---|---|---|---|");
    for (name, l) in [
        ("watch (NDJSON event)", &watch),
        ("long poll (200), baseline", &long_poll),
    ] {
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms |",
            percentile(l, 50.0),
            percentile(l, 99.0),
            percentile(l, 100.0)
        );
    }
    println!(
        "| ratio watch / long poll | {:.2} | {:.2} | |",
        percentile(&watch, 50.0) / percentile(&long_poll, 50.0),
        percentile(&watch, 99.0) / percentile(&long_poll, 99.0)
    );
    println!(
        "\ngateway RSS: {rss_before} KiB before, {rss_watching} KiB with {clients} watches open: {per_watch:.1} KiB per open watch"
    );
}
