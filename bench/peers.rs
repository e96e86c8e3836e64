//! Issue 21: xds-gateway against go-control-plane's own REST front end,
//! `HTTPGateway`, serving the same snapshot. The peer
//! (`tests/peers/go-control-plane`, started with `--record=false` so that
//! its test callbacks record nothing) holds a `SnapshotCache` with 1,000
//! clusters and one ClusterLoadAssignment for every node (`*`); its
//! HTTPGateway answers REST itself, and the xds-gateway release binary (2
//! worker threads, default sotw mode) answers REST in front of the peer's
//! gRPC server.
//!
//! Load: `wrk -t1 -c16` posting Envoy 1.40's real 77 KB request (CDS
//! wildcard; EDS for one cluster), first with an empty version (200), then
//! presenting the version each server returned (the "304 case": whatever
//! each answers to it). Rounds alternate which server goes first; medians.
//! CPU per request comes from `/proc`: for xds-gateway, its own and, apart,
//! the go-control-plane process behind it.
//!
//! Run: `cargo bench --bench peers` (needs `wrk` and a built peer: Go ≥ 1.26
//! on the PATH, or `$GO_CONTROL_PLANE_PEER`). `PEERS_ROUNDS` (3) and
//! `PEERS_SECONDS` (3) shape it. Loopback only; children are killed by pid.

#[path = "../tests/support/gateway.rs"]
mod gateway;
#[path = "../tests/support/go_peer.rs"]
mod go_peer;
#[path = "../tests/support/process.rs"]
mod process;

mod external;
mod gateway_process;

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use external::{Measured, Target};

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const EDS: &str = xds_gateway::xds::ResourceType::Endpoints.type_url();
const CLUSTERS: usize = 1_000;

/// One REST front end and the processes whose CPU it costs.
struct Server {
    name: &'static str,
    port: u16,
    pids: Vec<u32>,
}

/// What a server answered to one body, outside the load.
struct Answer {
    status: u16,
    body: Bytes,
    content_type: String,
}

impl Answer {
    /// The version in a 200's body (`versionInfo` or `version_info`).
    fn version(&self) -> String {
        let v: Value = serde_json::from_slice(&self.body).expect("a JSON answer");
        let version = v.get("versionInfo").or_else(|| v.get("version_info"));
        version
            .and_then(Value::as_str)
            .expect("a version")
            .to_owned()
    }
}

async fn post(port: u16, path: &str, body: &Bytes) -> Answer {
    let reply = gateway::http_request(
        port,
        http::Method::POST,
        path,
        &[
            ("content-type", "application/json"),
            ("host", "xds_cluster"),
        ],
        body.clone(),
        Duration::from_secs(10),
    )
    .await
    .expect("an answer");
    Answer {
        status: reply.status,
        content_type: reply.header("content-type").unwrap_or("-").to_owned(),
        body: reply.body,
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let rounds = external::env_number("PEERS_ROUNDS", 3).max(1);
    let seconds = external::env_number("PEERS_SECONDS", 3).max(1);
    let peer = go_peer::GoControlPlane::start_with("bench peers", &["--record=false"]);
    rt.block_on(peer.set_snapshot(
        "*",
        "v1",
        &[
            (CDS, (0..CLUSTERS).map(external::cluster).collect()),
            (EDS, vec![external::endpoints(10_000)]),
        ],
    ));
    let (port, admin) = (gateway_process::free_port(), gateway_process::free_port());
    let dir = tempfile::tempdir().expect("temp dir");
    let gw = gateway_process::start_gateway(&peer.upstream(), port, admin, &dir.path().join("gw"));
    gateway_process::wait_listening(port);
    let servers = [
        Server {
            name: "xds-gateway",
            port,
            pids: vec![gw.0.id(), peer.pid()],
        },
        Server {
            name: "HTTPGateway",
            port: peer.gateway_port,
            pids: vec![peer.pid()],
        },
    ];
    let cds = external::request_body(CDS, &[]);
    let eds = external::request_body(EDS, &["cluster-0"]);
    println!("request body: {} bytes (Envoy 1.40 node); wrk -t1 -c16, {rounds} rounds of {seconds}s per server, medians (min-max)\n", cds.len());
    println!("| case | server | status | req/s | p50 / p99 ms | CPU per request | go-control-plane behind it | body bytes | bytes on the wire | Content-Type |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let (mut ratios, mut names_probe) = (Vec::new(), Vec::new());
    for (c, (case, path, body)) in [
        ("CDS 1,000 clusters", "/v3/discovery:clusters", &cds),
        ("EDS 1 cluster", "/v3/discovery:endpoints", &eds),
    ]
    .into_iter()
    .enumerate()
    {
        // The 200 case, then each server presented the version it served.
        let first = servers
            .each_ref()
            .map(|s| rt.block_on(post(s.port, path, body)));
        let presented = [0, 1].map(|i| external::presenting(body, &first[i].version()));
        for (variant, bodies) in [("200", [body.clone(), body.clone()]), ("304", presented)] {
            let answers = [0, 1].map(|i| rt.block_on(post(servers[i].port, path, &bodies[i])));
            for (s, a) in servers.iter().zip(&answers) {
                assert!(
                    a.status < 400,
                    "{}: {} {}",
                    s.name,
                    a.status,
                    String::from_utf8_lossy(&a.body)
                );
            }
            let targets = [0, 1].map(|i| Target {
                script: external::script(dir.path(), &format!("{c}-{variant}-{i}"), &bodies[i]),
                url: format!("http://127.0.0.1:{}{path}", servers[i].port),
                pids: servers[i].pids.clone(),
            });
            let measured = external::alternate([&targets[0], &targets[1]], rounds, seconds);
            let name = format!("{case}, {variant} case");
            for i in 0..2 {
                row(&name, &servers[i], &answers[i], &measured[i]);
            }
            ratios.push((name, measured));
        }
        if path == "/v3/discovery:endpoints" {
            // 304 per version or per name set: the version served, other names.
            let names = external::request_body(EDS, &["cluster-0", "cluster-1"]);
            for (s, a) in servers.iter().zip(&first) {
                let other = external::presenting(&names, &a.version());
                names_probe.push((s.name, rt.block_on(post(s.port, path, &other)).status));
            }
        }
    }
    println!("\n| case | xds-gateway/HTTPGateway req/s | p50 | CPU per request (gateway alone) | (gateway + go-control-plane behind it) |");
    println!("|---|---|---|---|---|");
    for (name, [gw, peer]) in &ratios {
        println!(
            "| {name} | {:.1} | {:.3} | {:.3} | {:.3} |",
            gw.rps() / peer.rps(),
            gw.latency_ms().0 / peer.latency_ms().0,
            gw.cpu(0) / peer.cpu(0),
            (gw.cpu(0) + gw.cpu(1)) / peer.cpu(0)
        );
    }
    for (name, status) in names_probe {
        println!("\n{name}: EDS presenting the version it served with names [cluster-0, cluster-1] (was [cluster-0]): {status}");
    }
}

fn row(case: &str, server: &Server, answer: &Answer, m: &Measured) {
    let (p50, p99) = m.latency_ms();
    let behind = if server.pids.len() > 1 {
        format!("{:.1} µs", m.cpu(1))
    } else {
        "(is the server)".to_owned()
    };
    println!(
        "| {case} | {} | {} | {} | {p50:.2} / {p99:.2} | {:.0} µs | {behind} | {} | {:.0} | {} |",
        server.name,
        answer.status,
        m.rps_text(),
        m.cpu(0),
        answer.body.len(),
        m.bytes_per_response(),
        answer.content_type
    );
}
