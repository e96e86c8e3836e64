//! The gateway binary serving a snapshot directory (`--snapshot DIR`), over
//! real HTTP on 127.0.0.1; no Envoy.
//!
//! - a changed file is served on the next poll (new versionInfo, new
//!   content), and wakes a long poll held on the old version;
//! - a broken file (bad YAML; a resource with an unknown field) keeps the
//!   last good snapshot in service (same versionInfo) and is listed in the
//!   admin `/readyz` `problems` with its path (and line, for YAML); fixing
//!   it clears the problem;
//! - `clusters/<cluster>/` and `nodes/<id>/` layer over the base for that
//!   cluster / node only (node over cluster over base);
//! - versions are content digests: two gateways on the same directory, and
//!   the embedded demo against a copy of `examples/demo/`, agree.
//!
//! Every test is bounded; the gateways are killed when their guards drop.

#[path = "support/files.rs"]
mod files;
#[path = "support/process.rs"]
mod process;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use process::{eventually, free_port, http_get, ChildGuard};

/// One whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A gateway answering /readyz after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// A file change being noticed (the directory is checked every 250 ms).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

const CLUSTER_TYPE: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const DEMO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo");

/// A Cluster resource `name` with `connect_timeout`, as a YAML document.
fn cluster_yaml(name: &str, connect_timeout: &str) -> String {
    format!("'@type': {CLUSTER_TYPE}\nname: {name}\nconnect_timeout: {connect_timeout}\n")
}

/// Writes `rel` under `dir` whole, its directories made first.
fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).expect("create a snapshot subdirectory");
    files::write_whole(&path, text);
}

/// A DiscoveryResponse the gateway answered with 200.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    version: String,
    body: Value,
}

