//! Harness for the tests that run a real Envoy (`envoy_gateway`,
//! `envoy_rest_codec`, `envoy_demo`) and for `docker_files`, which starts
//! the gateway binary the same way.
//!
//! Include it next to `process.rs` (it uses `crate::process`):
//!
//! ```ignore
//! #[path = "support/process.rs"] mod process;
//! #[path = "support/envoy.rs"] mod envoy;
//! ```
//!
//! This module owns:
//!
//! - [`run_bounded`]: one Envoy test in a fresh temp dir within
//!   [`TEST_TIMEOUT`] (or a bound of its own, [`run_bounded_within`]), failing (with how to install it) without Envoy, the
//!   Envoy and gateway logs ([`ENVOY_LOG`], [`GATEWAY_LOG`]) printed when
//!   time runs out; the bounds of its phases ([`CONVERGE_TIMEOUT`],
//!   [`CHANGE_TIMEOUT`]);
//! - [`spawn_gateway`] and [`wait_gateway_ready`]: the `xds-gateway` binary
//!   logging to a file, and its admin `/readyz` answering 200 with no
//!   problems;
//! - [`rest_bootstrap`]: the bootstrap of an Envoy (node cluster
//!   [`NODE_CLUSTER`]) polling LDS and CDS over REST from a static
//!   `xds_cluster`;
//! - [`Envoy`]: a running Envoy (a random `--base-id`, `--concurrency 1`, no
//!   hot restart, warnings and worse logged to [`ENVOY_LOG`]);
//! - Envoy's admin `/stats`: [`parse_stats`], [`counters`], and
//!   [`wait_for_updates`] with [`update_lines`], the rule that every watched
//!   subscription applied its updates (`update_success`) and rejected none
//!   (`update_rejected` 0);
//! - [`serve`]: an axum router on a free loopback port (backends, a REST
//!   xDS server);
//! - the xDS type URLs and the snake_case JSON fixtures [`cluster_json`],
//!   [`cla_json`], [`listener_json`] and [`route_json`], with the
//!   subscriptions Envoy makes for them ([`FIXTURE_SUBSCRIPTIONS`]).
//!
//! Everything binds and connects to 127.0.0.1 only; every wait is bounded.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::process::{
    envoy_base_id, eventually, free_port, get_until, http_get, print_log_file, require_envoy,
    ChildGuard,
};

/// A whole Envoy test, process start-up included ([`run_bounded`]).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Envoy's first full configuration (start-up included).
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// A change (upstream or in a snapshot directory) reaching Envoy, and a
/// rejection being spotted.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the helpers poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Envoy's log in a test's directory.
pub const ENVOY_LOG: &str = "envoy.log";
/// The gateway's log in a test's directory.
pub const GATEWAY_LOG: &str = "gateway.log";
/// The bootstrap [`Envoy::start`] writes into a test's directory.
pub const ENVOY_CONFIG: &str = "envoy.yaml";
/// How long [`wait_gateway_ready`] waits.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `run(envoy binary, directory)` within [`TEST_TIMEOUT`], in a temp
/// dir that outlives it. Without an Envoy binary the test fails, saying how
/// to install one (see [`require_envoy`]). When time runs out, the Envoy
/// and gateway logs in the directory are printed and the test fails.
pub async fn run_bounded<F, Fut>(test: &str, run: F)
where
    F: FnOnce(PathBuf, PathBuf) -> Fut,
    Fut: Future<Output = ()>,
{
    run_bounded_within(test, TEST_TIMEOUT, run).await;
}

/// [`run_bounded`] within `bound` instead of [`TEST_TIMEOUT`] (a test whose
/// own waits scale with what it measures of the machine).
pub async fn run_bounded_within<F, Fut>(test: &str, bound: Duration, run: F)
where
    F: FnOnce(PathBuf, PathBuf) -> Fut,
    Fut: Future<Output = ()>,
{
    let envoy = require_envoy(test);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    match tokio::time::timeout(bound, run(envoy, dir.path().to_path_buf())).await {
        Ok(()) => eprintln!("{test}: passed in {:.1?}", started.elapsed()),
        Err(_) => {
            for (name, file) in [("envoy", ENVOY_LOG), ("xds-gateway", GATEWAY_LOG)] {
                let log = dir.path().join(file);
                if log.exists() {
                    print_log_file(name, &log);
                }
            }
            panic!("{test}: did not finish within {bound:?}");
        }
    }
}

