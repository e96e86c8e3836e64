//! Istio's own xDS server as a test peer (`tests/peers/istio/`, a Go module
//! of its own, pinned by its `go.mod`/`go.sum`): istiod's config generator
//! and ADS server (`istio.io/istio/pilot/test/xds`, the fake discovery
//! server Istio's own tests use) over a fake Kubernetes client holding a
//! small bookinfo mesh. Built with `go build` (once per test process, into
//! the target directory; Go's own build cache makes a rebuild cheap, but a
//! cold build compiles Istio and Kubernetes' client: minutes), started on
//! kernel-chosen loopback ports, driven over its HTTP control API
//! (`tests/peers/istio/README.md`), and killed when the handle drops (its
//! stdin closing also makes it exit).
//!
//! Without a Go toolchain the test fails, saying how to install one;
//! `$ISTIO_PEER` names a binary built beforehand (`scripts/test` builds it
//! once for every test binary).
//!
//! Include it with `#[path = "support/istio_peer.rs"] mod istio_peer;` (it
//! needs `mod process;` and `mod gateway;` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

#[path = "go_build.rs"]
mod go_build;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::gateway::{http_request, Reply};
use crate::process::ChildGuard;
use go_build::GoProgram;

/// Bound on one control API call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on `POST /xds` beyond the peer's own wait for Istio's answer.
const XDS_SLACK: Duration = Duration::from_secs(10);
/// Bound on the peer's start (its first stdout line): Istio's informers
/// sync and its first push context is built before it prints.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on `go build`: a cold build compiles Istio, Kubernetes' client
/// and Envoy's Go API (about 7 minutes on 2 busy cores, module download
/// included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// Type URLs Istio serves on ADS.
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// The pods of the peer's mesh (`GET /mesh` has them all, with their nodes).
pub const PRODUCTPAGE_POD: &str = "productpage-v1-6b746f74dc-9stvs";
pub const DETAILS_POD: &str = "details-v1-79f774bdb9-wq4rt";
pub const REVIEWS_V1_POD: &str = "reviews-v1-545db77b95-2psdf";
pub const REVIEWS_V2_POD: &str = "reviews-v2-7bf8c9648f-6q8kx";
pub const REVIEWS_V3_POD: &str = "reviews-v3-84779c7bbc-b5t7p";
pub const RATINGS_POD: &str = "ratings-v1-7dc98c7588-x7k5n";
pub const HTTPBIN_POD: &str = "httpbin-5c5c5f8c6b-k2v9d";
pub const INGRESS_POD: &str = "istio-ingressgateway-7b5c9c6d8f-q9xzm";

/// The Istio peer, a Go module of its own.
static PROGRAM: GoProgram = GoProgram {
    what: "the Istio test peer",
    env: "ISTIO_PEER",
    module: "tests/peers/istio",
    package: ".",
    output: "istio-peer",
    strip: true,
    timeout: BUILD_TIMEOUT,
};

/// The peer binary: `$ISTIO_PEER`, else built here once.
pub fn binary(test: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROGRAM.binary(test, &BUILT)
}

/// A running Istio peer.
pub struct IstioPeer {
    guard: ChildGuard,
    /// Closing it (on drop) also tells the peer to exit.
    _stdin: ChildStdin,
    /// Istio's gRPC ADS server, `127.0.0.1:PORT`.
    pub grpc: String,
    /// Its HTTP control API's port.
    pub control_port: u16,
    _dir: tempfile::TempDir,
}

impl IstioPeer {
    /// Starts the peer on kernel-chosen loopback ports.
    pub fn start(test: &str) -> IstioPeer {
        IstioPeer::start_with(test, &[])
    }

    /// [`start`](Self::start) with extra peer flags (`--debounce 100ms`:
    /// istiod's own push debounce instead of none; `--log-level ...`).
    pub fn start_with(test: &str, flags: &[&str]) -> IstioPeer {
        let bin = binary(test);
        let dir = tempfile::tempdir().expect("a temp dir for the peer's log");
        let log = dir.path().join("istio-peer.log");
        let mut child = Command::new(&bin)
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the peer's log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", bin.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let guard = ChildGuard::new(format!("Istio peer ({test})"), child).with_log(&log);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            panic!(
                "{test}: the Istio peer printed no addresses within {START_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let addresses: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!(
                "{test}: the Istio peer's first line is not its addresses ({e}): {line:?}\n{}",
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
        let (grpc, control_port) = (port("grpc"), port("http"));
        IstioPeer {
            guard,
            _stdin: stdin,
            grpc: format!("127.0.0.1:{grpc}"),
            control_port,
            _dir: dir,
        }
    }

