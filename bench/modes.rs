//! Fan-in per upstream mode: 1,000 REST clients polling EDS through the
//! gateway (one node identity, then 100), while the upstream changes once a
//! second. For each mode (sotw, delta, fetch): client polls per second
//! against upstream messages (SotW/delta requests the gateway sent, or Fetch
//! calls) per second, and the gateway's cache-hit ratio.
//!
//! The upstream is the Python reference control plane
//! (`tests/support/ads_server.py`, needs `.venv` or XDS_GATEWAY_PYTHON); the
//! gateway runs in this process on loopback. Run: `cargo bench --bench modes`
//! (about a minute). Every loop is bounded in time.

#[path = "../tests/support/gateway.rs"]
mod gateway;
#[path = "../tests/support/process.rs"]
mod process;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::net::TcpListener;

use gateway::{metric_sum, ControlPlane};
use xds_gateway::config::{Config, UpstreamMode};

const EDS: &str = xds_gateway::xds::ResourceType::Endpoints.type_url();
const CLIENTS: usize = 1_000;
const POLL_EVERY: Duration = Duration::from_millis(200);
const RUN: Duration = Duration::from_secs(6);

fn endpoints(version: u32) -> Value {
    json!({
        "@type": EDS,
        "cluster_name": "backend",
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address":
            {"address": "127.0.0.1", "port_value": 10_000 + version}}}}]}]
    })
}

/// Upstream messages so far for `mode`, from the control plane's stats.
fn upstream_messages(stats: &Value, mode: UpstreamMode) -> u64 {
    let len = |key: &str| stats[key].as_array().map_or(0, |a| a.len() as u64);
    match mode {
        UpstreamMode::Delta => len("delta_requests"),
        UpstreamMode::Fetch => stats["fetches"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum()),
        UpstreamMode::Sotw | UpstreamMode::Auto => len("requests"),
    }
}

async fn start_gateway(
    cp: &ControlPlane,
    mode: UpstreamMode,
) -> (u16, u16, tokio::sync::oneshot::Sender<()>) {
    let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let ports = (
        rest.local_addr().expect("addr").port(),
        admin.local_addr().expect("addr").port(),
    );
    let config = Config {
        upstream: Some(cp.upstream()),
        upstream_mode: mode,
        ..Config::default()
    }
    .validate()
    .expect("config");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(xds_gateway::app::run(config, rest, admin, async move {
        let _ = stopped.await;
    }));
    (ports.0, ports.1, stop)
}

struct Figures {
    polls_per_s: f64,
    upstream_per_s: f64,
    hit_ratio: f64,
    errors: u64,
}

async fn run_case(mode: UpstreamMode, identities: usize) -> Figures {
    let cp = ControlPlane::start("bench modes");
    cp.set(EDS, "e1", &[endpoints(1)]).await;
    let (port, admin, stop) = start_gateway(&cp, mode).await;
    // Warm: one poll per identity creates the sessions.
    for i in 0..identities {
        let body = json!({"node": {"id": format!("n{i}"), "cluster": "bench"}, "resource_names": ["backend"]});
        let _ = post(port, &body).await;
    }
    let before = upstream_messages(&cp.stats().await, mode);
    let metrics_before = metrics(admin).await;
    let (polls, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + RUN;
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (polls, errors) = (polls.clone(), errors.clone());
        clients.push(tokio::spawn(async move {
            let node = json!({"id": format!("n{}", c % identities), "cluster": "bench"});
            let mut version = String::new();
            // Spread the clients over one poll interval.
            tokio::time::sleep(POLL_EVERY.mul_f64(c as f64 / CLIENTS as f64)).await;
            while Instant::now() < deadline {
                let body =
                    json!({"version_info": version, "node": node, "resource_names": ["backend"]});
                match post(port, &body).await {
                    Some((200, reply)) => {
                        if let Ok(v) = serde_json::from_str::<Value>(&reply) {
                            version = v["versionInfo"].as_str().unwrap_or_default().to_owned();
                        }
                    }
                    Some((304, _)) => {}
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                polls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(POLL_EVERY).await;
            }
        }));
    }
    let mut version = 1;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        version += 1;
        cp.set(EDS, &format!("e{version}"), &[endpoints(version)])
            .await;
    }
    for client in clients {
        let _ = client.await;
    }
    let upstream = upstream_messages(&cp.stats().await, mode) - before;
    let metrics_after = metrics(admin).await;
    let delta = |name: &str| metric_sum(&metrics_after, name) - metric_sum(&metrics_before, name);
    let (hits, misses) = (
        delta("xds_gateway_cache_hits_total"),
        delta("xds_gateway_cache_misses_total"),
    );
    let _ = stop.send(());
    let secs = RUN.as_secs_f64();
    Figures {
        polls_per_s: polls.load(Ordering::Relaxed) as f64 / secs,
        upstream_per_s: upstream as f64 / secs,
        hit_ratio: if hits + misses > 0.0 {
            hits / (hits + misses)
        } else {
            0.0
        },
        errors: errors.load(Ordering::Relaxed),
    }
}

/// One POST to the gateway's EDS endpoint: (status, body), None on a transport error.
async fn post(port: u16, body: &Value) -> Option<(u16, String)> {
    let reply = gateway::http_request(
        port,
        http::Method::POST,
        "/v3/discovery:endpoints",
        &[("content-type", "application/json")],
        body.to_string(),
        Duration::from_secs(5),
    )
    .await
    .ok()?;
    Some((reply.status, reply.text()))
}

async fn metrics(admin: u16) -> String {
    gateway::http_request(
        admin,
        http::Method::GET,
        "/metrics",
        &[],
        bytes::Bytes::new(),
        Duration::from_secs(5),
    )
    .await
    .map(|r| r.text())
    .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    println!("{CLIENTS} clients polling EDS every {POLL_EVERY:?} for {RUN:?}; the upstream changes once a second\n");
    println!("| mode | identities | client polls/s | upstream msgs/s | polls per upstream msg | cache-hit ratio | non-200/304 |");
    println!("|---|---|---|---|---|---|---|");
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta, UpstreamMode::Fetch] {
        for identities in [1, 100] {
            let f = run_case(mode, identities).await;
            println!(
                "| {} | {identities} | {:.0} | {:.1} | {:.0} | {:.3} | {} |",
                format!("{mode:?}").to_lowercase(),
                f.polls_per_s,
                f.upstream_per_s,
                f.polls_per_s / f.upstream_per_s.max(0.001),
                f.hit_ratio,
                f.errors
            );
        }
    }
}
