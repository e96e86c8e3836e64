//! The OpenAPI documents (`openapi/xds-gateway.yaml` for the REST listener,
//! `openapi/admin.yaml` for the admin listener) checked by real tools:
//!
//! - `openapi-spec-validator` must find both valid OpenAPI 3 (and must refuse
//!   a broken copy, so a validator that checks nothing cannot pass);
//! - the admin listener's answers (the gateway in process on the embedded
//!   snapshot, after clients in step and not polled it) must match the
//!   admin document's schemas (`support/admin_schema.py`); with a real
//!   Envoy and an upstream they are checked again in `envoy_gateway.rs`;
//! - `schemathesis` runs its positive and negative cases, every check, with
//!   a fresh seed each run (printed; `XDS_SCHEMATHESIS_SEED` replays one)
//!   and a bounded number of examples per operation, against
//!   the gateway run in process on a loopback port (the embedded snapshot,
//!   secrets allowed), and must report zero failures. Its per-operation
//!   settings are in `tests/support/schemathesis.toml`, each with its reason;
//!   and the same against the admin listener and `openapi/admin.yaml`, with
//!   an upstream (the reference control plane) and a node that has polled.
//!
//! Both tools come from the Python of `XDS_GATEWAY_PYTHON` (set by
//! `scripts/test`) or `.venv/bin/python`, pinned in
//! `tests/support/requirements.txt`; without them the tests fail saying how
//! to install them. Whatever schemathesis writes goes to a temp dir.
//!
//! `XDS_SCHEMATHESIS_EXAMPLES` raises the number of examples per operation
//! for a longer run (default [`EXAMPLES`]).

#[path = "support/admin_views.rs"]
mod admin_views;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use inproc::InProcess;
use xds_gateway::config::{Config, ExtraTypeSpec, ProfileTable};

