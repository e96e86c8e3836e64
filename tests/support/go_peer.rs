//! go-control-plane as a test peer (`tests/peers/go-control-plane/`, a Go
//! module of its own, pinned by its `go.mod`/`go.sum`): built with
//! `go build` (once per test process, into the target directory; Go's own
//! build cache makes a rebuild cheap), started on kernel-chosen loopback
//! ports, driven over its small HTTP control API, and killed when the
//! handle drops (its stdin closing also makes it exit).
//!
//! Without a Go toolchain the test fails, saying how to install one;
//! `$GO_CONTROL_PLANE_PEER` names a binary built beforehand (`scripts/test`
//! builds it once for every test binary).
//!
//! Include it with `#[path = "support/go_peer.rs"] mod go_peer;` (it needs
//! `mod process;` and `mod gateway;` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

#[path = "go_build.rs"]
mod go_build;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway::http_request;
use crate::process::ChildGuard;
use go_build::GoProgram;

/// Bound on one control API call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the peer's start (its first stdout line).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on `go build` (a cold module download and build included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// The go-control-plane peer, a Go module of its own.
static PROGRAM: GoProgram = GoProgram {
    what: "the go-control-plane test peer",
    env: "GO_CONTROL_PLANE_PEER",
    module: "tests/peers/go-control-plane",
    package: ".",
    output: "go-control-plane-peer",
    strip: false,
    timeout: BUILD_TIMEOUT,
};

/// The peer binary: `$GO_CONTROL_PLANE_PEER`, else built here once.
pub fn binary(test: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROGRAM.binary(test, &BUILT)
}

/// A running go-control-plane peer.
pub struct GoControlPlane {
    guard: ChildGuard,
    /// Closing it (on drop) also tells the peer to exit.
    _stdin: ChildStdin,
    /// Its gRPC xDS server, `127.0.0.1:PORT`.
    pub grpc: String,
    /// Its HTTP control API's port.
    pub control_port: u16,
    /// go-control-plane's own REST front end (`HTTPGateway`)'s port.
    pub gateway_port: u16,
    _dir: tempfile::TempDir,
}

impl GoControlPlane {
    /// Starts the peer on kernel-chosen loopback ports.
    pub fn start(test: &str) -> GoControlPlane {
        GoControlPlane::start_with(test, &[])
    }

    /// [`start`](Self::start) with extra peer flags (`--no-ads`: the
    /// per-type services only; `--record=false`: the callbacks record
    /// nothing, as benchmarks want).
    pub fn start_with(test: &str, flags: &[&str]) -> GoControlPlane {
        let bin = binary(test);
        let dir = tempfile::tempdir().expect("a temp dir for the peer's log");
        let log = dir.path().join("go-control-plane.log");
        let mut child = Command::new(&bin)
            .args([
                "--grpc",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--gateway",
                "127.0.0.1:0",
            ])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the peer's log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", bin.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let guard =
            ChildGuard::new(format!("go-control-plane peer ({test})"), child).with_log(&log);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            panic!(
                "{test}: the go-control-plane peer printed no addresses within {START_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let addresses: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!(
                "{test}: the peer's first line is not its addresses ({e}): {line:?}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let port = |key: &str| -> u16 {
            addresses[key]
                .as_str()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, port)| port.parse().ok())
                .unwrap_or_else(|| panic!("{test}: no {key} address in {addresses}"))
        };
        let (grpc, control_port, gateway_port) = (port("grpc"), port("http"), port("gateway"));
        GoControlPlane {
            guard,
            _stdin: stdin,
            grpc: format!("127.0.0.1:{grpc}"),
            control_port,
            gateway_port,
            _dir: dir,
        }
    }

    /// The gateway's `--upstream` for this peer.
    pub fn upstream(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// Panics (its log printed) if the peer has exited.
    pub fn assert_running(&mut self) {
        self.guard.assert_running();
    }

    async fn control(&self, method: http::Method, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let reply = http_request(
            self.control_port,
            method.clone(),
            path,
            &[("content-type", "application/json")],
            body,
            CONTROL_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("go-control-plane peer {method} {path}: {e}"));
        assert_eq!(
            reply.status,
            200,
            "go-control-plane peer {method} {path}: {}",
            reply.text()
        );
        if reply.body.is_empty() {
            Value::Null
        } else {
            reply.json()
        }
    }

    /// Serves `resources` (type URL → JSON `Any`s, `@type` included) at
    /// `version` to `node` (`*`: every node, and nodes that come later).
    pub async fn set_snapshot(&self, node: &str, version: &str, resources: &[(&str, Vec<Value>)]) {
        let resources: serde_json::Map<String, Value> = resources
            .iter()
            .map(|(type_url, list)| ((*type_url).to_owned(), Value::Array(list.clone())))
            .collect();
        self.control(
            http::Method::PUT,
            &format!("/snapshot?node={node}"),
            Some(json!({"version": version, "resources": resources})),
        )
        .await;
    }

    /// Replaces (or adds) one cluster in `node`'s snapshot, at `version`.
    pub async fn set_cluster(&self, node: &str, version: &str, cluster: Value) {
        self.control(
            http::Method::POST,
            &format!("/cluster?node={node}&version={version}"),
            Some(cluster),
        )
        .await;
    }

    /// Stops the gRPC listener (every stream closed).
    pub async fn stop_grpc(&self) {
        self.control(http::Method::POST, "/grpc/stop", None).await;
    }

    /// Starts the gRPC listener again on the same address.
    pub async fn start_grpc(&self) {
        self.control(http::Method::POST, "/grpc/start", None).await;
    }

    /// What its callbacks recorded: requests, responses, ACKs and NACKs.
    pub async fn stats(&self) -> Value {
        self.control(http::Method::GET, "/stats", None).await
    }
}
