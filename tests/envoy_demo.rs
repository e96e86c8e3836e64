//! End to end: "Run a REST Envoy on it" in docs/usage.md, on free ports.
//!
//! A real Envoy 1.40 runs `examples/envoy-rest-bootstrap.yaml` against the
//! gateway serving a copy of `examples/demo/`. Nothing uses fixed ports: the
//! demo copy (in a tempdir) has its ports replaced (listener 10000, the
//! gateway's REST 8080 and admin 9901), and so has the bootstrap (gateway
//! 8080, Envoy admin 9902, refresh_delay 1s → 0.2s); the test checks the
//! bootstrap it runs is the examples file with only those values changed.
//!
//! Phases, each bounded:
//! 1. Envoy applies CDS, EDS (both demo clusters), LDS and RDS (admin
//!    `/stats`: every update_success at least 1, every update_rejected 0).
//! 2. Through Envoy's dynamic listener: `/healthz` reaches the gateway's
//!    admin listener (`ok`), `/v3/discovery:clusters?node=x` its REST
//!    listener (the demo clusters, as the gateway itself serves them).
//! 3. A route added to `routes.yaml` in the snapshot directory (a
//!    `direct_response` for `/hello`) reaches Envoy: GET `/hello` through the
//!    listener answers the new body.
//!
//! Envoy and the gateway are started, and Envoy's `/stats` read, by
//! `support/envoy.rs`.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use envoy::{Envoy, CHANGE_TIMEOUT, CLUSTER_TYPE, CONVERGE_TIMEOUT, GATEWAY_LOG, POLL_INTERVAL};
use process::{free_port, get_until, http_get, ChildGuard};

const TEST: &str = "envoy_demo";

const DEMO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo");
const BOOTSTRAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/envoy-rest-bootstrap.yaml"
);
const HELLO_BODY: &str = "hello from the snapshot directory";

/// Every port of one run (all on 127.0.0.1).
#[derive(Debug, Clone, Copy)]
struct Ports {
    /// Envoy's dynamic listener (the demo's 10000).
    listener: u16,
    /// The gateway's REST listener (8080).
    gateway: u16,
    /// The gateway's admin listener (9901).
    gateway_admin: u16,
    /// Envoy's admin (the bootstrap's 9902).
    envoy_admin: u16,
}

/// `text` with the one occurrence of `from` replaced by `to` (panics unless
/// there is exactly `count` of them).
fn replace_exactly(text: &str, from: &str, to: &str, count: usize, what: &str) -> String {
    let found = text.matches(from).count();
    assert_eq!(
        found, count,
        "{what}: expected {from:?} {count} time(s), found {found}:\n{text}"
    );
    text.replace(from, to)
}