/// Examples per API operation in the test command (about 40 s on 2 cores).
const EXAMPLES: u32 = 30;
/// This run's seed: `$XDS_SCHEMATHESIS_SEED` to replay a run, else a fresh
/// one (luck is not evidence: every run explores other cases). Printed
/// before the run and in a failure, so any failure reproduces.
fn seed() -> u32 {
    std::env::var("XDS_SCHEMATHESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}
/// The whole schemathesis run is killed (and the test fails) past this.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn document() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/xds-gateway.yaml")
}

/// The test Python, after checking that it has `module`.
fn python_with(test: &str, module: &str) -> PathBuf {
    let python = process::require_python(test);
    let probe = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .unwrap_or_else(|e| panic!("{test}: run {}: {e}", python.display()));
    assert!(
        probe.status.success(),
        "{test}: {} has no Python module {module}: install the pinned test tools with \
         `{} -m pip install -r tests/support/requirements.txt` (./scripts/test does it)\n{}",
        python.display(),
        python.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn validate(python: &Path, file: &Path) -> Output {
    Command::new(python)
        .args(["-m", "openapi_spec_validator"])
        .arg(file)
        .output()
        .expect("run openapi-spec-validator")
}

#[test]
fn the_document_is_valid_openapi_3() {
    let test = "the_document_is_valid_openapi_3";
    let python = python_with(test, "openapi_spec_validator");
    let output = validate(&python, &document());
    assert!(
        output.status.success(),
        "openapi-spec-validator refuses {}:\n{}",
        document().display(),
        text(&output)
    );

    // The same document with a response that has no description (required
    // by OpenAPI 3) must be refused: the validator really validates.
    let good = std::fs::read_to_string(document()).expect("read the document");
    let broken = good.replacen("description: Plain text.\n", "", 1);
    assert_ne!(broken, good, "the broken copy must differ");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("broken.yaml");
    std::fs::write(&copy, broken).expect("write the broken copy");
    let output = validate(&python, &copy);
    assert!(
        !output.status.success(),
        "openapi-spec-validator accepted a response without a description:\n{}",
        text(&output)
    );
}

#[test]
fn the_admin_document_is_valid_openapi_3() {
    let test = "the_admin_document_is_valid_openapi_3";
    let python = python_with(test, "openapi_spec_validator");
    let document = admin_views::document();
    let output = validate(&python, &document);
    assert!(
        output.status.success(),
        "openapi-spec-validator refuses {}:\n{}",
        document.display(),
        text(&output)
    );
    // A parameter without its `in` must be refused.
    let good = std::fs::read_to_string(&document).expect("read the admin document");
    let broken = good.replacen("        in: query\n", "", 1);
    assert_ne!(broken, good, "the broken copy must differ");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("broken-admin.yaml");
    std::fs::write(&copy, broken).expect("write the broken copy");
    let output = validate(&python, &copy);
    assert!(
        !output.status.success(),
        "openapi-spec-validator accepted a parameter without `in`:\n{}",
        text(&output)
    );
}

/// One REST poll of `kind` for `node`, presenting `version`: the answer's
/// `versionInfo`.
async fn poll(port: u16, kind: &str, node: &str, version: &str) -> String {
    let body = serde_json::json!({"node": {"id": node, "cluster": "edge", "user_agent_name": "envoy"}, "version_info": version});
    let (status, _, body) = process::http_exchange(
        port,
        http::Method::POST,
        &format!("/v3/discovery:{kind}"),
        &[("content-type", "application/json")],
        body.to_string().into(),
    )
    .await
    .unwrap_or_else(|e| panic!("poll {kind}: {e}"));
    let body = String::from_utf8_lossy(&body);
    if status == 304 {
        return version.to_owned();
    }
    assert_eq!(status, 200, "poll {kind}: {body}");
    let json: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    json["versionInfo"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_views_match_the_admin_document() {
    let test = "the_admin_views_match_the_admin_document";
    let gateway = InProcess::start(Config::default()).await;
    let port = gateway.rest_port;
    // `edge-1` in step; `edge-<2>` (a node id that needs escaping) keeps
    // presenting a version it was never served.
    let version = poll(port, "clusters", "edge-1", "").await;
    poll(port, "clusters", "edge-1", &version).await;
    for _ in 0..4 {
        poll(port, "listeners", "edge-<2>", "0~000000000000").await;
    }
    // The version edge-1 was served (its history finds it by its upstream
    // part: the client's digest covers the config sources' rewrite).
    let held = format!("/debug/history?node=edge-1&type=clusters&version={version}");
    let answers = admin_views::check_against_openapi(
        test,
        gateway.admin_port,
        &[
            "/",
            "/?refresh=0",
            "/healthz",
            "/readyz",
            "/metrics",
            "/debug/sessions?pretty",
            "/debug/clients",
            "/debug/config?node=edge-1",
            "/debug/config?node=edge-%3C2%3E&type=listeners&rewrite=none",
            "/debug/config?node=edge-1&type=nope",
            "/debug/config?node=nobody",
            "/debug/client_status",
            "/debug/client_status?node=edge-1",
            "/debug/history?node=edge-1&type=clusters&pretty",
            &held,
            "/debug/history?node=edge-1&type=clusters&version=gone",
            "/debug/history?node=edge-1&type=nope",
            "/debug/diff?node=edge-1&with=edge-1&type=clusters",
            "/debug/diff?node=edge-1&with=edge-1&type=clusters&format=text",
            "/debug/diff?node=edge-1&with=nobody&type=clusters",
            // One version held: none before it.
            "/debug/diff?node=edge-1&type=clusters",
        ],
        &[],
    )
    .await;
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(
        statuses,
        [
            200, 200, 200, 200, 200, 200, 200, 200, 200, 400, 404, 200, 200, 200, 200, 404, 400,
            200, 200, 404, 404
        ],
        "{answers:?}"
    );
    let clients: serde_json::Value = serde_json::from_str(&answers[6].1).expect("clients JSON");
    let states: Vec<&str> = clients["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["types"].as_object().into_iter().flatten())
        .flat_map(|(_, t)| t["detail"].as_array().into_iter().flatten())
        .filter_map(|d| d["state"].as_str())
        .collect();
    assert!(
        states.contains(&"in step") && states.iter().any(|s| *s != "in step"),
        "{clients}"
    );
    assert!(answers[0].1.contains("edge-&lt;2&gt;"), "{}", answers[0].1);
    gateway.stop().await;
}

/// Runs schemathesis (every check, this run's [`seed`], `$XDS_SCHEMATHESIS_EXAMPLES`
/// or [`EXAMPLES`] per operation) with `config` on `document` against
/// 127.0.0.1:`port`; fails the test on any failure or warning.
async fn schemathesis(test: &str, document: &Path, config: Option<&Path>, port: u16) {
    let python = python_with(test, "schemathesis");
    let examples = std::env::var("XDS_SCHEMATHESIS_EXAMPLES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(EXAMPLES);
    let seed = seed();
    let workdir = tempfile::tempdir().expect("temp dir");
    let mut command = tokio::process::Command::new(&python);
    command.args(["-m", "schemathesis.cli"]);
    if let Some(config) = config {
        command.arg("--config-file").arg(config);
    }
    command
        .arg("run")
        .arg(document)
        .args([
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--checks",
            "all",
            "--max-examples",
            &examples.to_string(),
            "--seed",
            &seed.to_string(),
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
            "--no-color",
        ])
        .current_dir(workdir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    eprintln!("{test}: schemathesis seed {seed} (XDS_SCHEMATHESIS_SEED={seed} replays this run)");
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish within {RUN_TIMEOUT:?}"))
        .expect("run schemathesis");
    let report = text(&output);
    assert!(
        output.status.success(),
        "schemathesis found failures (seed {seed}, {examples} examples per operation; \
         XDS_SCHEMATHESIS_SEED={seed} replays the run, and each failure has a curl line to \
         reproduce it: make it a regression test):\n{report}"
    );
    assert!(
        report.contains("No issues found"),
        "schemathesis exited 0 but did not report a clean run (a warning counts: it means \
         an operation was not really exercised, e.g. it answered only 401/403):\n{report}"
    );
    eprintln!(
        "{test}: schemathesis, {examples} examples per operation in {:.1?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_against_the_running_gateway() {
    let test = "schemathesis_finds_no_failure_against_the_running_gateway";
    // The profile `schemathesis.toml` pins every GET's ?profile= to.
    let profile: ProfileTable = toml::from_str(
        r#"name = "openapi-sidecar"
cluster = "reviews.default"
user-agent-name = "envoy"
locality = { region = "us-east1" }
metadata = { ISTIO_VERSION = "1.23.2", LABELS = { app = "reviews" } }
"#,
    )
    .expect("a profile table");
    let gateway = InProcess::start(Config {
        allow_secrets: true,
        // The type `schemathesis.toml` pins `/v3/discovery:{extraType}` to.
        extra_types: vec![
            ExtraTypeSpec::parse_flag("things=type.googleapis.com/acme.v1.Thing")
                .expect("a valid --extra-type"),
        ],
        // A generated `wait` on a current version holds at most this long.
        max_wait: Duration::from_secs(1),
        profiles: vec![profile],
        ..Config::default()
    })
    .await;
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/schemathesis.toml");
    schemathesis(test, &document(), Some(&config), gateway.rest_port).await;
    gateway.stop().await;
}

/// The admin listener against `openapi/admin.yaml`, by schemathesis, with
/// an upstream (the reference control plane) and a node that has polled,
/// so the sessions, clients and config views have something to say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_against_the_admin_listener_with_an_upstream() {
    let test = "schemathesis_finds_no_failure_against_the_admin_listener_with_an_upstream";
    let cp = gateway::ControlPlane::start(test);
    let cds = xds_gateway::xds::ResourceType::Clusters.type_url();
    let cluster =
        serde_json::json!({"@type": cds, "name": "a", "type": "STATIC", "connect_timeout": "1s"});
    cp.set(cds, "v1", &[cluster]).await;
    let gateway = InProcess::start(
        Config {
            upstream: Some(cp.upstream()),
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration"),
    )
    .await;
    let polled = gateway::discover_on(
        gateway.rest_port,
        "clusters",
        serde_json::json!({"node": {"id": "0"}}).to_string(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(polled.status, 200, "{}", polled.text());
    // A second version, so node 0's history has a change for /debug/diff
    // (`?node=0&type=clusters`: what the last push changed) to show.
    let changed =
        serde_json::json!({"@type": cds, "name": "a", "type": "STATIC", "connect_timeout": "2s"});
    cp.set(cds, "v2", &[changed]).await;
    let second = process::eventually(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            let reply = gateway::discover_on(
                gateway.rest_port,
                "clusters",
                serde_json::json!({"node": {"id": "0"}}).to_string(),
            )
            .await
            .ok()?;
            let version = reply.json()["versionInfo"].as_str()?.to_owned();
            version.starts_with("v2~").then_some(())
        },
    )
    .await;
    assert!(second.is_some(), "node 0 was never served v2");
    let admin = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/admin.yaml");
    schemathesis(test, &admin, None, gateway.admin_port).await;
    gateway.stop().await;
}
