//! The two ends of Kuma's monitoring assignments (MADS) as test peers
//! (`tests/peers/kuma/`, a Go module pinned by its `go.mod`/`go.sum`):
//!
//! - [`MadsServer`]: go-control-plane's xDS server serving
//!   `kuma.observability.v1.MonitoringAssignment` over ADS (SotW and delta)
//!   and Kuma's own `MonitoringAssignmentDiscoveryService`, with gRPC
//!   server reflection, driven over its JSON control API;
//! - [`KumaSd`]: Prometheus's own Kuma service discovery
//!   (`discovery/xds`, what `kuma_sd_configs` runs), pointed at a REST
//!   server, each target-group update it sees one JSON line, and its own
//!   discovery metrics.
//!
//! Each is `$MADS_SERVER_PEER` / `$KUMA_SD_PEER` (`scripts/test` builds
//! both), else built here once; started on loopback ports, killed when the
//! handle drops (its stdin closing also makes it exit).
//!
//! Include it with `#[path = "support/kuma_peers.rs"] mod kuma_peers;` (it
//! needs `mod process;` and `mod gateway;` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

#[path = "go_build.rs"]
mod go_build;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::gateway::http_request;
use crate::process::ChildGuard;
use go_build::GoProgram;

/// Bound on one control API call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a peer's start (its first stdout line).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on `go build` (a cold module download and build included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// The MADS type URL.
pub const MADS_TYPE: &str = "type.googleapis.com/kuma.observability.v1.MonitoringAssignment";

static MADS_SERVER: GoProgram = GoProgram {
    what: "the MADS server test peer",
    env: "MADS_SERVER_PEER",
    module: "tests/peers/kuma",
    package: "./cmd/mads-server",
    output: "mads-server",
    strip: true,
    timeout: BUILD_TIMEOUT,
};

static KUMA_SD: GoProgram = GoProgram {
    what: "Prometheus's Kuma service discovery test peer",
    env: "KUMA_SD_PEER",
    module: "tests/peers/kuma",
    package: "./cmd/kuma-sd",
    output: "kuma-sd",
    strip: true,
    timeout: BUILD_TIMEOUT,
};

fn mads_server_binary(test: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    MADS_SERVER.binary(test, &BUILT)
}

fn kuma_sd_binary(test: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    KUMA_SD.binary(test, &BUILT)
}

/// A started peer: its guard, its stdin (closing it ends the peer), and
/// the lines it prints after its first.
struct Started {
    guard: ChildGuard,
    _stdin: ChildStdin,
    first: Value,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(test: &str, what: &str, bin: PathBuf, args: &[String]) -> Started {
    let dir = tempfile::tempdir().expect("a temp dir for the peer's log");
    let log = dir.path().join("peer.log");
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("the peer's log file"))
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", bin.display()));
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let guard = ChildGuard::new(format!("{what} ({test})"), child).with_log(&log);
    let lines: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = lines.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        let _ = tx.send(first);
        for line in reader.lines() {
            let Ok(line) = line else { return };
            kept.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((Instant::now(), line));
        }
    });
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
        panic!(
            "{test}: {what} printed nothing within {START_TIMEOUT:?}:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let first: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "{test}: {what}'s first line is not JSON ({e}): {line:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    Started {
        guard,
        _stdin: stdin,
        first,
        lines,
        log,
        _dir: dir,
    }
}

fn port_of(value: &Value, key: &str) -> u16 {
    value[key]
        .as_str()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no {key} address in {value}"))
}

/// A running MADS control plane.
pub struct MadsServer {
    peer: Started,
    grpc: u16,
    control: u16,
}

impl MadsServer {
    pub fn start(test: &str) -> MadsServer {
        let args = ["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"].map(String::from);
        let peer = start(test, "MADS server", mads_server_binary(test), &args);
        let (grpc, control) = (port_of(&peer.first, "grpc"), port_of(&peer.first, "http"));
        MadsServer {
            peer,
            grpc,
            control,
        }
    }

    /// `grpc://127.0.0.1:PORT`, for the gateway's upstream.
    pub fn upstream(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.grpc)
    }

    async fn call(&self, method: http::Method, path: &str, body: Option<&Value>) -> Value {
        let body = body
            .map(|b| bytes::Bytes::from(b.to_string()))
            .unwrap_or_default();
        let reply = http_request(
            self.control,
            method,
            path,
            &[("content-type", "application/json")],
            body,
            CONTROL_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("MADS server {path}: {e}"));
        assert!(
            reply.status < 300,
            "MADS server {path}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
    }

    /// Replaces every node's assignments (`assignments`: objects with
    /// `mesh`, `service`, `labels` and `targets`) at `version`.
    pub async fn set_assignments(&self, version: &str, assignments: Value) {
        let body = serde_json::json!({"version": version, "assignments": assignments});
        self.call(http::Method::PUT, "/assignments", Some(&body))
            .await;
    }

    /// What go-control-plane's callbacks saw (requests, responses, streams).
    pub async fn requests(&self) -> Value {
        self.call(http::Method::GET, "/requests", None).await
    }

    /// Stops the gRPC listener (every stream ends), as a restart does.
    pub async fn stop_grpc(&self) {
        self.call(http::Method::POST, "/stop", None).await;
    }

    /// Listens again on the same port.
    pub async fn start_grpc(&self) {
        self.call(http::Method::POST, "/start", None).await;
    }
}

/// Prometheus's Kuma service discovery, polling a REST server.
pub struct KumaSd {
    peer: Started,
    metrics: u16,
}

impl KumaSd {
    /// Polls `server` every `refresh`, each poll held up to
    /// `fetch_timeout` (Prometheus's duration syntax), as `client_id`.
    pub fn start(
        test: &str,
        server: &str,
        refresh: &str,
        fetch_timeout: &str,
        client_id: &str,
    ) -> KumaSd {
        let args = [
            "--server",
            server,
            "--refresh-interval",
            refresh,
            "--fetch-timeout",
            fetch_timeout,
            "--client-id",
            client_id,
            "--metrics",
            "127.0.0.1:0",
        ]
        .map(String::from);
        let peer = start(test, "kuma-sd", kuma_sd_binary(test), &args);
        let metrics = port_of(&peer.first, "metrics");
        KumaSd { peer, metrics }
    }

    /// Every update so far: when it was printed, and its target groups.
    pub fn updates(&self) -> Vec<(Instant, Value)> {
        let lines = self.peer.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .filter_map(|(at, line)| {
                let value: Value = serde_json::from_str(line).ok()?;
                Some((*at, value["groups"].clone()))
            })
            .collect()
    }

    /// The targets of the latest update, each its label set.
    pub fn targets(&self) -> Option<Vec<Value>> {
        let (_, groups) = self.updates().pop()?;
        Some(
            groups
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["targets"].as_array().cloned().unwrap_or_default())
                .collect(),
        )
    }

    /// One of Prometheus's own metrics (`prometheus_sd_kuma_*`), summed
    /// over its series.
    pub async fn metric(&self, name: &str) -> f64 {
        let (status, text) = crate::process::http_get(self.metrics, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("kuma-sd metrics: {e}"));
        assert_eq!(status, 200, "kuma-sd metrics: {text}");
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    /// What it logged (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.peer.log).unwrap_or_default()
    }

    pub fn assert_running(&mut self) {
        self.peer.guard.assert_running();
    }
}
