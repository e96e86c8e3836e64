//! java-control-plane as a test peer (`tests/peers/java-control-plane/`, a
//! Maven project of its own, every version pinned in its `pom.xml`): built
//! with `mvn package` into one runnable jar (once per test process, into the
//! target directory; offline from the local Maven repository when it has
//! everything, else from Maven Central), started with `java -jar` on
//! kernel-chosen loopback ports, driven over its small HTTP control API, and
//! killed when the handle drops (its stdin closing also makes it exit).
//!
//! Without `java` or `mvn` the test fails, saying how to install them;
//! `$JAVA_CONTROL_PLANE_PEER` names a jar built beforehand (`scripts/test`
//! builds it once for every test binary).
//!
//! Include it with `#[path = "support/java_peer.rs"] mod java_peer;` (it
//! needs `mod process;` and `mod gateway;` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway::http_request;
use crate::process::ChildGuard;

/// Bound on one control API call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the peer's start (its first stdout line; a JVM on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on `mvn package` (a cold download of ~50 MB of jars included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// The jar's name in the build directory (the pom's shade `finalName`).
const JAR: &str = "java-control-plane-peer.jar";

/// The peer's Maven project directory.
fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/java-control-plane")
}

/// The peer's runnable jar: `$JAVA_CONTROL_PLANE_PEER`, else built here once.
pub fn jar(test: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("JAVA_CONTROL_PLANE_PEER").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .clone()
        .unwrap_or_else(|e| panic!("{test}: {e}"))
}

/// `mvn package` of the peer into a build directory of this process's own,
/// then the jar renamed into place (test binaries build in parallel).
/// Offline first (`-o`: the local repository usually has everything), then
/// online if that fails.
fn build() -> Result<PathBuf, String> {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("peers");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let target = out_dir.join(JAR);
    let build_dir = out_dir.join(format!("java-control-plane.{}", std::process::id()));
    let mut failures = String::new();
    for offline in [true, false] {
        let mut mvn = Command::new("mvn");
        mvn.args(["-q", "-B"]);
        if offline {
            mvn.arg("-o");
        }
        let mut child = mvn
            .arg("package")
            .arg(format!("-Dpeer.build.dir={}", build_dir.display()))
            .current_dir(project_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "the java-control-plane test peer needs Maven and a JDK 17 or newer on the PATH \
                     (`mvn` does not run: {e}); install them (Debian: apt-get install -y maven \
                     default-jdk-headless; scripts/test does) or set JAVA_CONTROL_PLANE_PEER to a \
                     built peer jar"
                )
            })?;
        // Drained while waiting (Maven's output could fill a pipe), kept for the error.
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
        let deadline = std::time::Instant::now() + BUILD_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "mvn package of the peer ran past {BUILD_TIMEOUT:?}; killed"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if status.success() {
            std::fs::rename(build_dir.join(JAR), &target)
                .map_err(|e| format!("{}: {e}", target.display()))?;
            let _ = std::fs::remove_dir_all(&build_dir);
            return Ok(target);
        }
        let output = format!(
            "{}{}",
            stdout.join().unwrap_or_default(),
            stderr.join().unwrap_or_default()
        );
        failures.push_str(&format!(
            "mvn {}package failed ({status}):\n{}\n",
            if offline { "-o " } else { "" },
            output.trim_end()
        ));
    }
    Err(format!(
        "{failures}building {} (run `mvn -B package` there to see why)",
        project_dir().display()
    ))
}

/// A running java-control-plane peer.
pub struct JavaControlPlane {
    guard: ChildGuard,
    /// Closing it (on drop) also tells the peer to exit.
    _stdin: ChildStdin,
    /// Its gRPC xDS server, `127.0.0.1:PORT`.
    pub grpc: String,
    /// Its HTTP control API's port.
    pub control_port: u16,
    _dir: tempfile::TempDir,
}

impl JavaControlPlane {
    /// Starts the peer on kernel-chosen loopback ports.
    pub fn start(test: &str) -> JavaControlPlane {
        JavaControlPlane::start_with(test, &[])
    }

    /// [`start`](Self::start) with extra peer flags (`--no-ads`: the
    /// per-type services only; `-v`: java-control-plane's debug log).
    pub fn start_with(test: &str, flags: &[&str]) -> JavaControlPlane {
        let jar = jar(test);
        let dir = tempfile::tempdir().expect("a temp dir for the peer's log");
        let log = dir.path().join("java-control-plane.log");
        let mut child = Command::new("java")
            .arg("-jar")
            .arg(&jar)
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the peer's log file"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{test}: cannot start java -jar {} ({e}); the peer needs a JDK 17 or newer \
                     (Debian: apt-get install -y default-jdk-headless)",
                    jar.display()
                )
            });
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let guard =
            ChildGuard::new(format!("java-control-plane peer ({test})"), child).with_log(&log);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            panic!(
                "{test}: the java-control-plane peer printed no addresses within {START_TIMEOUT:?}:\n{}",
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
        let (grpc, control_port) = (port("grpc"), port("http"));
        JavaControlPlane {
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

    /// The peer's log (java-control-plane's and grpc-java's, on stderr).
    pub fn log_text(&self) -> String {
        self.guard.log_text()
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
        .unwrap_or_else(|e| panic!("java-control-plane peer {method} {path}: {e}"));
        assert_eq!(
            reply.status,
            200,
            "java-control-plane peer {method} {path}: {}",
            reply.text()
        );
        if reply.body.is_empty() {
            Value::Null
        } else {
            reply.json()
        }
    }

    /// Serves `resources` (type URL → JSON `Any`s, `@type` included; only
    /// clusters, endpoints, listeners, routes and secrets: java-control-plane's
    /// snapshot holds no other type) at `version` to `node` (`*`: every node,
    /// and nodes that come later). Returns the peer's answer (its
    /// `consistent_error` says what `ensureConsistent()` would refuse).
    pub async fn set_snapshot(
        &self,
        node: &str,
        version: &str,
        resources: &[(&str, Vec<Value>)],
    ) -> Value {
        let resources: serde_json::Map<String, Value> = resources
            .iter()
            .map(|(type_url, list)| ((*type_url).to_owned(), Value::Array(list.clone())))
            .collect();
        self.control(
            http::Method::PUT,
            &format!("/snapshot?node={node}"),
            Some(json!({"version": version, "resources": resources})),
        )
        .await
    }

    /// Replaces (or adds) one cluster in `node`'s snapshot, at `version`
    /// (empty: the previous version + "+1").
    pub async fn set_cluster(&self, node: &str, version: &str, cluster: Value) -> Value {
        let path = if version.is_empty() {
            format!("/cluster?node={node}")
        } else {
            format!("/cluster?node={node}&version={version}")
        };
        self.control(http::Method::POST, &path, Some(cluster)).await
    }

    /// Stops the gRPC listener (every stream closed at once).
    pub async fn grpc_stop(&self) {
        self.control(http::Method::POST, "/grpc/stop", None).await;
    }

    /// Starts the gRPC listener again on the same address (same cache).
    pub async fn grpc_start(&self) {
        self.control(http::Method::POST, "/grpc/start", None).await;
    }

    /// What its callbacks recorded: streams, requests, responses, ACKs and
    /// NACKs (`nacks_total`, `nack_counts` by type URL), and how each gRPC
    /// call ended (`calls`).
    pub async fn stats(&self) -> Value {
        self.control(http::Method::GET, "/stats", None).await
    }

    /// Clears the recorded lists and counters.
    pub async fn clear_stats(&self) {
        self.control(http::Method::DELETE, "/stats", None).await;
    }
}
