//! The gateway's check of Envoy's field rules against what a real Envoy 1.40
//! rejects: every resource in `tests/corpus/invalid/` is refused by
//! `envoy --mode validate` (which runs the same checks as an xDS update:
//! "Proto constraint validation failed", or Envoy's own checks of a
//! negative `connect_timeout` and of a NaN `Percent`) and by the gateway's
//! `Validator`;
//! every resource in `tests/corpus/` that Envoy can take statically is
//! accepted by both.
//!
//! Each resource is placed in a static bootstrap where Envoy takes it
//! whole: a cluster, a listener, a secret, a cluster's `load_assignment`, or
//! an HTTP connection manager's `route_config`. Bounded; every Envoy is
//! killed when its run ends.

#[path = "support/process.rs"]
mod process;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use xds_gateway::xds::{Codec, Validator};

/// Bound on one `envoy --mode validate` run.
const ENVOY_TIMEOUT: Duration = Duration::from_secs(30);

/// What Envoy says when it refuses a resource for breaking a rule: its
/// protoc-gen-validate checks, or its own checks of a negative duration and
/// of a `Percent` (which protoc-gen-validate's bounds let NaN through).
const REFUSALS: &[&str] = &[
    "Proto constraint validation failed",
    "Invalid duration",
    "Value not in the range of 0..100",
];

fn corpus(dir: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

/// A bootstrap holding `resource` statically, or `None` for a type Envoy
/// takes only over xDS.
fn bootstrap(resource: &Value) -> Option<Value> {
    let type_url = resource["@type"].as_str()?;
    let mut bare = resource.clone();
    bare.as_object_mut()?.remove("@type");
    let hcm = |route_config: Value| {
        json!({"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
          "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "x", "route_config": route_config,
            "http_filters": [{"name": "router", "typed_config": {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]})
    };
    let resources = match type_url.rsplit('/').next()? {
        "envoy.config.cluster.v3.Cluster" => json!({"clusters": [bare]}),
        "envoy.config.listener.v3.Listener" => json!({"listeners": [bare]}),
        "envoy.extensions.transport_sockets.tls.v3.Secret" => json!({"secrets": [bare]}),
        "envoy.config.endpoint.v3.ClusterLoadAssignment" => json!({"clusters": [{
            "name": "host", "type": "STATIC", "connect_timeout": "1s", "load_assignment": bare}]}),
        "envoy.config.route.v3.RouteConfiguration" => json!({"listeners": [hcm(bare)]}),
        _ => return None,
    };
    Some(json!({
        "node": {"id": "validation", "cluster": "validation"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": resources,
    }))
}

/// `envoy --mode validate` on `bootstrap`: (accepted, what it printed).
fn envoy_validate(envoy: &Path, dir: &Path, name: &str, bootstrap: &Value) -> (bool, String) {
    let path = dir.join(format!("{name}.bootstrap.json"));
    std::fs::write(&path, bootstrap.to_string()).unwrap();
    let child = Command::new(envoy)
        .args(["--mode", "validate", "-l", "error", "--base-id"])
        .arg(process::envoy_base_id().to_string())
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", envoy.display()));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(ENVOY_TIMEOUT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{name}: envoy --mode validate ran past {ENVOY_TIMEOUT:?}; killed");
        }
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

fn decode(codec: &Codec, resource: &Value) -> prost_reflect::DynamicMessage {
    let any = codec.parse_any(resource.to_string().as_bytes()).unwrap();
    codec.decode_any(&any.type_url, &any.value).unwrap()
}

#[test]
fn the_gateway_refuses_what_envoy_refuses_and_takes_what_it_takes() {
    let envoy = process::require_envoy("validation_envoy");
    let dir = tempfile::tempdir().unwrap();
    let codec = Codec::embedded();
    let validator = Validator::new(codec.pool());

    let invalid = corpus("tests/corpus/invalid");
    assert!(invalid.len() >= 10, "{} invalid cases", invalid.len());
    for (name, case) in &invalid {
        let resource = &case["resource"];
        let bootstrap = bootstrap(resource).unwrap_or_else(|| panic!("{name}: no static home"));
        let (accepted, said) = envoy_validate(&envoy, dir.path(), name, &bootstrap);
        assert!(!accepted, "{name}: Envoy accepted it:\n{said}");
        assert!(
            REFUSALS.iter().any(|r| said.contains(r)),
            "{name}: Envoy refused it, but not for a broken rule:\n{said}"
        );
        let violation = validator
            .validate(&decode(&codec, resource))
            .expect_err(&format!(
                "{name}: Envoy refuses it, the gateway let it through"
            ));
        eprintln!("{name}: Envoy and the gateway refuse it ({violation})");
    }

    let valid: Vec<(String, Value)> = corpus("tests/corpus")
        .into_iter()
        .filter(|(_, resource)| bootstrap(resource).is_some())
        .collect();
    assert!(valid.len() >= 5, "{} valid cases", valid.len());
    for (name, resource) in &valid {
        let (accepted, said) =
            envoy_validate(&envoy, dir.path(), name, &bootstrap(resource).unwrap());
        assert!(accepted, "{name}: a corpus resource Envoy refuses:\n{said}");
        assert_eq!(
            validator.validate(&decode(&codec, resource)),
            Ok(()),
            "{name}"
        );
    }
}
