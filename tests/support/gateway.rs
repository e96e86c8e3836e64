//! Harness for the gateway-against-a-real-control-plane tests: starts the
//! Python reference control plane (`tests/support/ads_server.py`: SotW and
//! delta ADS, unary Fetch*, HDS/CSDS) and the
//! `xds-gateway` binary, talks HTTP/1.1 to both, and kills both on drop.
//!
//! Include it next to `process.rs`:
//!
//! ```ignore
//! #[path = "support/process.rs"] mod process;
//! #[path = "support/gateway.rs"] mod gateway;
//! ```
//!
//! Everything is loopback-only and every wait is bounded.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::process::{eventually, free_port, http_exchange, require_python, ChildGuard, LOOPBACK};

/// How long a started process may take to announce itself / accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bound on one HTTP exchange.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

/// A reply to one HTTP request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (panics with the body text if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One HTTP/1.1 exchange with 127.0.0.1:`port` over a fresh connection,
/// bounded by `timeout`. `headers` may override `Host`.
pub async fn http_request(
    port: u16,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
    timeout: Duration,
) -> Result<Reply, String> {
    let body = body.into();
    tokio::time::timeout(timeout, exchange(port, method.clone(), path, headers, body))
        .await
        .map_err(|_| format!("{method} 127.0.0.1:{port}{path}: timed out after {timeout:?}"))?
        .map_err(|e| format!("{method} 127.0.0.1:{port}{path}: {e}"))
}

/// `GET path` on 127.0.0.1:`port`, with `Authorization: Bearer <token>`
/// when a token is given, bounded by `timeout`.
pub async fn get_with_token(
    port: u16,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Reply, String> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    http_request(
        port,
        http::Method::GET,
        path,
        &headers,
        Bytes::new(),
        timeout,
    )
    .await
}

/// Waits up to `within` until the admin `/metrics` on `admin` (open: no
/// admin token) has the line `line`; panics, naming `what`, if it never does.
pub async fn wait_for_metric(admin: u16, line: &str, within: Duration, what: &str) {
    let found = eventually(within, Duration::from_millis(20), || async move {
        let (_, metrics) = crate::process::http_get(admin, "/metrics").await.ok()?;
        metrics.lines().any(|l| l == line).then_some(())
    })
    .await;
    assert!(found.is_some(), "{what}: /metrics never had {line:?}");
}

