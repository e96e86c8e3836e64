//! A real Envoy 1.40 polling the gateway over REST, the gateway in front of
//! go-control-plane (`tests/peers/go-control-plane/`), once per upstream
//! transport: SotW and delta on ADS, SotW and delta on the per-type
//! services (against a go-control-plane serving no ADS), unary Fetch, and
//! auto (issue 21).
//!
//! go-control-plane serves ADS-style config (`ads: {}` sources, as
//! Istio-like control planes write it): a Cluster `backend` over EDS, its
//! endpoints (a backend HTTP server here), a Listener taking `local_route`
//! over RDS, and that route. In each mode the REST Envoy
//! 1. converges (CDS, EDS, LDS, RDS applied; traffic reaches the backend);
//! 2. takes a change of one cluster (the backend's cluster, a new
//!    `connect_timeout`: CDS `update_success` goes up by one);
//! 3. keeps serving through a restart of go-control-plane's gRPC listener:
//!    from the moment before the restart until after it, 0 failed polls
//!    (every `update_failure` unchanged), 0 re-delivered resources (every
//!    `update_success` unchanged while nothing changed upstream), every
//!    `update_rejected` unchanged (0), and the listener answers throughout;
//! 4. after the restart, a change reaches it again.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use serde_json::Value;

use envoy::{Envoy, CONVERGE_TIMEOUT, FIXTURE_SUBSCRIPTIONS, POLL_INTERVAL};
use go_peer::GoControlPlane;
use process::{eventually, free_port, get_until};

const BACKEND_BODY: &str = "hello from backend";
/// What an ADS control plane writes for every dynamic resource.
const ADS_SOURCE: &str = r#"{"ads": {}, "resource_api_version": "V3"}"#;
/// How long go-control-plane's gRPC listener stays down.
const OUTAGE: Duration = Duration::from_secs(2);
/// How long the listener is checked after the restart, every poll of it
/// counted (several of Envoy's 0.2 s refreshes).
const AFTER_RESTART: Duration = Duration::from_secs(3);
/// How long Envoy's counters must stay the same to count as settled.
const SETTLED: Duration = Duration::from_secs(1);

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The backend's cluster with `connect_timeout`.
fn backend_cluster(connect_timeout: &str) -> Value {
    let mut cluster = json(&envoy::cluster_json("backend", ADS_SOURCE));
    cluster["connect_timeout"] = Value::from(connect_timeout);
    cluster
}

/// Envoy's `update_*` counters of the four subscriptions.
async fn updates(admin: u16) -> BTreeMap<String, u64> {
    let prefixes: Vec<String> = FIXTURE_SUBSCRIPTIONS
        .iter()
        .map(|(_, prefix)| format!("{prefix}.update_"))
        .collect();
    let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    envoy::counters(admin, &prefixes).await
}

/// [`updates`] but the attempts, once they have stayed the same for
/// [`SETTLED`] (several of Envoy's refreshes).
async fn settled_updates(admin: u16) -> BTreeMap<String, u64> {
    let last = std::sync::Mutex::new((BTreeMap::new(), tokio::time::Instant::now()));
    let last = &last;
    eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async move {
        // update_attempt counts every poll; the outcomes are what settle.
        let now: BTreeMap<String, u64> = updates(admin)
            .await
            .into_iter()
            .filter(|(name, _)| !name.ends_with("update_attempt"))
            .collect();
        let mut last = last.lock().unwrap();
        if last.0 != now {
            *last = (now, tokio::time::Instant::now());
            return None;
        }
        (last.1.elapsed() >= SETTLED).then_some(now)
    })
    .await
    .expect("Envoy's update counters never settled")
}

/// Every GET through Envoy's listener on `port` answers the backend, polled
/// for `how_long`.
async fn serves_throughout(port: u16, how_long: Duration, test: &str) {
    let ended = eventually(how_long, POLL_INTERVAL, || async {
        let (status, body) = process::http_get(port, "/")
            .await
            .unwrap_or_else(|e| panic!("{test}: no answer through Envoy's listener: {e}"));
        assert_eq!(
            (status, body.as_str()),
            (200, BACKEND_BODY),
            "{test}: traffic stopped"
        );
        None::<()>
    })
    .await;
    assert!(ended.is_none());
}

fn only(stats: &BTreeMap<String, u64>, suffix: &str) -> BTreeMap<String, u64> {
    stats
        .iter()
        .filter(|(name, _)| name.ends_with(suffix))
        .map(|(name, value)| (name.clone(), *value))
        .collect()
}

/// One transport: `--upstream-mode` and `--upstream-streams`.
#[derive(Debug, Clone, Copy)]
struct Transport {
    mode: &'static str,
    streams: &'static str,
}

