//! `deploy/kubernetes/`, checked without a cluster (there is none where these
//! tests run):
//!
//! - every manifest, and the control-plane overlay's Deployment (its JSON
//!   patch applied here), is valid for Kubernetes [`KUBERNETES`] by PyPI
//!   `kubernetes-validate --strict` (unknown fields refused; a broken copy is
//!   checked to fail, so the validator really validates);
//! - `kustomization.yaml` lists exactly the manifests beside it;
//! - the Deployment agrees with the Dockerfile (user, ports), with the
//!   binary (its args are accepted, and started with them on loopback it
//!   serves the ConfigMap's snapshot and turns ready), with itself (probes on
//!   the admin port, drain time below the grace period, non-root,
//!   read-only root filesystem) and with the Services, the PodDisruptionBudget,
//!   the HorizontalPodAutoscaler and the NetworkPolicy that select it;
//! - the ConfigMap holds `examples/demo` byte for byte.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/kubernetes_validate.rs"]
mod kubernetes_validate;
#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use kubernetes_validate::KUBERNETES;
use serde_json::Value;
use xds_gateway::config::{Config, Settings};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DIR: &str = "deploy/kubernetes";
const OVERLAY: &str = "deploy/kubernetes/control-plane";

fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn yaml(rel: &str) -> Value {
    let text = std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

/// The manifests of the base: every `.yaml` beside `kustomization.yaml`.
fn manifests() -> BTreeSet<String> {
    std::fs::read_dir(path(DIR))
        .expect("read deploy/kubernetes")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect()
}

/// The base's resources by kind.
fn by_kind() -> BTreeMap<String, Value> {
    manifests()
        .iter()
        .map(|file| {
            let doc = yaml(&format!("{DIR}/{file}"));
            let kind = doc["kind"].as_str().expect("kind").to_owned();
            (kind, doc)
        })
        .collect()
}

/// `kubernetes-validate --strict` on `files`: (success, output).
fn validate(files: &[PathBuf]) -> (bool, String) {
    kubernetes_validate::validate(&process::require_python("kubernetes_manifests"), files)
}

/// The overlay's Deployment: the base one with the overlay's JSON patch
/// (`replace` and `remove` operations) applied.
fn overlay_deployment() -> Value {
    let kustomization = yaml(&format!("{OVERLAY}/kustomization.yaml"));
    assert_eq!(kustomization["resources"], serde_json::json!([".."]));
    let patches = kustomization["patches"].as_array().expect("patches");
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(patches[0]["target"]["kind"], "Deployment");
    let file = patches[0]["path"].as_str().expect("patch path");
    let mut deployment = by_kind()["Deployment"].clone();
    assert_eq!(patches[0]["target"]["name"], deployment["metadata"]["name"]);
    for op in yaml(&format!("{OVERLAY}/{file}"))
        .as_array()
        .expect("a JSON patch is a list")
    {
        let at = op["path"].as_str().expect("op path");
        let (parent, key) = at.rsplit_once('/').expect("a pointer");
        let parent = deployment
            .pointer_mut(parent)
            .unwrap_or_else(|| panic!("{file}: no {parent} in the base Deployment"));
        let slot = parent
            .as_object_mut()
            .unwrap_or_else(|| panic!("{file}: {at}: only object members are patched"));
        match op["op"].as_str() {
            Some("replace") => {
                assert!(slot.contains_key(key), "{file}: replace of a missing {at}");
                slot.insert(key.to_owned(), op["value"].clone());
            }
            Some("remove") => {
                assert!(
                    slot.remove(key).is_some(),
                    "{file}: remove of a missing {at}"
                );
            }
            other => panic!("{file}: op {other:?} (this test applies replace and remove)"),
        }
    }
    deployment
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

fn container_args(deployment: &Value) -> Vec<String> {
    container(deployment)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg").to_owned())
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

/// The binary's configuration for `args`.
fn binary_config(args: &[String]) -> Config {
    let settings = Settings::try_parse_from(
        std::iter::once("xds-gateway").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("the container args {args:?} do not parse: {e}"));
    Config::from_settings(settings).unwrap_or_else(|e| panic!("the container args {args:?}: {e}"))
}

/// The Dockerfile's last value of `instruction` (comments skipped).
fn dockerfile(instruction: &str) -> String {
    let text = std::fs::read_to_string(path("Dockerfile")).expect("Dockerfile");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{instruction} ")))
        .next_back()
        .unwrap_or_else(|| panic!("no {instruction} in the Dockerfile"))
        .trim()
        .to_owned()
}

fn seconds(text: &str) -> u64 {
    humantime::parse_duration(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .as_secs()
}

#[test]
fn every_manifest_is_valid_kubernetes_and_the_kustomization_lists_them() {
    let kustomization = yaml(&format!("{DIR}/kustomization.yaml"));
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a resource path").to_owned())
        .collect();
    assert_eq!(
        listed,
        manifests(),
        "kustomization.yaml resources vs. the files beside it"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path().join("overlay-deployment.yaml");
    std::fs::write(
        &overlay,
        serde_yaml_ng::to_string(&overlay_deployment()).unwrap(),
    )
    .unwrap();
    let mut files: Vec<PathBuf> = manifests()
        .iter()
        .map(|f| path(&format!("{DIR}/{f}")))
        .collect();
    files.push(overlay);
    let (ok, text) = validate(&files);
    assert!(ok, "kubernetes-validate --strict -k {KUBERNETES}:\n{text}");
    assert_eq!(
        text.matches(" passed for resource ").count(),
        files.len(),
        "every file validated against a schema:\n{text}"
    );

    // The validator is strict: an unknown field fails.
    let mut broken = by_kind()["Deployment"].clone();
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = Value::from("typo");
    let broken_file = dir.path().join("broken.yaml");
    std::fs::write(&broken_file, serde_yaml_ng::to_string(&broken).unwrap()).unwrap();
    let (ok, text) = validate(&[broken_file]);
    assert!(!ok, "a Deployment with an unknown field passed:\n{text}");
}

#[test]
fn the_deployment_agrees_with_the_dockerfile_the_binary_and_its_neighbours() {
    let kinds = by_kind();
    let deployment = &kinds["Deployment"];
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(&deployment["spec"]["selector"]["matchLabels"], labels);
    let c = container(deployment);
    let args = container_args(deployment);
    let config = binary_config(&args);
    let d = Config::default();

    // Ports: the binary's listeners = the container ports = the image's.
    let ports: BTreeMap<&str, u64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = BTreeMap::from([
        ("rest", u64::from(config.listen.port())),
        ("admin", u64::from(config.admin.port())),
    ]);
    assert_eq!(ports, expected);
    assert!(config.listen.ip().is_unspecified() && config.admin.ip().is_unspecified());
    assert_eq!(
        (config.listen.port(), config.admin.port()),
        (d.listen.port(), d.admin.port())
    );
    let exposed = dockerfile("EXPOSE");
    assert_eq!(exposed, format!("{} {}", d.listen.port(), d.admin.port()));

    // Non-root as the image's user, read-only root filesystem.
    let user = dockerfile("USER");
    let uid: u64 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    let security = &pod["spec"]["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"].as_u64(), Some(uid), "USER {user}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);

    // Probes on the admin port; the drain fits the grace period.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "admin", "{probe}");
    }
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace period");
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("preStop sleep");
    let drain = config.drain_timeout.as_secs();
    assert_eq!(Some(drain), flag(&args, "--drain-timeout").map(seconds));
    // After the drain: one idle check (1s), the admin listener (at most 5s).
    assert!(
        pre_stop + drain + 6 <= grace,
        "preStop {pre_stop}s + drain {drain}s + 6s exceeds terminationGracePeriodSeconds {grace}"
    );
    // Listening on 0.0.0.0 unprotected is said, and fenced by the NetworkPolicy.
    assert!(config.allow_insecure_listen && config.tls.is_none() && config.auth_policy.is_none());
    let policy = &kinds["NetworkPolicy"];
    assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], labels);
    let rest_rule = policy["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .find(|r| r["ports"][0]["port"] == "rest")
        .expect("a rule for the REST port");
    assert!(
        rest_rule["from"][0]["podSelector"]["matchLabels"].is_object(),
        "{rest_rule}"
    );

    // The snapshot: the ConfigMap, mounted where --snapshot points.
    let mount = &c["volumeMounts"][0];
    assert_eq!(mount["readOnly"], true);
    assert_eq!(
        Some(mount["mountPath"].as_str().unwrap()),
        flag(&args, "--snapshot")
    );
    let volume = &pod["spec"]["volumes"][0];
    assert_eq!(volume["name"], mount["name"]);
    let configmap = &kinds["ConfigMap"];
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
    let data = configmap["data"].as_object().expect("data");
    let demo: BTreeMap<String, String> = std::fs::read_dir(path("examples/demo"))
        .expect("examples/demo")
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(e.path()).expect("a demo file"),
            )
        })
        .collect();
    let held: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_owned()))
        .collect();
    assert_eq!(held, demo, "the ConfigMap is examples/demo");

    // Who selects it.
    let name = &deployment["metadata"]["name"];
    for (service, port) in [("service.yaml", "rest"), ("service-admin.yaml", "admin")] {
        let svc = yaml(&format!("{DIR}/{service}"));
        assert_eq!(&svc["spec"]["selector"], labels, "{service}");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], port, "{service}");
        assert_eq!(
            svc["spec"]["ports"][0]["port"].as_u64(),
            ports.get(port).copied()
        );
    }
    assert_eq!(
        &kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        labels
    );
    let hpa = &kinds["HorizontalPodAutoscaler"]["spec"];
    assert_eq!(&hpa["scaleTargetRef"]["name"], name);
    assert_eq!(hpa["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["metrics"][0]["resource"]["name"], "cpu");
    assert!(
        hpa["minReplicas"].as_u64() >= Some(2),
        "the PDB needs two to allow a drain"
    );
    assert!(
        c["resources"]["requests"]["cpu"].is_string(),
        "the HPA needs a CPU request"
    );

    // The overlay: an upstream instead of the snapshot, the rest unchanged.
    let overlay = overlay_deployment();
    let overlay_args = container_args(&overlay);
    let upstream = binary_config(&overlay_args);
    assert!(upstream.upstream.is_some() && upstream.snapshot.is_none());
    assert_eq!(
        (upstream.listen, upstream.admin),
        (config.listen, config.admin)
    );
    assert_eq!(upstream.drain_timeout, config.drain_timeout);
    assert!(container(&overlay).get("volumeMounts").is_none());
}

/// The Deployment's args, with the ConfigMap's directory at a host path and
/// the listeners on free loopback ports, start the binary, which turns ready
/// and serves the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_args_start_the_binary_on_the_configmap_snapshot() {
    let kinds = by_kind();
    let args = container_args(&kinds["Deployment"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir(&snapshot).unwrap();
    for (name, text) in kinds["ConfigMap"]["data"].as_object().expect("data") {
        std::fs::write(snapshot.join(name), text.as_str().unwrap()).unwrap();
    }
    let (rest, admin) = (process::free_port(), process::free_port());
    let mut run = args.clone();
    for (flag_name, value) in [
        ("--snapshot", snapshot.to_str().unwrap().to_owned()),
        ("--listen", format!("127.0.0.1:{rest}")),
        ("--admin", format!("127.0.0.1:{admin}")),
    ] {
        let at = run.iter().position(|a| a == flag_name).expect(flag_name);
        run[at + 1] = value;
    }
    let log = dir.path().join(envoy::GATEWAY_LOG);
    let mut gateway = envoy::spawn_gateway(&run, false, &log);
    let what = format!("xds-gateway {run:?}");
    let readyz =
        envoy::wait_gateway_ready(&mut gateway, admin, Duration::from_millis(50), &what).await;
    assert!(
        readyz["source"]
            .as_str()
            .unwrap_or_default()
            .starts_with("snapshot directory"),
        "{readyz}"
    );
    let (status, body) = process::http_get(rest, "/v3/discovery:listeners?node=demo")
        .await
        .expect("GET listeners");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"name\":\"demo\""), "{body}");
}