async fn exchange(
    port: u16,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    let (status, headers, body) = http_exchange(port, method, path, headers, body).await?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// The Python reference control plane, killed on drop.
pub struct ControlPlane {
    guard: ChildGuard,
    /// Closing it (on drop) also tells the server to exit.
    _stdin: Option<ChildStdin>,
    pub ads_port: u16,
    pub control_port: u16,
    _dir: tempfile::TempDir,
}

impl ControlPlane {
    /// Starts `ads_server.py` on a kernel-chosen port (panics, saying how
    /// to install it, without the Python it needs).
    pub fn start(test: &str) -> ControlPlane {
        ControlPlane::start_with(test, &[])
    }

    /// [`start`](Self::start) with extra `ads_server.py` flags
    /// (`--strict-nonce`: go-control-plane's handling of stale nonces).
    pub fn start_with(test: &str, flags: &[&str]) -> ControlPlane {
        ControlPlane::start_on(test, 0, flags)
    }

    /// [`start_with`](Self::start_with) on a given ADS port (0: any free one),
    /// e.g. to restart a control plane where a gateway expects it.
    pub fn start_on(test: &str, port: u16, flags: &[&str]) -> ControlPlane {
        let python = require_python(test);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/ads_server.py");
        let dir = tempfile::tempdir().expect("temp dir for the control plane log");
        let log = dir.path().join("ads_server.log");
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(port.to_string())
            .args(flags)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("control plane log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let guard = ChildGuard::new("ads_server.py", child).with_log(&log);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let port = |prefix: &str| -> u16 {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|e| {
                guard.print_log();
                panic!("ads_server.py did not print {prefix} within {START_TIMEOUT:?}: {e}")
            });
            line.strip_prefix(prefix)
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or_else(|| panic!("ads_server.py: expected `{prefix} <n>`, got {line:?}"))
        };
        let ads_port = port("PORT ");
        let control_port = port("CONTROL ");
        ControlPlane {
            guard,
            _stdin: stdin,
            ads_port,
            control_port,
            _dir: dir,
        }
    }

    /// The `--upstream` value pointing at this control plane.
    pub fn upstream(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.ads_port)
    }

    pub fn log_text(&self) -> String {
        self.guard.log_text()
    }

    async fn control(&self, method: http::Method, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let reply = http_request(
            self.control_port,
            method,
            path,
            &[("content-type", "application/json")],
            body,
            HTTP_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("control plane {path}: {e}"));
        assert_eq!(reply.status, 200, "control plane {path}: {}", reply.text());
        reply.json()
    }

    /// Replaces the snapshot of `type_url` with `resources` (JSON `Any`s
    /// with `"@type"`) at `version`, pushing it to open streams. Returns
    /// protobuf's canonical JSON of each resource, in order.
    pub async fn set(&self, type_url: &str, version: &str, resources: &[Value]) -> Vec<Value> {
        let body = json!({"type_url": type_url, "version": version, "resources": resources});
        let reply = self.control(http::Method::POST, "/set", Some(body)).await;
        reply["resources"].as_array().cloned().unwrap_or_default()
    }

    /// Like [`set`](Self::set), sending the resources named in `wrap` (a
    /// JSON object: name → TTL in milliseconds, or null for none) wrapped in
    /// `envoy.service.discovery.v3.Resource` (SotW) or with that TTL (delta).
    pub async fn set_wrapped(
        &self,
        type_url: &str,
        version: &str,
        resources: &[Value],
        wrap: Value,
    ) -> Vec<Value> {
        let extra = json!({"wrap": wrap});
        self.set_with(type_url, version, resources, extra).await
    }

    /// Like [`set`](Self::set), with more of `/set`'s fields in `extra` (a
    /// JSON object: `wrap`, `names`, `aliases`).
    pub async fn set_with(
        &self,
        type_url: &str,
        version: &str,
        resources: &[Value],
        extra: Value,
    ) -> Vec<Value> {
        let mut body = json!({"type_url": type_url, "version": version, "resources": resources});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let reply = self.control(http::Method::POST, "/set", Some(body)).await;
        reply["resources"].as_array().cloned().unwrap_or_default()
    }

    /// `POST /heartbeat`: a TTL heartbeat for `type_url` on every stream
    /// holding its current version; returns how many streams were open.
    pub async fn heartbeat(&self, type_url: &str) -> u64 {
        let body = json!({"type_url": type_url});
        let reply = self
            .control(http::Method::POST, "/heartbeat", Some(body))
            .await;
        reply["streams"].as_u64().unwrap_or_default()
    }

    /// Like [`set`](Self::set) with raw `(name, type_url, payload)` resources.
    pub async fn set_raw(&self, type_url: &str, version: &str, resources: &[(&str, &str, &[u8])]) {
        use base64_lite::encode;
        let resources: Vec<Value> = resources
            .iter()
            .map(|(name, url, value)| json!({"name": name, "type_url": url, "value_b64": encode(value)}))
            .collect();
        let body = json!({"type_url": type_url, "version": version, "resources": resources});
        self.control(http::Method::POST, "/set_raw", Some(body))
            .await;
    }

    /// `GET /stats`: streams and every request the streams sent (SotW in
    /// `requests`, delta in `delta_requests`), Fetch calls per type, HDS and
    /// CSDS calls, refused (UNIMPLEMENTED) calls, and the current switches.
    pub async fn stats(&self) -> Value {
        self.control(http::Method::GET, "/stats", None).await
    }

    /// `POST /config`: changes switches at run time (`up_to_date_style`
    /// "go"/"rust", `fetch_delay_ms`, `no_sotw`, `no_delta`, `no_fetch`);
    /// returns the whole new config.
    pub async fn configure(&self, changes: Value) -> Value {
        self.control(http::Method::POST, "/config", Some(changes))
            .await
    }

    /// `GET /canned`: protobuf's canonical JSON of the canned HDS answer.
    pub async fn canned(&self) -> Value {
        self.control(http::Method::GET, "/canned", None).await
    }
}

/// Standard base64 (no dependency for one helper).
mod base64_lite {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(input: &[u8]) -> String {
        let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
        for chunk in input.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// A running `xds-gateway`, killed on drop.
pub struct Gateway {
    guard: ChildGuard,
    pub port: u16,
    pub admin_port: u16,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts the gateway against `upstream` with `extra` flags on free
    /// loopback ports, and waits until its REST port accepts connections.
    /// Retries with fresh ports if the process exits first (a port taken
    /// between `free_port` and the bind). See [`start_with_args`](Self::start_with_args).
    pub async fn start(upstream: &str, extra: &[&str]) -> Gateway {
        let mut args = vec!["--upstream", upstream];
        args.extend_from_slice(extra);
        Gateway::start_with_args(&args).await
    }