async fn run(transport: Transport, envoy_bin: PathBuf, dir: PathBuf) {
    let Transport { mode, streams } = transport;
    let test = format!("go_control_plane_envoy ({mode}, {streams})");
    let backend = envoy::serve(Router::new().fallback(|| async { BACKEND_BODY })).await;
    let listener_port = free_port();
    // Per-type streams against a control plane that serves no ADS.
    let peer_flags: &[&str] = match streams {
        "per-type" => &["--no-ads"],
        _ => &[],
    };
    let cp = GoControlPlane::start_with(&test, peer_flags);
    let resources = vec![
        (envoy::CLUSTER_TYPE, vec![backend_cluster("1s")]),
        (
            envoy::CLA_TYPE,
            vec![json(&envoy::cla_json("backend", backend))],
        ),
        (
            envoy::LISTENER_TYPE,
            vec![json(&envoy::listener_json(
                "listener_0",
                "127.0.0.1",
                listener_port,
                ADS_SOURCE,
            ))],
        ),
        (envoy::ROUTE_TYPE, vec![json(&envoy::route_json(None))]),
    ];
    cp.set_snapshot("*", "1", &resources).await;
    let gateway = envoy::start_gateway(
        &cp.upstream(),
        Duration::from_millis(200),
        &["--upstream-mode", mode, "--upstream-streams", streams],
        false,
        &dir,
    )
    .await;
    let envoy_admin = free_port();
    let node = format!("gcp-envoy-{mode}-{streams}");
    let mut envoy = Envoy::start(
        &envoy_bin,
        &dir,
        &envoy::rest_bootstrap(&node, envoy_admin, gateway.port),
    );
    let mut gateway_guard = gateway.guard;
    let mut alive = || {
        envoy.assert_running();
        gateway_guard.assert_running();
    };

    // 1. Converged: everything applied, traffic through the listener.
    envoy::wait_for_updates(
        envoy_admin,
        &FIXTURE_SUBSCRIPTIONS,
        1,
        CONVERGE_TIMEOUT,
        &mut alive,
        || true,
    )
    .await
    .unwrap_or_else(|last| panic!("{test}: Envoy did not converge; last /stats:\n{last}"));
    let through = |within: Duration| {
        get_until(
            listener_port,
            "/",
            within,
            POLL_INTERVAL,
            || {},
            |b| b == BACKEND_BODY,
        )
    };
    through(CONVERGE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{test}: no traffic through Envoy's listener: {e}"));

    // 2. One cluster changes upstream: Envoy takes exactly that update.
    let before = updates(envoy_admin).await;
    cp.set_cluster(&node, "2", backend_cluster("2s")).await;
    let cds = "cluster_manager.cds.update_success";
    let taken = eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        let now = updates(envoy_admin).await;
        (now.get(cds) > before.get(cds)).then_some(now)
    })
    .await
    .unwrap_or_else(|| panic!("{test}: Envoy never took the changed cluster"));
    assert_eq!(
        only(&taken, "update_rejected").values().sum::<u64>(),
        0,
        "{test}: {taken:?}"
    );

    // 3. go-control-plane's gRPC listener restarts; Envoy notices nothing.
    // The counters are read once they have settled: a changed cluster is
    // rebuilt and fetches its endpoints again a moment after CDS counts it.
    let settled = settled_updates(envoy_admin).await;
    cp.stop_grpc().await;
    serves_throughout(listener_port, OUTAGE, &test).await;
    cp.start_grpc().await;
    serves_throughout(listener_port, AFTER_RESTART, &test).await;
    let restarted = updates(envoy_admin).await;
    alive();
    for suffix in ["update_failure", "update_success", "update_rejected"] {
        assert_eq!(
            only(&restarted, suffix),
            only(&settled, suffix),
            "{test}: Envoy's {suffix} counters moved across go-control-plane's restart \
             (failed polls, re-delivered resources or rejections)"
        );
    }

    // 4. After the restart a change still reaches Envoy.
    cp.set_cluster(&node, "3", backend_cluster("3s")).await;
    eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        let now = updates(envoy_admin).await;
        (now.get(cds) > restarted.get(cds)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{test}: a change after the restart never reached Envoy"));
}

/// One test per transport, each bounded by `envoy::run_bounded`.
macro_rules! transport_test {
    ($($name:ident: $mode:literal, $streams:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let transport = Transport { mode: $mode, streams: $streams };
            envoy::run_bounded(stringify!($name), |bin, dir| run(transport, bin, dir)).await;
        }
    )*};
}

transport_test! {
    envoy_through_the_gateway_over_aggregated_sotw: "sotw", "aggregated";
    envoy_through_the_gateway_over_aggregated_delta: "delta", "aggregated";
    envoy_through_the_gateway_over_per_type_sotw: "sotw", "per-type";
    envoy_through_the_gateway_over_per_type_delta: "delta", "per-type";
    envoy_through_the_gateway_over_fetch: "fetch", "aggregated";
    envoy_through_the_gateway_in_auto_mode: "auto", "aggregated";
}