/// What [`spawn_gateway`] sets `RUST_LOG` to when asked for debug logs.
pub const GATEWAY_DEBUG_LOG: &str = "info,xds_gateway=debug";

/// Spawns the `xds-gateway` binary with `args` (`NO_COLOR=1`; with `debug`,
/// also `RUST_LOG=`[`GATEWAY_DEBUG_LOG`]), stdin and stdout null, stderr to
/// `log`; the guard prints `log` if the test fails.
pub fn spawn_gateway<I, S>(args: I, debug: bool, log: &Path) -> ChildGuard
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(env!("CARGO_BIN_EXE_xds-gateway"));
    command.args(args).env("NO_COLOR", "1");
    if debug {
        command.env("RUST_LOG", GATEWAY_DEBUG_LOG);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("create gateway.log"))
        .spawn()
        .expect("spawn xds-gateway");
    ChildGuard::new("xds-gateway", child).with_log(log)
}

/// A gateway spawned for an Envoy test: its guard and ports.
pub struct SpawnedGateway {
    pub guard: ChildGuard,
    pub port: u16,
    pub admin: u16,
}

/// Spawns the gateway in front of `upstream` on free loopback ports, its
/// rewritten EDS/RDS sources polling every `refresh`, with `extra` flags,
/// logging to [`GATEWAY_LOG`] in `dir`; returns once its `/healthz` answers.
pub async fn start_gateway(
    upstream: &str,
    refresh: Duration,
    extra: &[&str],
    debug: bool,
    dir: &Path,
) -> SpawnedGateway {
    let (port, admin) = (free_port(), free_port());
    let (listen, admin_addr) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
    let refresh = format!("{}ms", refresh.as_millis());
    let mut args = vec![
        "--upstream",
        upstream,
        "--listen",
        &listen,
        "--admin",
        &admin_addr,
        "--refresh-delay",
        &refresh,
    ];
    args.extend_from_slice(extra);
    let guard = spawn_gateway(args, debug, &dir.join(GATEWAY_LOG));
    get_until(
        admin,
        "/healthz",
        READY_TIMEOUT,
        POLL_INTERVAL,
        || {},
        |_| true,
    )
    .await
    .unwrap_or_else(|_| {
        guard.print_log();
        panic!("the gateway's /healthz did not answer within {READY_TIMEOUT:?}")
    });
    SpawnedGateway { guard, port, admin }
}

/// Waits up to [`READY_TIMEOUT`] (polling every `interval`) for the
/// gateway's admin `/readyz` on `admin_port` to answer 200, failing at once
/// if `gateway` exits; asserts it reports no problems and returns it. `what`
/// names the gateway in failure messages.
pub async fn wait_gateway_ready(
    gateway: &mut ChildGuard,
    admin_port: u16,
    interval: Duration,
    what: &str,
) -> Value {
    let before = || {
        if let Some(status) = gateway.try_exit_status() {
            panic!("{what} exited: {status}");
        }
    };
    let readyz = get_until(
        admin_port,
        "/readyz",
        READY_TIMEOUT,
        interval,
        before,
        |_| true,
    )
    .await
    .unwrap_or_else(|last| {
        panic!("{what}: /readyz not 200 within {READY_TIMEOUT:?}; last: {last}")
    });
    let readyz: Value = serde_json::from_str(&readyz).expect("/readyz is JSON");
    assert_eq!(readyz["problems"], serde_json::json!([]), "{readyz}");
    readyz
}

/// The node cluster in [`rest_bootstrap`].
pub const NODE_CLUSTER: &str = "xds-gateway-tests";