    /// The gateway's `--upstream` for this peer.
    pub fn upstream(&self) -> String {
        format!("grpc://{}", self.grpc)
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// Panics (its log printed) if the peer has exited.
    pub fn assert_running(&mut self) {
        self.guard.assert_running();
    }

    /// The peer's log so far (Istio's own log lines included).
    pub fn log_text(&self) -> String {
        self.guard.log_text()
    }

    /// One control API call, whatever its status.
    pub async fn call(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: String,
        timeout: Duration,
    ) -> Reply {
        http_request(
            self.control_port,
            method.clone(),
            path,
            &[("content-type", content_type)],
            body,
            timeout,
        )
        .await
        .unwrap_or_else(|e| panic!("Istio peer {method} {path}: {e}"))
    }

    /// A control API call that must answer 200 with JSON.
    async fn control(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: String,
        timeout: Duration,
    ) -> Value {
        let reply = self
            .call(method.clone(), path, content_type, body, timeout)
            .await;
        assert_eq!(
            reply.status,
            200,
            "Istio peer {method} {path}: {}",
            reply.text()
        );
        reply.json()
    }

    /// The mesh: every pod (`namespace`, `name`, `ip`, `labels`,
    /// `service_account`, `node_id`, and `node`: the Envoy node Istio's
    /// agent would send for it) and every Kubernetes service.
    pub async fn mesh(&self) -> Value {
        self.control(
            http::Method::GET,
            "/mesh",
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// The Envoy node (JSON) of pod `name` of the mesh.
    pub async fn node(&self, name: &str) -> Value {
        let mesh = self.mesh().await;
        mesh["pods"]
            .as_array()
            .and_then(|pods| pods.iter().find(|p| p["name"] == name))
            .map(|p| p["node"].clone())
            .unwrap_or_else(|| panic!("no pod {name} in the Istio peer's mesh: {mesh}"))
    }

    /// Adds or replaces Istio config (one or more objects, YAML or JSON, as
    /// `kubectl apply` takes them; validated by Istio), then waits until
    /// Istio has taken the change into its push context. Returns
    /// `{"applied": [...], "push": {...}}`.
    pub async fn add_config(&self, yaml_or_json: &str) -> Value {
        self.control(
            http::Method::POST,
            "/config",
            "application/yaml",
            yaml_or_json.to_owned(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// Deletes one Istio config object (`kind` as in its YAML, e.g.
    /// `ServiceEntry`).
    pub async fn delete_config(&self, kind: &str, namespace: &str, name: &str) -> Value {
        self.control(
            http::Method::DELETE,
            &format!("/config?kind={kind}&namespace={namespace}&name={name}"),
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// Takes pod `name` out of the mesh as Kubernetes would (its endpoint
    /// leaves its services' EndpointSlices, then the pod goes): Istio makes
    /// an incremental EDS push of those services only.
    pub async fn remove_pod(&self, namespace: &str, name: &str) -> Value {
        self.control(
            http::Method::POST,
            &format!("/pods/remove?namespace={namespace}&name={name}"),
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// Puts back a pod [`remove_pod`](Self::remove_pod) took out.
    pub async fn add_pod(&self, namespace: &str, name: &str) -> Value {
        self.control(
            http::Method::POST,
            &format!("/pods/add?namespace={namespace}&name={name}"),
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// Adds a new pod (a Kubernetes Pod, YAML or JSON, with `status.podIP`)
    /// and its endpoint to the services of the mesh that select it.
    pub async fn add_pod_object(&self, pod: &str) -> Value {
        self.control(
            http::Method::POST,
            "/pods/add",
            "application/yaml",
            pod.to_owned(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// What the ADS streams did: per stream (node id, ACKs, NACKs with
    /// their `error_detail`, pushes per type), the lists of requests,
    /// responses, ACKs and NACKs, and Istio's own per-connection state.
    pub async fn stats(&self) -> Value {
        self.control(
            http::Method::GET,
            "/stats",
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await
    }

    /// Clears the recorded lists and counters.
    pub async fn clear_stats(&self) {
        self.control(
            http::Method::DELETE,
            "/stats",
            "application/json",
            String::new(),
            CONTROL_TIMEOUT,
        )
        .await;
    }

    /// What Istio sends `node` directly: the peer opens an ADS stream of its
    /// own as that node, asks for `type_url` (`names`: none for a wildcard
    /// type) and returns Istio's first response: `version_info`, `nonce`,
    /// `names`, and `resources` (each as protojson's `Any`, `@type` first,
    /// field names in lowerCamelCase).
    pub async fn direct_xds(
        &self,
        node: &Value,
        type_url: &str,
        names: &[&str],
        delta: bool,
    ) -> Value {
        let timeout_ms = 10_000u64;
        self.control(
            http::Method::POST,
            "/xds",
            "application/json",
            json!({
                "node": node,
                "type_url": type_url,
                "resource_names": names,
                "delta": delta,
                "timeout_ms": timeout_ms,
            })
            .to_string(),
            Duration::from_millis(timeout_ms) + XDS_SLACK,
        )
        .await
    }

    /// The FileDescriptorSet (protobuf bytes) of the Istio-specific types
    /// Istio puts inside Envoy config, with their imports: what the
    /// gateway's `--descriptor-set` reads.
    pub async fn descriptors(&self) -> Vec<u8> {
        let reply = self
            .call(
                http::Method::GET,
                "/descriptors",
                "text/plain",
                String::new(),
                CONTROL_TIMEOUT,
            )
            .await;
        assert_eq!(
            reply.status,
            200,
            "Istio peer GET /descriptors: {}",
            reply.text()
        );
        base64::engine::general_purpose::STANDARD
            .decode(reply.text().trim())
            .unwrap_or_else(|e| panic!("GET /descriptors is not base64: {e}"))
    }

    /// [`descriptors`](Self::descriptors) written to `dir/istio.pb`, for the
    /// gateway's `--descriptor-set`.
    pub async fn write_descriptor_set(&self, dir: &Path) -> PathBuf {
        let path = dir.join("istio.pb");
        std::fs::write(&path, self.descriptors().await)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}
