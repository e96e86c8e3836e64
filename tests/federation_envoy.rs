//! The federation example of docs/federation.md run as written (issue 22):
//! `examples/federation/xds-gateway.toml` in front of three real
//! go-control-plane servers ("mesh", its failover "mesh-backup", and "edge"
//! claiming `edge.example`), and a real REST Envoy 1.40 on
//! `examples/federation/envoy-rest-bootstrap.yaml`, whose two EDS clusters
//! are named in two xdstp authorities. Only ports (and, to keep the test
//! short, the failover times and Envoy's refresh) are rewritten.
//!
//! 1. Envoy converges: both clusters get their endpoints, each from the
//!    control plane of its authority, and traffic reaches both backends.
//! 2. A change on the edge reaches Envoy; the mesh side is not re-delivered
//!    (its `update_success` stays: the gateway answers it 304).
//! 3. The mesh control plane is SIGKILLed: Envoy's polls never fail, no
//!    update is re-delivered (the backup serves the same content), traffic
//!    flows throughout, and the session moves to mesh-backup; when mesh
//!    comes back on its address, the session returns.
//! 4. A change on the mesh side then reaches Envoy; the edge side is not
//!    re-delivered.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use serde_json::{json, Value};

use envoy::{Envoy, CONVERGE_TIMEOUT, POLL_INTERVAL};
use go_peer::GoControlPlane;
use process::{eventually, free_port, get_until, http_get};

const TEST: &str = "federation_envoy";
const WEB_BODY: &str = "hello from web (mesh.example)";
const API_BODY: &str = "hello from api (edge.example)";
const WEB: &str = "xdstp://mesh.example/envoy.config.endpoint.v3.ClusterLoadAssignment/web";
const API: &str = "xdstp://edge.example/envoy.config.endpoint.v3.ClusterLoadAssignment/api";
/// The example's listener port, and its admin port.
const EXAMPLE_LISTENER: &str = "port_value: 10000";
const EXAMPLE_ADMIN: &str = "port_value: 9902";
const EXAMPLE_GATEWAY: &str = "port_value: 8080";

fn example(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/federation")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with `from` replaced, which must occur in it.
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the example no longer has {from:?}");
    text.replace(from, to)
}