/// Copies `examples/demo/*.yaml` into `dir`, the demo's ports replaced by
/// the run's; checks every port of the demo was one of the three.
fn copy_demo(dir: &Path, ports: Ports) {
    let substitutions = [
        ("port_value: 10000", ports.listener),
        ("port_value: 8080", ports.gateway),
        ("port_value: 9901", ports.gateway_admin),
    ];
    let mut replaced = BTreeMap::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(DEMO_DIR)
        .expect("read examples/demo")
        .map(|e| e.expect("examples/demo entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 4, "examples/demo: {entries:?}");
    for path in entries {
        let mut text = std::fs::read_to_string(&path).expect("read a demo file");
        for (from, port) in substitutions {
            let n = text.matches(from).count();
            *replaced.entry(from).or_insert(0) += n;
            text = text.replace(from, &format!("port_value: {port}"));
        }
        let ours = [ports.listener, ports.gateway, ports.gateway_admin];
        for line in text.lines().filter(|l| l.contains("port_value:")) {
            assert!(
                ours.iter()
                    .any(|p| line.contains(&format!("port_value: {p}"))),
                "{}: a port the test does not replace: {line}",
                path.display()
            );
        }
        std::fs::write(dir.join(path.file_name().unwrap()), text).expect("write a demo copy");
    }
    for (from, _) in substitutions {
        assert_eq!(replaced.get(from), Some(&1), "examples/demo: {from:?}");
    }
}

/// The examples bootstrap with the gateway port, Envoy's admin port and the
/// refresh delays replaced.
fn test_bootstrap(original: &str, ports: Ports) -> String {
    let text = replace_exactly(
        original,
        "port_value: 8080",
        &format!("port_value: {}", ports.gateway),
        1,
        "bootstrap: the gateway's port",
    );
    let text = replace_exactly(
        &text,
        "port_value: 9902",
        &format!("port_value: {}", ports.envoy_admin),
        1,
        "bootstrap: Envoy's admin port",
    );
    replace_exactly(
        &text,
        "refresh_delay: 1s",
        "refresh_delay: 0.2s",
        2,
        "bootstrap: LDS and CDS refresh delays",
    )
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
}

/// JSON pointers of the values the test changes in the bootstrap.
const XDS_PORT: &str = "/static_resources/clusters/0/load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address/port_value";
const ADMIN_PORT: &str = "/admin/address/socket_address/port_value";
const LDS_REFRESH: &str = "/dynamic_resources/lds_config/api_config_source/refresh_delay";
const CDS_REFRESH: &str = "/dynamic_resources/cds_config/api_config_source/refresh_delay";

/// The examples bootstrap is the demo's (node, admin, REST LDS/CDS toward
/// `xds_cluster` on 127.0.0.1:8080), and the one used differs from it only
/// by the substituted values.
fn check_bootstrap(original: &str, used: &str, ports: Ports) {
    let want = yaml(original);
    let get = |v: &Value, pointer: &str| -> Value {
        v.pointer(pointer)
            .cloned()
            .unwrap_or_else(|| panic!("bootstrap has no {pointer}:\n{v:#}"))
    };
    assert_eq!(get(&want, "/node/id"), "demo");
    assert_eq!(get(&want, "/node/cluster"), "demo");
    assert_eq!(
        get(&want, "/admin/address/socket_address/address"),
        "127.0.0.1"
    );
    assert_eq!(get(&want, ADMIN_PORT), 9902);
    assert_eq!(get(&want, XDS_PORT), 8080);
    assert_eq!(
        get(&want, "/static_resources/clusters/0/name"),
        "xds_cluster"
    );
    for (config, refresh) in [("lds_config", LDS_REFRESH), ("cds_config", CDS_REFRESH)] {
        let source = get(&want, &format!("/dynamic_resources/{config}"));
        assert_eq!(source["resource_api_version"], "V3", "{config}");
        let api = &source["api_config_source"];
        assert_eq!(api["api_type"], "REST", "{config}");
        assert_eq!(api["transport_api_version"], "V3", "{config}");
        assert_eq!(
            api["cluster_names"],
            serde_json::json!(["xds_cluster"]),
            "{config}"
        );
        assert_eq!(get(&want, refresh), "1s", "{config}");
    }

    let mut got = yaml(used);
    for (pointer, value, original) in [
        (XDS_PORT, Value::from(ports.gateway), Value::from(8080)),
        (
            ADMIN_PORT,
            Value::from(ports.envoy_admin),
            Value::from(9902),
        ),
        (LDS_REFRESH, Value::from("0.2s"), Value::from("1s")),
        (CDS_REFRESH, Value::from("0.2s"), Value::from("1s")),
    ] {
        let slot = got.pointer_mut(pointer).expect("substituted value");
        assert_eq!(*slot, value, "{pointer} in the bootstrap used");
        *slot = original;
    }
    assert_eq!(
        got, want,
        "the bootstrap used differs from examples/envoy-rest-bootstrap.yaml beyond ports and refresh delays"
    );
    let changed: Vec<(&str, &str)> = original
        .lines()
        .zip(used.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(original.lines().count(), used.lines().count());
    assert_eq!(changed.len(), 4, "changed lines: {changed:#?}");
}

/// (label, stat prefix) of every xDS subscription the demo makes.
const WATCHED: [(&str, &str); 5] = [
    ("cds", "cluster_manager.cds"),
    ("eds gateway_rest", "cluster.gateway_rest"),
    ("eds gateway_admin", "cluster.gateway_admin"),
    ("lds", "listener_manager.lds"),
    ("rds", "http.demo.rds.demo_routes"),
];

/// Every process and port of one run.
struct Harness {
    envoy: Envoy,
    gateway: ChildGuard,
    ports: Ports,
    snapshot: PathBuf,
}

impl Harness {
    /// Panics (logs printed by the guards) if a child has exited.
    fn check_alive(&mut self) {
        self.envoy.assert_running();
        self.gateway.assert_running();
    }

    /// Envoy's update stats for the demo's subscriptions, once every
    /// update_success is at least `min_success` (rejections fail at once).
    async fn converged(&mut self, min_success: u64, timeout: Duration) -> BTreeMap<String, u64> {
        let admin = self.ports.envoy_admin;
        let before = || self.check_alive();
        envoy::wait_for_updates(admin, &WATCHED, min_success, timeout, before, || true)
            .await
            .unwrap_or_else(|last| {
                panic!(
                    "Envoy did not reach update_success >= {min_success} for every demo \
                     subscription within {timeout:?}; last /stats:\n{last}"
                )
            })
    }

    /// GETs `path` through Envoy's listener until it answers 200 with a body
    /// `accept` takes.
    async fn get_through_envoy(
        &mut self,
        path: &str,
        timeout: Duration,
        accept: impl Fn(&str) -> bool,
    ) -> String {
        let port = self.ports.listener;
        let before = || self.check_alive();
        get_until(port, path, timeout, POLL_INTERVAL, before, accept)
            .await
            .unwrap_or_else(|last| {
                panic!(
                    "GET {path} through Envoy's listener :{port}: no expected 200 within \
                     {timeout:?}; last: {last}"
                )
            })
    }
}

async fn start(envoy_bin: &Path, dir: &Path) -> Harness {
    let ports = Ports {
        listener: free_port(),
        gateway: free_port(),
        gateway_admin: free_port(),
        envoy_admin: free_port(),
    };
    let snapshot = dir.join("snapshot");
    std::fs::create_dir(&snapshot).expect("create the snapshot directory");
    copy_demo(&snapshot, ports);

    // The gateway on the demo copy.
    let listen = format!("127.0.0.1:{}", ports.gateway);
    let admin = format!("127.0.0.1:{}", ports.gateway_admin);
    let args: [&OsStr; 8] = [
        "--snapshot".as_ref(),
        snapshot.as_ref(),
        "--listen".as_ref(),
        listen.as_ref(),
        "--admin".as_ref(),
        admin.as_ref(),
        "--refresh-delay".as_ref(),
        "200ms".as_ref(),
    ];
    let mut gateway = envoy::spawn_gateway(args, true, &dir.join(GATEWAY_LOG));
    envoy::wait_gateway_ready(
        &mut gateway,
        ports.gateway_admin,
        POLL_INTERVAL,
        "xds-gateway",
    )
    .await;

    // Envoy on the examples bootstrap, ports and refresh delays replaced.
    let original = std::fs::read_to_string(BOOTSTRAP).expect("read the examples bootstrap");
    let bootstrap = test_bootstrap(&original, ports);
    check_bootstrap(&original, &bootstrap, ports);
    let envoy = Envoy::start(envoy_bin, dir, &bootstrap);
    eprintln!(
        "{TEST}: envoy pid {} base-id {} admin :{} listener :{}; gateway pid {} :{} admin :{}",
        envoy.id(),
        envoy.base_id,
        ports.envoy_admin,
        ports.listener,
        gateway.id(),
        ports.gateway,
        ports.gateway_admin
    );
    Harness {
        envoy,
        gateway,
        ports,
        snapshot,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_envoy_runs_the_demo_and_follows_snapshot_changes() {
    envoy::run_bounded(TEST, run).await;
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let started = Instant::now();
    let mut h = start(&envoy_bin, &dir).await;

    // 1. Every demo subscription applied, none rejected.
    let stats = h.converged(1, CONVERGE_TIMEOUT).await;
    for line in envoy::update_lines(&stats, &WATCHED) {
        eprintln!("{TEST}: {line}");
    }
    eprintln!(
        "{TEST}: phase 1 (demo applied) after {:.1?}",
        started.elapsed()
    );

    // 2. The demo routes: `/` to the gateway's admin, `/v3/` to its REST port.
    let phase = Instant::now();
    let healthz = h
        .get_through_envoy("/healthz", CONVERGE_TIMEOUT, |_| true)
        .await;
    assert_eq!(healthz.trim(), "ok", "/healthz through Envoy");
    let path = "/v3/discovery:clusters?node=x";
    let through = h.get_through_envoy(path, CHANGE_TIMEOUT, |_| true).await;
    let through: Value = serde_json::from_str(&through)
        .unwrap_or_else(|e| panic!("{path} through Envoy is not JSON ({e}): {through}"));
    assert_eq!(through["typeUrl"], CLUSTER_TYPE, "{through}");
    let names: Vec<&str> = through["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("no resources: {through}"))
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["gateway_admin", "gateway_rest"], "{through}");
    // Node "x" is no Envoy: its config sources stay `ads: {}`.
    assert_eq!(
        through["resources"][0]["edsClusterConfig"]["edsConfig"]["ads"],
        serde_json::json!({}),
        "{through}"
    );
    let (status, direct) = http_get(h.ports.gateway, path)
        .await
        .expect("GET the gateway");
    assert_eq!(status, 200, "{direct}");
    let direct: Value = serde_json::from_str(&direct).expect("the gateway answers JSON");
    assert_eq!(through, direct, "through Envoy vs. from the gateway");
    eprintln!(
        "{TEST}: phase 2 (/healthz and {path} through Envoy) took {:.1?}",
        phase.elapsed()
    );

    // 3. A route added in the snapshot directory reaches Envoy.
    let phase = Instant::now();
    let routes = h.snapshot.join("routes.yaml");
    let text = std::fs::read_to_string(&routes).expect("read routes.yaml");
    let hello = format!(
        "  routes:\n  - match: {{path: /hello}}\n    direct_response: {{status: 200, body: {{inline_string: {HELLO_BODY}}}}}\n"
    );
    let text = replace_exactly(&text, "  routes:\n", &hello, 1, "routes.yaml");
    // Written whole (rename), so the watcher never reads half a file.
    let tmp = h.snapshot.join("routes.yaml.tmp");
    std::fs::write(&tmp, text).expect("write routes.yaml.tmp");
    std::fs::rename(&tmp, &routes).expect("rename over routes.yaml");
    let body = h
        .get_through_envoy("/hello", CHANGE_TIMEOUT, |b| b == HELLO_BODY)
        .await;
    assert_eq!(body, HELLO_BODY);
    let (_, readyz) = http_get(h.ports.gateway_admin, "/readyz")
        .await
        .expect("/readyz");
    let readyz: Value = serde_json::from_str(&readyz).expect("/readyz is JSON");
    assert_eq!(readyz["problems"], serde_json::json!([]), "{readyz}");
    let stats = h.converged(1, CHANGE_TIMEOUT).await;
    let rds = stats
        .get("http.demo.rds.demo_routes.update_success")
        .copied()
        .unwrap_or(0);
    assert!(rds >= 2, "RDS updates after the change: {rds}");
    // The other routes still work.
    let healthz = h
        .get_through_envoy("/healthz", CHANGE_TIMEOUT, |_| true)
        .await;
    assert_eq!(healthz.trim(), "ok");
    eprintln!(
        "{TEST}: phase 3 (routes.yaml change served by Envoy) took {:.1?}; rds update_success {rds}",
        phase.elapsed()
    );
}
