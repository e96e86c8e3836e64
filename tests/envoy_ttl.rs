//! A real Envoy 1.40 polling CDS over REST from the gateway, whose upstream
//! (the reference control plane, `tests/support/ads_server.py`) sends
//! clusters wrapped in `envoy.service.discovery.v3.Resource`, one with a TTL
//! kept alive by heartbeats for a while and then left to run out.
//!
//! Envoy's REST subscription has no TTL handling and takes a heartbeat (a
//! wrapper without a resource) for an empty resource: served as is, it adds
//! a cluster named "". So this checks what Envoy ends up with: every cluster
//! under its own name, never an empty-named one, no update rejected while
//! heartbeats flow, and the expiring cluster removed once its TTL ran out.
//!
//! All on 127.0.0.1 free ports; the control plane, the gateway and Envoy are
//! killed when the test ends, pass or fail; bounded by the support module's
//! test timeout.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use envoy::{counters, rest_bootstrap, start_gateway, Envoy, CONVERGE_TIMEOUT, POLL_INTERVAL};
use gateway::ControlPlane;
use process::{eventually, free_port, http_get};
use rest::{cluster, CDS, LDS};

/// The expiring cluster's TTL, and how often heartbeats keep it alive.
const TTL_MS: u64 = 3000;
const BEAT: Duration = Duration::from_millis(300);

/// The dynamic clusters Envoy has, by name (admin `/clusters`).
async fn envoy_clusters(admin: u16) -> Vec<String> {
    let Ok((200, text)) = http_get(admin, "/clusters").await else {
        return Vec::new();
    };
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|line| line.split_once("::observability_name::"))
        .map(|(name, _)| name.to_owned())
        .filter(|name| name != "xds_cluster")
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gets_wrapped_clusters_and_loses_one_whose_ttl_ran_out() {
    envoy::run_bounded("envoy_ttl", run).await;
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let cp = ControlPlane::start("envoy_ttl");
    cp.set(LDS, "1", &[]).await;
    cp.set_wrapped(
        CDS,
        "1",
        &[cluster("plain"), cluster("wrapped"), cluster("expiring")],
        json!({"wrapped": null, "expiring": TTL_MS}),
    )
    .await;
    let gw = start_gateway(&cp.upstream(), Duration::from_millis(200), &[], false, &dir).await;
    let admin = free_port();
    let _envoy = Envoy::start(
        &envoy_bin,
        &dir,
        &rest_bootstrap("ttl-envoy", admin, gw.port),
    );

    let all = ["expiring", "plain", "wrapped"];
    eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        (envoy_clusters(admin).await == all).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("Envoy never had {all:?}: {:?}", clusters_now(admin)));

    // Heartbeats for twice the TTL: Envoy keeps every cluster, gets no
    // empty-named one and rejects nothing.
    for _ in 0..(2 * TTL_MS / BEAT.as_millis() as u64) {
        cp.heartbeat(CDS).await;
        tokio::time::sleep(BEAT).await;
        assert_eq!(envoy_clusters(admin).await, all, "while heartbeats flow");
    }
    let stats = counters(admin, &["cluster_manager.cds."]).await;
    assert_eq!(
        stats.get("cluster_manager.cds.update_rejected"),
        Some(&0),
        "{stats:?}"
    );

    // No more heartbeats: the expiring cluster goes.
    eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        (envoy_clusters(admin).await == ["plain", "wrapped"]).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the expiring cluster stayed: {:?}", clusters_now(admin)));
    drop(gw);
}

/// What Envoy has now, for failure messages.
fn clusters_now(admin: u16) -> Vec<String> {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(envoy_clusters(admin))
    })
}