/// The bootstrap of an Envoy with node `node_id` (cluster [`NODE_CLUSTER`]),
/// admin on 127.0.0.1:`admin_port`, polling LDS and CDS over REST every 0.2s
/// from the static cluster `xds_cluster` at 127.0.0.1:`xds_port`.
pub fn rest_bootstrap(node_id: &str, admin_port: u16, xds_port: u16) -> String {
    rest_bootstrap_with(node_id, admin_port, xds_port, "")
}

/// How an Envoy's `xds_cluster` speaks HTTP/2 (one connection multiplexing
/// every REST poll) instead of HTTP/1.1 (one connection per poll in flight).
pub const XDS_CLUSTER_HTTP2: &str = r#"    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
"#;

/// [`rest_bootstrap`] with `xds_cluster_extra` (YAML lines indented for the
/// cluster's fields, e.g. [`XDS_CLUSTER_HTTP2`]) added to `xds_cluster`.
pub fn rest_bootstrap_with(
    node_id: &str,
    admin_port: u16,
    xds_port: u16,
    xds_cluster_extra: &str,
) -> String {
    let source = "{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], \
                  refresh_delay: 0.2s}";
    rest_bootstrap_from(node_id, admin_port, xds_port, source, xds_cluster_extra)
}

/// A bootstrap whose LDS and CDS come from `api_config_source` (a YAML flow
/// mapping naming `xds_cluster`), the gateway on 127.0.0.1:`xds_port`.
pub fn rest_bootstrap_from(
    node_id: &str,
    admin_port: u16,
    xds_port: u16,
    api_config_source: &str,
    xds_cluster_extra: &str,
) -> String {
    let source = api_config_source;
    format!(
        r#"node:
  id: {node_id}
  cluster: {NODE_CLUSTER}
admin:
  address:
    socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}
dynamic_resources:
  lds_config:
    resource_api_version: V3
    api_config_source: {source}
  cds_config:
    resource_api_version: V3
    api_config_source: {source}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}
{xds_cluster_extra}"#
    )
}

/// A running Envoy, killed on drop (its log printed if the test fails); it
/// dereferences to its [`ChildGuard`].
pub struct Envoy {
    guard: ChildGuard,
    /// Its `--base-id` (random, see [`envoy_base_id`]).
    pub base_id: u32,
}

impl Envoy {
    /// Writes `bootstrap` to [`ENVOY_CONFIG`] in `dir` and runs `bin` on it
    /// with a random `--base-id`, `-l warning --concurrency 1
    /// --disable-hot-restart`, stdin and stdout null, stderr to
    /// [`ENVOY_LOG`] in `dir`.
    pub fn start(bin: &Path, dir: &Path, bootstrap: &str) -> Envoy {
        let config = dir.join(ENVOY_CONFIG);
        std::fs::write(&config, bootstrap).expect("write the bootstrap");
        let log = dir.join(ENVOY_LOG);
        let base_id = envoy_base_id();
        let child = Command::new(bin)
            .arg("--config-path")
            .arg(&config)
            .args(["--base-id", &base_id.to_string()])
            .args([
                "-l",
                "warning",
                "--concurrency",
                "1",
                "--disable-hot-restart",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create envoy.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Envoy {
            guard: ChildGuard::new("envoy", child).with_log(&log),
            base_id,
        }
    }

    /// Prints what Envoy logged (warnings and worse), if anything.
    pub fn print_warnings(&self, test: &str) {
        let warnings = self.guard.log_text();
        if !warnings.trim().is_empty() {
            eprintln!("{test}: envoy stderr:\n{warnings}");
        }
    }
}

impl Deref for Envoy {
    type Target = ChildGuard;

    fn deref(&self) -> &ChildGuard {
        &self.guard
    }
}

impl DerefMut for Envoy {
    fn deref_mut(&mut self) -> &mut ChildGuard {
        &mut self.guard
    }
}

/// Waits (20 s at most) until the Envoy whose admin listens on `admin`
/// answers `path` there (`/stats?filter=server.live`: it runs; `/ready`: it
/// is initialised); `what` names it in the failure.
pub async fn wait_admin(admin: u16, path: &str, what: &str) {
    get_until(
        admin,
        path,
        Duration::from_secs(20),
        POLL_INTERVAL,
        || {},
        |_| true,
    )
    .await
    .unwrap_or_else(|last| panic!("{what}: Envoy's admin never answered {path}: {last}"));
}

/// `text` as a regex matching itself (every non-alphanumeric escaped).
fn regex_literal(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c.is_ascii_alphanumeric() || c == '_' {
            true => vec![c],
            false => vec!['\\', c],
        })
        .collect()
}

/// `text` for a query string: everything but unreserved characters as %XX.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(
            |b| match b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                true => (b as char).to_string(),
                false => format!("%{b:02X}"),
            },
        )
        .collect()
}