fn cla(name: &str, ports: &[u16]) -> Value {
    let endpoints: Vec<Value> = ports
        .iter()
        .map(|port| {
            json!({"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}})
        })
        .collect();
    json!({
        "@type": envoy::CLA_TYPE,
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": endpoints}]
    })
}

/// Envoy's EDS counters and member counts of the two clusters.
async fn cluster_stats(admin: u16) -> BTreeMap<String, u64> {
    envoy::counters(admin, &["cluster.web.", "cluster.api."]).await
}

fn stat(stats: &BTreeMap<String, u64>, name: &str) -> u64 {
    stats.get(name).copied().unwrap_or(0)
}

/// Every GET of `path` through Envoy's listener answers `body`, for `how_long`.
async fn serves_throughout(port: u16, path: &str, body: &str, how_long: Duration) {
    let ended = eventually(how_long, POLL_INTERVAL, || async {
        let (status, got) = http_get(port, path)
            .await
            .unwrap_or_else(|e| panic!("{TEST}: no answer through Envoy's listener: {e}"));
        assert_eq!(
            (status, got.as_str()),
            (200, body),
            "{TEST}: traffic to {path} stopped"
        );
        None::<()>
    })
    .await;
    assert!(ended.is_none());
}

async fn session_upstream(admin: u16) -> Option<Value> {
    let (_, body) = http_get(admin, "/debug/sessions").await.ok()?;
    let sessions: Value = serde_json::from_str(&body).ok()?;
    sessions["sessions"]
        .as_array()?
        .iter()
        .find(|s| s["node_id"] == "federated-envoy" && s["serves"] == "mesh")
        .map(|s| s["upstream"].clone())
}

async fn wait_session_on(admin: u16, upstream: &str) {
    let on = eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        let placement = session_upstream(admin).await?;
        (placement["upstream"] == upstream).then_some(())
    })
    .await;
    assert!(
        on.is_some(),
        "{TEST}: the mesh session never moved to {upstream}: {:?}",
        session_upstream(admin).await
    );
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let web = envoy::serve(Router::new().fallback(|| async { WEB_BODY })).await;
    let api = envoy::serve(Router::new().fallback(|| async { API_BODY })).await;
    let api_too = envoy::serve(Router::new().fallback(|| async { API_BODY })).await;
    let mesh = GoControlPlane::start(TEST);
    let backup = GoControlPlane::start(TEST);
    let edge = GoControlPlane::start(TEST);
    let mesh_snapshot = [(envoy::CLA_TYPE, vec![cla(WEB, &[web])])];
    mesh.set_snapshot("*", "mesh-1", &mesh_snapshot).await;
    backup.set_snapshot("*", "backup-1", &mesh_snapshot).await;
    edge.set_snapshot("*", "edge-1", &[(envoy::CLA_TYPE, vec![cla(API, &[api])])])
        .await;

    // The example's gateway config, on the peers' ports, failing over fast.
    let mesh_address = mesh.upstream().replace("http://", "");
    let mut config = example("xds-gateway.toml");
    for (from, to) in [
        ("127.0.0.1:18000", mesh_address.clone()),
        ("127.0.0.1:18001", backup.upstream().replace("http://", "")),
        ("127.0.0.1:18002", edge.upstream().replace("http://", "")),
        ("failover-after = \"5s\"", "failover-after = \"1s\"".into()),
        ("failback-after = \"30s\"", "failback-after = \"2s\"".into()),
    ] {
        config = replaced(&config, from, &to);
    }
    let config_path = dir.join("xds-gateway.toml");
    std::fs::write(&config_path, config).expect("write the gateway config");
    let (port, admin) = (free_port(), free_port());
    let mut gateway = envoy::spawn_gateway(
        [
            "--config".to_owned(),
            config_path.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin".into(),
            format!("127.0.0.1:{admin}"),
        ],
        false,
        &dir.join(envoy::GATEWAY_LOG),
    );
    envoy::wait_gateway_ready(&mut gateway, admin, POLL_INTERVAL, TEST).await;

    // The example's Envoy, on free ports, refreshing every 0.2 s.
    let (listener, envoy_admin) = (free_port(), free_port());
    let mut bootstrap = example("envoy-rest-bootstrap.yaml");
    for (from, to) in [
        (EXAMPLE_LISTENER, format!("port_value: {listener}")),
        (EXAMPLE_ADMIN, format!("port_value: {envoy_admin}")),
        (EXAMPLE_GATEWAY, format!("port_value: {port}")),
        ("refresh_delay: 1s", "refresh_delay: 0.2s".into()),
    ] {
        bootstrap = replaced(&bootstrap, from, &to);
    }
    let mut envoy = Envoy::start(&envoy_bin, &dir, &bootstrap);

    // 1. Both authorities' endpoints, each from its own control plane.
    for (path, body) in [("/", WEB_BODY), ("/api", API_BODY)] {
        get_until(
            listener,
            path,
            CONVERGE_TIMEOUT,
            POLL_INTERVAL,
            || envoy.assert_running(),
            |b| b == body,
        )
        .await
        .unwrap_or_else(|e| panic!("{TEST}: {path} never reached its backend: {e}"));
    }

    // 2. A change on the edge: the api cluster takes it, web is not re-delivered.
    let before = cluster_stats(envoy_admin).await;
    edge.set_snapshot(
        "*",
        "edge-2",
        &[(envoy::CLA_TYPE, vec![cla(API, &[api, api_too])])],
    )
    .await;
    let after = eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        let now = cluster_stats(envoy_admin).await;
        (stat(&now, "cluster.api.membership_total") == 2).then_some(now)
    })
    .await
    .unwrap_or_else(|| panic!("{TEST}: the edge's change never reached Envoy"));
    assert!(
        stat(&after, "cluster.api.update_success") > stat(&before, "cluster.api.update_success"),
        "{after:?}"
    );
    assert_eq!(
        stat(&after, "cluster.web.update_success"),
        stat(&before, "cluster.web.update_success"),
        "{TEST}: the unchanged mesh side was delivered again"
    );

    // 3. The mesh control plane dies; Envoy notices nothing.
    let settled = cluster_stats(envoy_admin).await;
    let mesh_pid = mesh.pid();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &mesh_pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    drop(mesh);
    serves_throughout(listener, "/", WEB_BODY, Duration::from_secs(1)).await;
    wait_session_on(admin, "mesh-backup").await;
    serves_throughout(listener, "/", WEB_BODY, Duration::from_secs(1)).await;
    let failed_over = cluster_stats(envoy_admin).await;
    for name in [
        "cluster.web.update_failure",
        "cluster.web.update_success",
        "cluster.web.update_rejected",
    ] {
        assert_eq!(
            stat(&failed_over, name),
            stat(&settled, name),
            "{TEST}: {name} moved across the failover"
        );
    }

    // Mesh comes back on its address: the session returns to it.
    let mesh = GoControlPlane::start_with(TEST, &["--grpc", &mesh_address]);
    mesh.set_snapshot("*", "mesh-2", &mesh_snapshot).await;
    wait_session_on(admin, "mesh").await;
    serves_throughout(listener, "/", WEB_BODY, Duration::from_secs(1)).await;
    let back = cluster_stats(envoy_admin).await;
    assert_eq!(
        stat(&back, "cluster.web.update_failure"),
        stat(&settled, "cluster.web.update_failure"),
        "{TEST}: a poll failed around the failback"
    );

    // 4. A change on the mesh side reaches Envoy too (from mesh, now back);
    // the edge side is not re-delivered.
    let before = cluster_stats(envoy_admin).await;
    let web_too = envoy::serve(Router::new().fallback(|| async { WEB_BODY })).await;
    mesh.set_snapshot(
        "*",
        "mesh-3",
        &[(envoy::CLA_TYPE, vec![cla(WEB, &[web, web_too])])],
    )
    .await;
    let after = eventually(CONVERGE_TIMEOUT, POLL_INTERVAL, || async {
        let now = cluster_stats(envoy_admin).await;
        (stat(&now, "cluster.web.membership_total") == 2).then_some(now)
    })
    .await
    .unwrap_or_else(|| panic!("{TEST}: the mesh's change never reached Envoy"));
    assert_eq!(
        stat(&after, "cluster.api.update_success"),
        stat(&before, "cluster.api.update_success"),
        "{TEST}: the unchanged edge side was delivered again"
    );
    envoy.assert_running();
    gateway.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_federation_example_serves_a_rest_envoy_two_authorities_through_a_failover() {
    envoy::run_bounded(TEST, run).await;
}
