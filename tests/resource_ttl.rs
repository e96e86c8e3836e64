//! `envoy.service.discovery.v3.Resource` wrappers, TTLs and heartbeats
//! through the gateway binary, against the reference control plane
//! (`tests/support/ads_server.py`: `/set` with `wrap`, `/heartbeat`), in SotW
//! and delta upstream mode.
//!
//! What REST clients get: the resource itself (canonical JSON, its own
//! `@type`, never the wrapper); a heartbeat changes nothing they see (304);
//! a resource whose TTL runs out without a heartbeat is no longer served.
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

use serde_json::json;

use gateway::{metric_sum, ControlPlane, Gateway};
use rest::{
    assert_ok, cluster, names_of, node, request, upstream_of, version_of, with_control_plane, CDS,
};

const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a change may take to show.
const WAIT: Duration = Duration::from_secs(20);
/// The TTL of the expiring resource: long enough for heartbeats sent every
/// [`BEAT`] to keep it alive on a loaded machine.
const TTL_MS: u64 = 3000;
const BEAT: Duration = Duration::from_millis(300);

async fn wrapped_resources_ttls_and_heartbeats(flags: &[&str]) {
    with_control_plane(&[], TEST_TIMEOUT, async |cp: &ControlPlane| {
        let canonical = cp
            .set_wrapped(
                CDS,
                "1",
                &[cluster("plain"), cluster("wrapped"), cluster("expiring")],
                json!({"wrapped": null, "expiring": TTL_MS}),
            )
            .await;
        let gw = Gateway::start(&cp.upstream(), flags).await;
        let n = node("ttl");

        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "wrapped resources");
        assert_eq!(names_of(&first), ["expiring", "plain", "wrapped"]);
        let body = first.json();
        for got in body["resources"].as_array().unwrap() {
            assert_eq!(got["@type"], CDS, "the resource, not the wrapper: {got}");
            assert!(
                canonical.contains(got),
                "not protobuf's canonical JSON of the resource: {got}"
            );
        }
        let version = version_of(&first);

        // Heartbeats for a while (longer than the TTL): nothing changes.
        let beats = (TTL_MS as u32 * 2) / BEAT.as_millis() as u32;
        for _ in 0..beats {
            assert_eq!(cp.heartbeat(CDS).await, 1, "one upstream stream");
            tokio::time::sleep(BEAT).await;
            let again = gw.discover("clusters", &request(&n, &version, &[])).await;
            assert_eq!(
                again.status,
                304,
                "a heartbeat is no change: {}",
                again.text()
            );
        }
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_sum(&metrics, "xds_gateway_upstream_nacks_total"),
            0.0,
            "heartbeats are not NACKed: {metrics}"
        );

        // No more heartbeats: the expiring resource goes, the others stay.
        let (gw, n) = (&gw, &n);
        let expired = process::eventually(WAIT, Duration::from_millis(100), || async move {
            let reply = gw.discover("clusters", &request(n, "", &[])).await;
            (reply.status == 200 && !names_of(&reply).contains(&"expiring".to_owned()))
                .then_some(reply)
        })
        .await
        .expect("the expiring resource is no longer served");
        assert_eq!(names_of(&expired), ["plain", "wrapped"]);
        if flags.is_empty() {
            assert_eq!(upstream_of(&expired), "1", "the upstream's version stays");
        }
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_sum(&metrics, "xds_gateway_ttl_expired_resources_total"),
            1.0,
            "{metrics}"
        );
        let gone = gw.discover("clusters", &request(n, &version, &[])).await;
        assert_eq!(
            gone.status,
            200,
            "the old version is not current: {}",
            gone.text()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_wrapped_resources_ttls_and_heartbeats() {
    wrapped_resources_ttls_and_heartbeats(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_resources_ttls_and_heartbeats() {
    wrapped_resources_ttls_and_heartbeats(&["--upstream-mode", "delta"]).await;
}

/// A TTL is what keeps config from outliving an unreachable control plane:
/// it runs out while the gateway has no stream.
async fn ttl_runs_out_while_the_upstream_is_down(flags: &[&str]) {
    let test = std::thread::current().name().unwrap_or("ttl").to_owned();
    rest::bounded(TEST_TIMEOUT, async {
        let cp = ControlPlane::start(&test);
        cp.set_wrapped(
            CDS,
            "1",
            &[cluster("plain"), cluster("expiring")],
            json!({"expiring": TTL_MS}),
        )
        .await;
        let gw = Gateway::start(&cp.upstream(), flags).await;
        let n = node("ttl-down");
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "before the upstream goes");
        assert_eq!(names_of(&first), ["expiring", "plain"]);
        drop(cp);
        let (gw, n) = (&gw, &n);
        let left = process::eventually(WAIT, Duration::from_millis(100), || async move {
            let reply = gw.discover("clusters", &request(n, "", &[])).await;
            (reply.status == 200 && names_of(&reply) == ["plain"]).then_some(reply)
        })
        .await;
        assert!(left.is_some(), "the expiring resource outlived its TTL");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_ttl_runs_out_while_the_upstream_is_down() {
    ttl_runs_out_while_the_upstream_is_down(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_ttl_runs_out_while_the_upstream_is_down() {
    ttl_runs_out_while_the_upstream_is_down(&["--upstream-mode", "delta"]).await;
}