/// Admin `/stats` text → name → counter value.
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Envoy's counters (admin on `admin`, which must answer 200) whose names
/// start with one of `prefixes`.
pub async fn counters(admin: u16, prefixes: &[&str]) -> BTreeMap<String, u64> {
    // Envoy filters its dump itself (`?filter=` takes a regex): an Envoy
    // with a thousand clusters otherwise writes ~100,000 lines per look,
    // which a loaded machine does not serve within the GET's timeout.
    let alternatives: Vec<String> = prefixes.iter().map(|p| regex_literal(p)).collect();
    let filter = percent_encoded(&format!("^({})", alternatives.join("|")));
    let (status, text) = http_get(admin, &format!("/stats?filter={filter}"))
        .await
        .unwrap_or_else(|e| panic!("envoy /stats: {e}"));
    assert_eq!(status, 200, "envoy /stats: {text}");
    parse_stats(&text)
        .into_iter()
        .filter(|(name, _)| prefixes.iter().any(|p| name.starts_with(p)))
        .collect()
}

/// Polls Envoy's `/stats?filter=update_` (admin on `admin`) until every
/// `watched` subscription, `(label, stat prefix)`, has
/// `<prefix>.update_success` at least `min_success` and then `ready()`
/// holds; any `<prefix>.update_rejected` above 0 fails the test at once.
/// `before` runs before every poll (to fail when a process died). Returns
/// the stats, or `Err` with the last `/stats` answer when `timeout` ran out.
pub async fn wait_for_updates(
    admin: u16,
    watched: &[(&str, &str)],
    min_success: u64,
    timeout: Duration,
    mut before: impl FnMut(),
    ready: impl Fn() -> bool,
) -> Result<BTreeMap<String, u64>, String> {
    let last = Mutex::new(String::from("(admin never answered)"));
    let (last_ref, ready) = (&last, &ready);
    let found = eventually(timeout, POLL_INTERVAL, || {
        before();
        async move {
            let (status, text) = http_get(admin, "/stats?filter=update_").await.ok()?;
            *last_ref.lock().unwrap() = format!("status {status}:\n{text}");
            if status != 200 {
                return None;
            }
            let stats = parse_stats(&text);
            for (label, prefix) in watched {
                let rejected = format!("{prefix}.update_rejected");
                assert_eq!(
                    stats.get(&rejected).copied().unwrap_or(0),
                    0,
                    "Envoy rejected a {label} update ({rejected}); stats:\n{text}"
                );
            }
            let applied = watched.iter().all(|(_, prefix)| {
                stats
                    .get(&format!("{prefix}.update_success"))
                    .is_some_and(|n| *n >= min_success)
            });
            (applied && ready()).then_some(stats)
        }
    })
    .await;
    found.ok_or_else(|| last.into_inner().unwrap())
}

/// One line per `watched` subscription: its update_success and
/// update_rejected in `stats` ("absent" when Envoy has no such counter).
pub fn update_lines(stats: &BTreeMap<String, u64>, watched: &[(&str, &str)]) -> Vec<String> {
    watched
        .iter()
        .map(|(_, prefix)| {
            let [success, rejected] =
                ["update_success", "update_rejected"].map(|stat| format!("{prefix}.{stat}"));
            let value = |name: &String| stats.get(name).map_or("absent".into(), u64::to_string);
            format!(
                "{success}: {}, {rejected}: {}",
                value(&success),
                value(&rejected)
            )
        })
        .collect()
}

/// Serves `router` on 127.0.0.1:0; returns the port.
pub async fn serve(router: axum::Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        axum::serve(listener, router).await.expect("axum server");
    });
    port
}

