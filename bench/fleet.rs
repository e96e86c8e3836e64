//! Fleet benchmark: the setup of `tests/envoy_fleet.rs` (a real Envoy 1.40
//! polling N EDS clusters over REST through the gateway, in front of an ADS
//! control plane), run longer, with the release gateway. Prints, per size:
//! - the time to warm every cluster from a cold start, against the same
//!   Envoy's cold start polling a plain REST server that serves the same
//!   clusters (`fleet::floor_warm`, the floor, measured first in the same
//!   run), and the ratio;
//! - the update failures on the way, and the connections Envoy opened to
//!   the gateway (of them, the ones that timed out connecting);
//! - for a steady-state window: EDS polls per second, the share answered
//!   304, `update_success` increments (none: nothing changed) and the
//!   gateway's CPU per 1,000 polls/s.
//!
//! `cargo bench --bench fleet` (needs the Envoy of `scripts/test`'s .venv,
//! or ENVOY_BIN). Sizes and the window: FLEET_CLUSTERS (default "500,1000"),
//! FLEET_SECONDS (default 60), FLEET_REFRESH_MS (default 1000); how Envoy
//! reaches the gateway: FLEET_XDS (`h2`, the default, or `h1`),
//! FLEET_CONNECT_TIMEOUT_MS (default 1000) and FLEET_MAX_CONNECTIONS (its
//! circuit breaker's; Envoy's default when unset), its `xds_cluster`'s.

#[path = "../tests/support/process.rs"]
mod process;

#[path = "../tests/support/envoy.rs"]
mod envoy;

#[path = "../tests/support/fake_ads.rs"]
mod fake_ads;

#[path = "../tests/support/fleet.rs"]
mod fleet;

use std::time::{Duration, Instant};

use fleet::{Fleet, XdsLink};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let envoy_bin = process::require_envoy("bench fleet");
    let sizes: Vec<usize> = env_or("FLEET_CLUSTERS", "500,1000")
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let seconds: u64 = env_or("FLEET_SECONDS", "60").parse().unwrap_or(60);
    let refresh = Duration::from_millis(env_or("FLEET_REFRESH_MS", "1000").parse().unwrap_or(1000));
    let link = XdsLink {
        http2: env_or("FLEET_XDS", "h2") != "h1",
        connect_timeout: Duration::from_millis(
            env_or("FLEET_CONNECT_TIMEOUT_MS", "1000")
                .parse()
                .unwrap_or(1000),
        ),
        max_connections: std::env::var("FLEET_MAX_CONNECTIONS")
            .ok()
            .and_then(|max| max.parse().ok()),
    };
    let protocol = if link.http2 { "HTTP/2" } else { "HTTP/1.1" };
    println!(
        "Envoy 1.40 polling N EDS clusters over REST ({protocol} to the gateway, connect timeout \
         {:?}, circuit breaker max_connections {}), refresh_delay {refresh:?}; steady state \
         measured over {seconds}s\n",
        link.connect_timeout,
        link.max_connections
            .map_or("Envoy's default".to_owned(), |max| max.to_string()),
    );
    println!("| EDS clusters | warm | floor warm | warm / floor | cold-start update failures | connections to the gateway (timed out connecting) | EDS polls/s | 304 share | update_success rises | gateway CPU per 1,000 polls/s |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for clusters in sizes {
        let dir = tempfile::tempdir().expect("temp dir");
        let limit = Duration::from_secs(120);
        let floor = fleet::floor_warm(
            &envoy_bin,
            &dir.path().join("floor"),
            clusters,
            refresh,
            limit,
        )
        .await;
        let mut fleet =
            Fleet::start_with(&envoy_bin, dir.path(), clusters, refresh, false, link).await;
        let warm = fleet.wait_warm(limit).await;
        let (before, failures, _) = fleet.eds_counters().await;
        let xds = fleet
            .envoy_counters(&["cluster.xds_cluster.upstream_cx_"])
            .await;
        let xds_counter = |name: &str| {
            xds.get(&format!("cluster.xds_cluster.upstream_cx_{name}"))
                .copied()
                .unwrap_or(0)
        };
        let (connects, timed_out) = (xds_counter("total"), xds_counter("connect_timeout"));
        // Let the first poll round after warming settle.
        tokio::time::sleep(refresh * 3).await;
        let (ok0, nm0, _) = fleet.gateway_eds_answers().await;
        let cpu0 = fleet.gateway_cpu();
        let (before_window, _, _) = fleet.eds_counters().await;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let elapsed = started.elapsed().as_secs_f64();
        let (ok1, nm1, _) = fleet.gateway_eds_answers().await;
        let cpu = fleet.gateway_cpu().saturating_sub(cpu0).as_secs_f64();
        let (after, _, _) = fleet.eds_counters().await;
        let polls = (ok1 - ok0) + (nm1 - nm0);
        let rate = polls / elapsed;
        let rises: u64 = after
            .iter()
            .map(|(k, v)| v.saturating_sub(*before_window.get(k).unwrap_or(v)))
            .sum();
        let cpu_share = cpu / elapsed;
        println!(
            "| {clusters} | {:.2} s | {:.2} s | {:.2} | {failures} | {connects} ({timed_out}) | {rate:.0} | {:.2} % | {rises} | {:.3} cores ({:.1} % of one) |",
            warm.as_secs_f64(),
            floor.as_secs_f64(),
            warm.as_secs_f64() / floor.as_secs_f64(),
            100.0 * (nm1 - nm0) / polls.max(1.0),
            cpu_share * 1000.0 / rate.max(1.0),
            100.0 * cpu_share * 1000.0 / rate.max(1.0),
        );
        drop(before);
    }
}
