//! `xdstp://` resource names through the gateway binary, against the
//! reference control plane (`tests/support/ads_server.py`, which serves
//! resources named in the xdstp form and glob collections as xDS TP1 and
//! Envoy's `WatchMap` define them), in SotW and delta upstream mode.
//!
//! Every test starts its own control plane and `xds-gateway` on free
//! loopback ports (both killed when the test ends, pass or fail), bounded by
//! [`TEST_TIMEOUT`]. Python comes from `XDS_GATEWAY_PYTHON` or the crate's
//! `.venv/bin/python`; without either the tests fail, saying how to install
//! it.

#[path = "support/process.rs"]
mod process;

#[path = "support/gateway.rs"]
mod gateway;

#[path = "support/rest.rs"]
mod rest;

use std::time::Duration;

use serde_json::Value;

use gateway::Gateway;
use rest::{
    assert_ok, cluster, names_of, node, request, stats_until, version_of, with_control_plane, CDS,
};

const TEST_TIMEOUT: Duration = Duration::from_secs(60);
const STATS_WAIT: Duration = Duration::from_secs(15);

const PREFIX: &str = "xdstp://cp.example/envoy.config.cluster.v3.Cluster";

fn xdstp(id: &str) -> String {
    format!("{PREFIX}/{id}")
}

/// Whether the control plane saw a request (SotW or delta) for CDS naming
/// `name` exactly as given.
fn asked_upstream(stats: &Value, name: &str) -> bool {
    let sotw = stats["requests"].as_array().into_iter().flatten();
    let delta = stats["delta_requests"].as_array().into_iter().flatten();
    let has = |list: &Value| {
        list.as_array()
            .into_iter()
            .flatten()
            .any(|n| n.as_str() == Some(name))
    };
    sotw.chain(delta)
        .any(|r| r["type_url"] == CDS && (has(&r["resource_names"]) || has(&r["subscribe"])))
}

/// Serves clusters named in the xdstp form, asks for a glob collection, a
/// name with context parameters (POST, and GET with the name %-encoded), and
/// checks membership, the upstream subscription, 304 and a new member.
async fn xdstp_names_are_served(flags: &[&str]) {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let (a, b) = (xdstp("prod/a"), xdstp("prod/b"));
        let deeper = xdstp("prod/eu/c");
        let zoned = xdstp("prod/z?zone=eu-1&tier=gold");
        let glob = xdstp("prod/*");
        cp.set(
            CDS,
            "1",
            &[
                cluster(&a),
                cluster(&b),
                cluster(&deeper),
                cluster(&zoned),
                cluster("plain"),
            ],
        )
        .await;
        let gw = Gateway::start(&cp.upstream(), flags).await;
        let n = node("xdstp");

        let members = gw.discover("clusters", &request(&n, "", &[&glob])).await;
        assert_ok(&members, "glob collection");
        assert_eq!(names_of(&members), [a.clone(), b.clone()]);
        let stats = stats_until(cp, STATS_WAIT, "glob subscribed", |s| {
            asked_upstream(s, &glob)
        })
        .await;
        assert!(
            !asked_upstream(&stats, &a),
            "members are not subscribed one by one: {stats}"
        );

        let version = version_of(&members);
        let same = gw
            .discover("clusters", &request(&n, &version, &[&glob]))
            .await;
        assert_eq!(same.status, 304, "same members: {}", same.text());

        let exact = gw.discover("clusters", &request(&n, "", &[&zoned])).await;
        assert_ok(&exact, "name with context parameters");
        assert_eq!(names_of(&exact), [zoned.as_str()]);
        stats_until(cp, STATS_WAIT, "name subscribed unchanged", |s| {
            asked_upstream(s, &zoned)
        })
        .await;

        let encoded: String = url_encode(&zoned);
        let got = gw
            .get(&format!(
                "/v3/discovery:clusters?node=xdstp&cluster=test-cluster&names={encoded}"
            ))
            .await;
        assert_ok(&got, "GET with the name %-encoded");
        assert_eq!(names_of(&got), [zoned.as_str()]);

        // A new member changes what the glob gets.
        let d = xdstp("prod/d");
        cp.set(
            CDS,
            "2",
            &[
                cluster(&a),
                cluster(&b),
                cluster(&d),
                cluster(&zoned),
                cluster("plain"),
            ],
        )
        .await;
        let (gw, n, glob, d) = (&gw, &n, &glob, &d);
        let grown = process::eventually(STATS_WAIT, Duration::from_millis(50), || async move {
            let reply = gw.discover("clusters", &request(n, "", &[glob])).await;
            (reply.status == 200 && names_of(&reply).contains(d)).then_some(reply)
        })
        .await
        .expect("the new member is served");
        assert_eq!(names_of(&grown), [a, b, d.clone()]);
    })
    .await;
}

/// %-encodes everything but unreserved characters.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_serves_xdstp_names_and_glob_collections() {
    xdstp_names_are_served(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_serves_xdstp_names_and_glob_collections() {
    xdstp_names_are_served(&["--upstream-mode", "delta"]).await;
}