pub const CLUSTER_TYPE: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
pub const CLA_TYPE: &str = xds_gateway::xds::ResourceType::Endpoints.type_url();
pub const LISTENER_TYPE: &str = xds_gateway::xds::ResourceType::Listeners.type_url();
pub const ROUTE_TYPE: &str = xds_gateway::xds::ResourceType::Routes.type_url();

/// The HTTP connection manager's stat prefix in [`listener_json`].
pub const STAT_PREFIX: &str = "ingress_http";
/// The RouteConfiguration [`route_json`] writes and [`listener_json`] takes
/// over RDS.
pub const ROUTE_NAME: &str = "local_route";
/// The stat prefix of that RDS subscription:
/// `http.<STAT_PREFIX>.rds.<ROUTE_NAME>`.
pub const RDS_STATS: &str = "http.ingress_http.rds.local_route";
/// `(label, stat prefix)` of the subscriptions Envoy makes for a
/// [`cluster_json`] named `backend` and a [`listener_json`]: CDS, the
/// cluster's EDS, LDS and RDS.
pub const FIXTURE_SUBSCRIPTIONS: [(&str, &str); 4] = [
    ("cds", "cluster_manager.cds"),
    ("eds", "cluster.backend"),
    ("lds", "listener_manager.lds"),
    ("rds", RDS_STATS),
];

/// A Cluster `name` of type EDS, its endpoints from `eds_source` (a JSON
/// ConfigSource).
pub fn cluster_json(name: &str, eds_source: &str) -> String {
    format!(
        r#"{{"@type": "{CLUSTER_TYPE}", "name": "{name}", "type": "EDS",
          "connect_timeout": "1s", "eds_cluster_config": {{"eds_config": {eds_source}}}}}"#
    )
}

/// The ClusterLoadAssignment of `cluster`: one endpoint, 127.0.0.1:`port`.
pub fn cla_json(cluster: &str, port: u16) -> String {
    format!(
        r#"{{"@type": "{CLA_TYPE}", "cluster_name": "{cluster}",
          "endpoints": [{{"lb_endpoints": [{{"endpoint": {{"address": {{"socket_address":
            {{"address": "127.0.0.1", "port_value": {port}}}}}}}}}]}}]}}"#
    )
}

/// A Listener `name` on `address:port` whose HttpConnectionManager
/// ([`STAT_PREFIX`]) takes [`ROUTE_NAME`] over RDS from `rds_source` (a JSON
/// ConfigSource).
pub fn listener_json(name: &str, address: &str, port: u16, rds_source: &str) -> String {
    assert_eq!(RDS_STATS, format!("http.{STAT_PREFIX}.rds.{ROUTE_NAME}"));
    format!(
        r#"{{"@type": "{LISTENER_TYPE}", "name": "{name}",
          "address": {{"socket_address": {{"address": "{address}", "port_value": {port}}}}},
          "filter_chains": [{{"filters": [{{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {{
              "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
              "stat_prefix": "{STAT_PREFIX}",
              "rds": {{"route_config_name": "{ROUTE_NAME}", "config_source": {rds_source}}},
              "http_filters": [{{"name": "envoy.filters.http.router", "typed_config": {{
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}}]
            }}}}]}}]}}"#
    )
}

/// [`ROUTE_NAME`]: every path to the cluster `backend`; with `direct`
/// `(path, body)`, first a 200 direct response with `body` for exactly
/// `path`.
pub fn route_json(direct: Option<(&str, &str)>) -> String {
    let direct = direct
        .map(|(path, body)| {
            format!(
                r#"{{"match": {{"path": "{path}"}},
                    "direct_response": {{"status": 200, "body": {{"inline_string": "{body}"}}}}}},"#
            )
        })
        .unwrap_or_default();
    format!(
        r#"{{"@type": "{ROUTE_TYPE}", "name": "{ROUTE_NAME}",
          "virtual_hosts": [{{"name": "backend", "domains": ["*"], "routes": [{direct}
            {{"match": {{"prefix": "/"}}, "route": {{"cluster": "backend"}}}}]}}]}}"#
    )
}