    /// Starts the gateway with exactly `args` (plus its listen and admin
    /// addresses), e.g. without `--upstream` to serve a snapshot.
    pub async fn start_with_args(args: &[&str]) -> Gateway {
        let mut last_log = String::new();
        for _ in 0..3 {
            let (port, admin_port) = (free_port(), free_port());
            if port == admin_port {
                continue;
            }
            let dir = tempfile::tempdir().expect("temp dir for the gateway log");
            let log = dir.path().join("xds-gateway.log");
            let child = Command::new(env!("CARGO_BIN_EXE_xds-gateway"))
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .args(["--admin", &format!("127.0.0.1:{admin_port}")])
                .args(args)
                .env("RUST_LOG", "info,xds_gateway=debug")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("gateway log file"))
                .spawn()
                .expect("spawn xds-gateway");
            let mut guard = ChildGuard::new("xds-gateway", child).with_log(&log);
            let accepting = eventually(START_TIMEOUT, Duration::from_millis(20), || {
                let exited = guard.try_exit_status();
                async move {
                    if exited.is_some() {
                        return Some(false);
                    }
                    let addr = SocketAddr::from((LOOPBACK, port));
                    tokio::net::TcpStream::connect(addr)
                        .await
                        .ok()
                        .map(|_| true)
                }
            })
            .await;
            match accepting {
                Some(true) => {
                    return Gateway {
                        guard,
                        port,
                        admin_port,
                        _dir: dir,
                    }
                }
                Some(false) => last_log = guard.log_text(),
                None => {
                    guard.print_log();
                    panic!("xds-gateway did not accept connections within {START_TIMEOUT:?}");
                }
            }
        }
        panic!("xds-gateway exited at start three times; last log:\n{last_log}");
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    pub fn log_text(&self) -> String {
        self.guard.log_text()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.guard.try_exit_status().is_none()
    }

    /// `POST path` with a raw body and extra headers.
    pub async fn post_raw(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        http_request(
            self.port,
            http::Method::POST,
            path,
            &all,
            body,
            HTTP_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `GET path` on the REST port.
    pub async fn get(&self, path: &str) -> Reply {
        http_request(
            self.port,
            http::Method::GET,
            path,
            &[],
            Bytes::new(),
            HTTP_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `POST /v3/discovery:<endpoint>` with a JSON `DiscoveryRequest`.
    pub async fn discover(&self, endpoint: &str, request: &Value) -> Reply {
        self.post_raw(
            &format!("/v3/discovery:{endpoint}"),
            &[],
            request.to_string(),
        )
        .await
    }

    /// The Prometheus text of the admin `/metrics`.
    pub async fn metrics(&self) -> String {
        let reply = self
            .admin_get("/metrics", HTTP_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status, 200, "/metrics: {}", reply.text());
        reply.text()
    }

    /// A JSON view of the admin listener (e.g. `/debug/sessions`), expecting 200.
    pub async fn admin_json(&self, path: &str) -> Value {
        let reply = self
            .admin_get(path, HTTP_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        reply.json()
    }

    /// The admin `/readyz`, whatever its status (503 while not ready),
    /// bounded by 5 s.
    pub async fn readyz(&self) -> Result<Reply, String> {
        self.admin_get("/readyz", Duration::from_secs(5)).await
    }

    /// `GET path` on the admin port, bounded by `timeout`.
    async fn admin_get(&self, path: &str, timeout: Duration) -> Result<Reply, String> {
        http_request(
            self.admin_port,
            http::Method::GET,
            path,
            &[],
            Bytes::new(),
            timeout,
        )
        .await
    }
}

/// `POST /v3/discovery:<endpoint>` with a JSON body to the REST port
/// 127.0.0.1:`port`, bounded by [`HTTP_TIMEOUT`]: what [`Gateway::discover`]
/// sends, for spawned clients that cannot borrow the [`Gateway`].
pub async fn discover_on(port: u16, endpoint: &str, body: String) -> Result<Reply, String> {
    http_request(
        port,
        http::Method::POST,
        &format!("/v3/discovery:{endpoint}"),
        &[("content-type", "application/json")],
        body,
        HTTP_TIMEOUT,
    )
    .await
}

/// The sum of every sample of `metric` (any labels) in Prometheus text.
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, rest) = match line.find(['{', ' ']) {
                Some(i) => line.split_at(i),
                None => return None,
            };
            if name != metric {
                return None;
            }
            let value = match rest.strip_prefix('{') {
                Some(_) => rest.rsplit_once("} ").map(|(_, v)| v)?,
                None => rest.trim_start(),
            };
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}