impl Answer {
    /// Resource name → resource.
    fn resources(&self) -> Vec<(String, Value)> {
        self.body["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("no resources: {}", self.body))
            .iter()
            .map(|r| {
                let name = r["name"]
                    .as_str()
                    .or(r["clusterName"].as_str())
                    .unwrap_or_else(|| panic!("a resource without a name: {r}"));
                (name.to_owned(), r.clone())
            })
            .collect()
    }

    fn names(&self) -> Vec<String> {
        self.resources().into_iter().map(|(n, _)| n).collect()
    }

    /// `connectTimeout` of cluster `name`.
    fn connect_timeout(&self, name: &str) -> String {
        let (_, cluster) = self
            .resources()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no cluster {name}: {}", self.body));
        cluster["connectTimeout"].as_str().unwrap_or("").to_owned()
    }
}

/// One gateway process on a snapshot directory (or the embedded demo).
struct Gateway {
    child: ChildGuard,
    rest: u16,
    admin: u16,
}

impl Gateway {
    /// Starts the gateway on `snapshot` (`None`: the embedded demo), logging
    /// to `log`, and waits for its /readyz to answer 200.
    async fn start(snapshot: Option<&Path>, log: &Path) -> Gateway {
        let rest = free_port();
        let admin = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_xds-gateway"));
        if let Some(dir) = snapshot {
            command.arg("--snapshot").arg(dir);
        }
        let child = command
            .args(["--listen", &format!("127.0.0.1:{rest}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .env("RUST_LOG", "info,xds_gateway=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("create the gateway log"))
            .spawn()
            .expect("spawn xds-gateway");
        let mut gateway = Gateway {
            child: ChildGuard::new("xds-gateway", child).with_log(log),
            rest,
            admin,
        };
        let ready = eventually(START_TIMEOUT, POLL_INTERVAL, || {
            gateway.check_alive();
            async move { matches!(http_get(admin, "/readyz").await, Ok((200, _))).then_some(()) }
        })
        .await;
        if ready.is_none() {
            panic!("the gateway's /readyz did not answer 200 within {START_TIMEOUT:?}");
        }
        gateway
    }

    fn check_alive(&mut self) {
        if let Some(status) = self.child.try_exit_status() {
            panic!("xds-gateway exited early: {status}");
        }
    }

    /// `GET /v3/discovery:<kind>?<query>`: must answer 200 with a
    /// DiscoveryResponse.
    async fn get(&self, kind: &str, query: &str) -> Answer {
        discovery(self.rest, kind, query).await
    }

    /// The admin `/readyz` JSON.
    async fn readyz(&self) -> Value {
        readyz(self.admin).await
    }

    /// The `/readyz` problems.
    async fn problems(&self) -> Vec<String> {
        problems(self.admin).await
    }

    /// Polls `GET /v3/discovery:<kind>?<query>` until `accept` takes the
    /// answer; returns it.
    async fn get_until(
        &mut self,
        kind: &str,
        query: &str,
        what: &str,
        accept: impl Fn(&Answer) -> bool,
    ) -> Answer {
        let last = Mutex::new(None::<Answer>);
        let (last, accept) = (&last, &accept);
        let found = eventually(CHANGE_TIMEOUT, POLL_INTERVAL, || {
            self.check_alive();
            let rest = self.rest;
            async move {
                let got = discovery(rest, kind, query).await;
                *last.lock().unwrap() = Some(got.clone());
                accept(&got).then_some(got)
            }
        })
        .await;
        found.unwrap_or_else(|| {
            panic!(
                "{what}: not seen within {CHANGE_TIMEOUT:?}; last answer: {:?}",
                last.lock().unwrap()
            )
        })
    }

    /// Polls `/readyz` until `accept` takes its problems; returns them.
    async fn problems_until(
        &mut self,
        what: &str,
        accept: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let last = Mutex::new(Vec::new());
        let (last, accept) = (&last, &accept);
        let found = eventually(CHANGE_TIMEOUT, POLL_INTERVAL, || {
            self.check_alive();
            let admin = self.admin;
            async move {
                let problems = problems(admin).await;
                *last.lock().unwrap() = problems.clone();
                accept(&problems).then_some(problems)
            }
        })
        .await;
        found.unwrap_or_else(|| {
            panic!(
                "{what}: not seen in /readyz within {CHANGE_TIMEOUT:?}; last problems: {:?}",
                last.lock().unwrap()
            )
        })
    }
}

/// `GET /v3/discovery:<kind>?<query>` on 127.0.0.1:`rest`: must answer 200
/// with a DiscoveryResponse.
async fn discovery(rest: u16, kind: &str, query: &str) -> Answer {
    let path = format!("/v3/discovery:{kind}?{query}");
    let (status, text) = http_get(rest, &path).await.expect("GET the gateway");
    assert_eq!(status, 200, "GET {path}: {text}");
    answer(&path, &text)
}

/// The `/readyz` JSON of the admin listener on 127.0.0.1:`admin` (must be
/// 200 and ready).
async fn readyz(admin: u16) -> Value {
    let (status, text) = http_get(admin, "/readyz").await.expect("GET /readyz");
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("/readyz is not JSON ({e}): {text}"));
    assert_eq!(status, 200, "/readyz: {json}");
    assert_eq!(json["ready"], true, "/readyz: {json}");
    json
}

/// The `/readyz` problems.
async fn problems(admin: u16) -> Vec<String> {
    let readyz = readyz(admin).await;
    readyz["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("/readyz has no problems list: {readyz}"))
        .iter()
        .map(|p| p.as_str().expect("a problem is a string").to_owned())
        .collect()
}

/// A 200 body → its version and JSON.
fn answer(path: &str, text: &str) -> Answer {
    let body: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"));
    let version = body["versionInfo"]
        .as_str()
        .unwrap_or_else(|| panic!("{path}: no versionInfo: {body}"))
        .to_owned();
    assert!(!version.is_empty(), "{path}: empty versionInfo");
    Answer { version, body }
}

/// A tempdir with an empty `snapshot/` directory inside; logs go beside it.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir(&snapshot).expect("create snapshot/");
    (dir, snapshot)
}

/// Runs `test` bounded by [`TEST_TIMEOUT`]; prints the gateway logs in
/// `logs` on a timeout.
async fn bounded(name: &str, logs: &Path, test: impl std::future::Future<Output = ()>) {
    let started = Instant::now();
    if tokio::time::timeout(TEST_TIMEOUT, test).await.is_err() {
        for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                process::print_log_file(&path.display().to_string(), &path);
            }
        }
        panic!("{name}: did not finish within {TEST_TIMEOUT:?}");
    }
    eprintln!("{name}: passed in {:.1?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_served_on_the_next_poll_and_wakes_long_polls() {
    let (dir, snapshot) = workspace();
    bounded("change", dir.path(), async {
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "1s"));
        let mut gw = Gateway::start(Some(&snapshot), &dir.path().join("gateway.log")).await;
        let first = gw.get("clusters", "node=n").await;
        assert_eq!(first.names(), ["a"]);
        assert_eq!(first.connect_timeout("a"), "1s");
        assert_eq!(first.body["typeUrl"], CLUSTER_TYPE);
        // The same state polled again: the same version.
        assert_eq!(gw.get("clusters", "node=n").await, first);

        // A changed file: the next poll after the watcher's check serves it.
        let changed_at = Instant::now();
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "2s"));
        let second = gw
            .get_until("clusters", "node=n", "the changed file", |a| {
                a.version != first.version
            })
            .await;
        let noticed = changed_at.elapsed();
        assert_eq!(second.connect_timeout("a"), "2s", "{:?}", second.body);
        eprintln!("change: a changed file was served {noticed:.1?} after the write");

        // A long poll holding the current version ...
        let rest = gw.rest;
        let held_path = format!(
            "/v3/discovery:clusters?node=n&version={}&wait=10s",
            second.version
        );
        let held_at = Instant::now();
        let mut held = tokio::spawn({
            let path = held_path.clone();
            async move { http_get(rest, &path).await }
        });
        // ... is held (a current version is never answered at once) ...
        assert!(
            tokio::time::timeout(Duration::from_millis(700), &mut held)
                .await
                .is_err(),
            "{held_path} answered before any change"
        );
        // ... and wakes on a change, well before its 10 s.
        let changed_at = Instant::now();
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "3s"));
        let (status, text) = tokio::time::timeout(CHANGE_TIMEOUT, held)
            .await
            .unwrap_or_else(|_| panic!("{held_path}: not woken within {CHANGE_TIMEOUT:?}"))
            .expect("the long-poll task")
            .expect("the long poll");
        let woke = changed_at.elapsed();
        assert_eq!(status, 200, "{held_path}: {text}");
        let third = answer(&held_path, &text);
        assert_ne!(third.version, second.version);
        assert_eq!(third.connect_timeout("a"), "3s", "{:?}", third.body);
        assert!(
            held_at.elapsed() < Duration::from_secs(5),
            "held {:?}",
            held_at.elapsed()
        );
        eprintln!(
            "change: the long poll woke {woke:.1?} after the write (held {:.1?} in all)",
            held_at.elapsed()
        );
        // The woken answer is what a plain poll now serves.
        assert_eq!(gw.get("clusters", "node=n").await, third);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_last_good_snapshot_and_is_reported() {
    let (dir, snapshot) = workspace();
    bounded("broken", dir.path(), async {
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "1s"));
        write(&snapshot, "other.yaml", &cluster_yaml("b", "1s"));
        let mut gw = Gateway::start(Some(&snapshot), &dir.path().join("gateway.log")).await;
        assert!(gw.problems().await.is_empty());
        let good = gw.get("clusters", "node=n").await;
        assert_eq!(good.names(), ["a", "b"]);
        let file = snapshot.join("clusters.yaml");
        let file = file.display().to_string();

        // 1. Bad YAML (line 3 is indented under a scalar).
        write(
            &snapshot,
            "clusters.yaml",
            &format!("'@type': {CLUSTER_TYPE}\nname: a\n  connect_timeout: 9s\n"),
        );
        // A good change elsewhere in the same reload is not applied either.
        write(&snapshot, "other.yaml", &cluster_yaml("b", "9s"));
        let problems = gw.problems_until("the bad YAML", |p| !p.is_empty()).await;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!("{file}:3: ")),
            "the problem names the file and line 3: {problems:?}"
        );
        eprintln!("broken: bad YAML reported as {:?}", problems[0]);
        assert_eq!(
            gw.get("clusters", "node=n").await,
            good,
            "last good snapshot"
        );
        assert_eq!(gw.get("clusters", "node=fresh").await.version, good.version);

        // Fixed: the problem clears and the new content is served.
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "2s"));
        gw.problems_until("the fix of the bad YAML", |p| p.is_empty())
            .await;
        let fixed = gw
            .get_until("clusters", "node=n", "the fixed file", |a| {
                a.version != good.version
            })
            .await;
        assert_eq!(fixed.connect_timeout("a"), "2s");
        assert_eq!(fixed.connect_timeout("b"), "9s");

        // 2. Valid YAML, but a field Cluster does not have.
        write(
            &snapshot,
            "clusters.yaml",
            &format!("{}no_such_field: 1\n", cluster_yaml("a", "4s")),
        );
        let problems = gw
            .problems_until("the unknown field", |p| !p.is_empty())
            .await;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!("{file}: ")) && problems[0].contains("no_such_field"),
            "the problem names the file and the field: {problems:?}"
        );
        eprintln!("broken: unknown field reported as {:?}", problems[0]);
        assert_eq!(
            gw.get("clusters", "node=n").await,
            fixed,
            "last good snapshot"
        );

        // Fixed again.
        write(&snapshot, "clusters.yaml", &cluster_yaml("a", "2s"));
        gw.problems_until("the fix of the unknown field", |p| p.is_empty())
            .await;
        // Back to exactly the content of `fixed`: the same version.
        assert_eq!(gw.get("clusters", "node=n").await, fixed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_clusters_directories_layer_over_the_base() {
    let (dir, snapshot) = workspace();
    bounded("layers", dir.path(), async {
        write(
            &snapshot,
            "clusters.yaml",
            &format!(
                "{}---\n{}",
                cluster_yaml("a", "1s"),
                cluster_yaml("b", "1s")
            ),
        );
        write(&snapshot, "clusters/c1/a.yaml", &cluster_yaml("a", "3s"));
        write(&snapshot, "nodes/n1/a.yaml", &cluster_yaml("a", "5s"));
        write(
            &snapshot,
            "nodes/n1/only.json",
            &format!(r#"[{{"@type": "{CLUSTER_TYPE}", "name": "n1_only"}}]"#),
        );
        let gw = Gateway::start(Some(&snapshot), &dir.path().join("gateway.log")).await;
        assert!(gw.problems().await.is_empty());

        let base = gw.get("clusters", "node=other").await;
        assert_eq!(base.names(), ["a", "b"]);
        assert_eq!(base.connect_timeout("a"), "1s");
        // Other nodes and clusters without a layer see the base, same version.
        assert_eq!(gw.get("clusters", "node=other2").await, base);
        assert_eq!(gw.get("clusters", "node=n2&cluster=c2").await, base);

        // clusters/c1/: for nodes of cluster c1.
        let c1 = gw.get("clusters", "node=other&cluster=c1").await;
        assert_eq!(c1.names(), ["a", "b"]);
        assert_eq!(c1.connect_timeout("a"), "3s");
        assert_eq!(c1.connect_timeout("b"), "1s");
        assert_ne!(c1.version, base.version);
        assert_eq!(gw.get("clusters", "node=other2&cluster=c1").await, c1);

        // nodes/n1/: for node n1 only, over its cluster's layer.
        let n1 = gw.get("clusters", "node=n1").await;
        assert_eq!(n1.names(), ["a", "b", "n1_only"]);
        assert_eq!(n1.connect_timeout("a"), "5s");
        assert_ne!(n1.version, base.version);
        assert_ne!(n1.version, c1.version);
        let n1_c1 = gw.get("clusters", "node=n1&cluster=c1").await;
        assert_eq!(n1_c1.connect_timeout("a"), "5s");
        assert_eq!(n1_c1.names(), ["a", "b", "n1_only"]);
        assert_eq!(n1_c1.version, n1.version, "same resources, same version");

        // Named requests see the same layered view.
        let named = gw.get("clusters", "node=n1&names=a").await;
        assert_eq!(named.names(), ["a"]);
        assert_eq!(named.connect_timeout("a"), "5s");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_are_content_digests_the_same_on_every_gateway() {
    let (dir, snapshot) = workspace();
    bounded("deterministic", dir.path(), async {
        for entry in std::fs::read_dir(DEMO_DIR).expect("read examples/demo") {
            let path = entry.expect("examples/demo entry").path();
            let text = std::fs::read_to_string(&path).expect("read a demo file");
            write(
                &snapshot,
                path.file_name().unwrap().to_str().unwrap(),
                &text,
            );
        }
        write(
            &snapshot,
            "nodes/n1/extra.yaml",
            &cluster_yaml("extra", "2s"),
        );
        let one = Gateway::start(Some(&snapshot), &dir.path().join("one.log")).await;
        let two = Gateway::start(Some(&snapshot), &dir.path().join("two.log")).await;
        let embedded = Gateway::start(None, &dir.path().join("embedded.log")).await;
        let embedded_source = embedded.readyz().await["source"].clone();
        assert!(
            embedded_source
                .as_str()
                .is_some_and(|s| s.contains("embedded")),
            "{embedded_source}"
        );
        for kind in ["listeners", "routes", "clusters", "endpoints"] {
            for node in ["x", "n1"] {
                let query = format!("node={node}");
                let a = one.get(kind, &query).await;
                let b = two.get(kind, &query).await;
                assert_eq!(a, b, "{kind} for node {node}: two gateways, one directory");
                assert!(!a.resources().is_empty(), "{kind}: {:?}", a.body);
                if node == "x" || kind != "clusters" {
                    // The directory copy of the demo and the demo compiled
                    // into the binary: same content, same version.
                    let e = embedded.get(kind, &query).await;
                    assert_eq!(a, e, "{kind} for node {node}: directory vs. embedded demo");
                }
            }
            eprintln!(
                "deterministic: {kind} version {} on both gateways",
                one.get(kind, "node=x").await.version
            );
        }
        let n1 = one.get("clusters", "node=n1").await;
        assert_ne!(n1.version, one.get("clusters", "node=x").await.version);
    })
    .await;
}
