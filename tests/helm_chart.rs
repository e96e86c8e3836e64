//! The Helm chart (`deploy/helm/xds-gateway/`), checked without a cluster:
//!
//! - `helm lint --strict` passes with the default values and with
//!   `ci/full-values.yaml` (every option: `[[upstream]]` tables, TLS and mTLS
//!   on both listeners, upstream client certificates, the auth policy, the
//!   HPA, the NetworkPolicy);
//! - `helm template` of the defaults, of `ci/kubernetes-values.yaml`, of the
//!   full values and of a single `--upstream` with its TLS flags is valid for
//!   Kubernetes [`KUBERNETES`] by `kubernetes-validate --strict`, every
//!   resource of it;
//! - the chart and `deploy/kubernetes/` agree: `ci/kubernetes-values.yaml`
//!   (the snapshot of `examples/demo` given with `--set-file`) renders every
//!   manifest of `deploy/kubernetes/`, the same resources with the same
//!   specs and data (image, args, ports, probes, securityContext, volumes,
//!   Services, PDB, HPA, NetworkPolicy), only Helm's labels added; with
//!   `upstream` set it renders the control-plane overlay's Deployment;
//! - each rendered Deployment's container args are accepted by the binary
//!   (its own parser and validation, with the rendered `--config` file), and
//!   mean what the values said;
//! - contradictory values (two sources) fail the rendering, saying why;
//! - the chart's README documents every top-level value.
//!
//! Helm comes from `$HELM_BIN` or is built from `tests/peers/helm`
//! (`tests/support/helm.rs`).

#[path = "support/helm.rs"]
mod helm;
#[path = "support/kubernetes_validate.rs"]
mod kubernetes_validate;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Parser;
use kubernetes_validate::KUBERNETES;
use serde_json::{json, Value};
use xds_gateway::config::{Config, Settings};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CHART: &str = "deploy/helm/xds-gateway";
const KUBERNETES_DIR: &str = "deploy/kubernetes";
/// The release name under which the chart's names are deploy/kubernetes' names.
const RELEASE: &str = "xds-gateway";
/// Labels the chart adds to what deploy/kubernetes/ writes.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn chart() -> String {
    path(CHART).to_string_lossy().into_owned()
}

/// `helm template RELEASE CHART extra...`: its documents, or helm's error.
fn template(extra: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart();
    let mut args = vec!["template", RELEASE, chart.as_str(), "--namespace", "xds"];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = helm::run("helm_chart", &args);
    if !ok {
        return Err(stderr);
    }
    Ok(documents(&stdout))
}

fn render(extra: &[&str]) -> Vec<Value> {
    template(extra).unwrap_or_else(|e| panic!("helm template {extra:?} failed:\n{e}"))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).expect("helm's output is YAML");
            value
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The `--set-file` arguments that make examples/demo the snapshot.
fn demo_snapshot_args() -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(path("examples/demo"))
        .expect("examples/demo")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().replace('.', "\\.");
            [
                "--set-file".to_owned(),
                format!("snapshot.files.{name}={}", f.display()),
            ]
        })
        .collect()
}

fn values(file: &str) -> String {
    path(&format!("{CHART}/ci/{file}"))
        .to_string_lossy()
        .into_owned()
}

fn kubernetes_values_rendering() -> Vec<Value> {
    let mut args = vec!["-f".to_owned(), values("kubernetes-values.yaml")];
    args.extend(demo_snapshot_args());
    render(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The single-upstream variant of the full values: `--upstream` with its
/// TLS flags instead of tables.
const SINGLE_UPSTREAM: [&str; 6] = [
    "--set",
    "upstreams=null",
    "--set",
    "upstream=grpcs://control-plane.xds-system.svc:18000",
    "--set",
    "upstreamTLS.serverName=control-plane.example",
];

fn by_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn deployment(docs: &[Value]) -> &Value {
    let found = by_kind(docs, "Deployment");
    assert_eq!(found.len(), 1, "one Deployment");
    found[0]
}

fn container_args(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg").to_owned())
        .collect()
}

/// `kubernetes-validate --strict` on `files`: (success, output).
fn validate(files: &[PathBuf]) -> (bool, String) {
    kubernetes_validate::validate(&process::require_python("helm_chart"), files)
}

/// The renderings every check runs on: (what, helm template arguments).
fn renderings() -> Vec<(&'static str, Vec<String>)> {
    let full = vec!["-f".to_owned(), values("full-values.yaml")];
    let mut single = full.clone();
    single.extend(SINGLE_UPSTREAM.iter().map(|s| (*s).to_owned()));
    let mut kubernetes = vec!["-f".to_owned(), values("kubernetes-values.yaml")];
    kubernetes.extend(demo_snapshot_args());
    vec![
        ("defaults", Vec::new()),
        ("ci/kubernetes-values.yaml", kubernetes),
        ("ci/full-values.yaml", full),
        ("ci/full-values.yaml with one --upstream", single),
    ]
}

#[test]
fn helm_lint_passes_with_the_default_and_the_full_values() {
    let chart = chart();
    let full = values("full-values.yaml");
    for args in [
        vec!["lint", "--strict", chart.as_str()],
        vec!["lint", "--strict", chart.as_str(), "-f", full.as_str()],
    ] {
        let (ok, stdout, stderr) = helm::run("helm_chart", &args);
        assert!(ok, "helm {args:?}:\n{stdout}{stderr}");
        assert!(stdout.contains("0 chart(s) failed"), "{stdout}");
    }
}

#[test]
fn every_rendering_is_valid_kubernetes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    let mut resources = 0;
    for (i, (what, args)) in renderings().into_iter().enumerate() {
        let chart = chart();
        let mut full = vec!["template", RELEASE, chart.as_str(), "--namespace", "xds"];
        full.extend(args.iter().map(String::as_str));
        let (ok, stdout, stderr) = helm::run("helm_chart", &full);
        assert!(ok, "helm template ({what}):\n{stderr}");
        resources += documents(&stdout).len();
        let file = dir.path().join(format!("rendering-{i}.yaml"));
        std::fs::write(&file, stdout).unwrap();
        files.push(file);
    }
    let (ok, text) = validate(&files);
    assert!(ok, "kubernetes-validate --strict -k {KUBERNETES}:\n{text}");
    assert_eq!(
        text.matches(" passed for resource ").count(),
        resources,
        "every resource validated against a schema:\n{text}"
    );
}

/// Drops what only Helm writes: its labels (in metadata, selectors and the
/// pod template), the defaults the chart spells out (imagePullPolicy
/// IfNotPresent for a non-latest tag, Service type ClusterIP), and the
/// source comments.
fn without_helm(mut doc: Value) -> Value {
    fn strip_labels(labels: Option<&mut Value>) {
        if let Some(Value::Object(map)) = labels {
            for label in HELM_LABELS {
                map.remove(label);
            }
        }
    }
    strip_labels(doc.pointer_mut("/metadata/labels"));
    strip_labels(doc.pointer_mut("/spec/selector/matchLabels"));
    strip_labels(doc.pointer_mut("/spec/selector"));
    strip_labels(doc.pointer_mut("/spec/podSelector/matchLabels"));
    strip_labels(doc.pointer_mut("/spec/template/metadata/labels"));
    if let Some(Value::Object(c)) = doc.pointer_mut("/spec/template/spec/containers/0") {
        if c.get("imagePullPolicy") == Some(&json!("IfNotPresent")) {
            c.remove("imagePullPolicy");
        }
    }
    if doc["kind"] == "Service" && doc["spec"]["type"] == "ClusterIP" {
        doc["spec"].as_object_mut().unwrap().remove("type");
    }
    doc
}

/// deploy/kubernetes' resources, keyed by kind and name.
fn kubernetes_manifests() -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(path(KUBERNETES_DIR))
        .expect(KUBERNETES_DIR)
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") || name == "kustomization.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let mut doc: Value = serde_yaml_ng::from_str(&text).unwrap();
        // kustomization.yaml adds app.kubernetes.io/part-of to every resource.
        doc["metadata"]["labels"]["app.kubernetes.io/part-of"] = json!("xds-gateway");
        let key = (
            doc["kind"].as_str().unwrap().to_owned(),
            doc["metadata"]["name"].as_str().unwrap().to_owned(),
        );
        out.insert(key, doc);
    }
    out
}

fn keyed(docs: Vec<Value>) -> BTreeMap<(String, String), Value> {
    docs.into_iter()
        .map(|d| {
            let d = without_helm(d);
            let key = (
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["name"].as_str().unwrap().to_owned(),
            );
            (key, d)
        })
        .collect()
}

#[test]
fn the_kubernetes_values_render_deploy_kubernetes() {
    let chart = keyed(kubernetes_values_rendering());
    let mut plain = kubernetes_manifests();
    // One difference: with the HPA on, the chart leaves the replica count to
    // it (an upgrade must not reset what the HPA chose), while the plain
    // Deployment starts at the HPA's minimum.
    let deployment_key = ("Deployment".to_owned(), RELEASE.to_owned());
    let hpa_key = ("HorizontalPodAutoscaler".to_owned(), RELEASE.to_owned());
    let replicas = plain
        .get_mut(&deployment_key)
        .and_then(|d| d["spec"].as_object_mut())
        .and_then(|spec| spec.remove("replicas"))
        .expect("deploy/kubernetes sets replicas");
    assert_eq!(replicas, plain[&hpa_key]["spec"]["minReplicas"]);
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        plain.keys().collect::<Vec<_>>(),
        "the chart renders the resources of {KUBERNETES_DIR}"
    );
    for (key, want) in &plain {
        let got = &chart[key];
        assert_eq!(
            got,
            want,
            "{key:?}: the chart (ci/kubernetes-values.yaml) renders\n{}\nwhile {KUBERNETES_DIR} holds\n{}",
            serde_yaml_ng::to_string(got).unwrap(),
            serde_yaml_ng::to_string(want).unwrap()
        );
    }

    // The chart's defaults: the same, without the HPA (replicas instead)
    // and without the snapshot ConfigMap (the binary's demo).
    let defaults = keyed(render(&[]));
    let plain = kubernetes_manifests();
    let mut expected = plain.clone();
    expected.remove(&("HorizontalPodAutoscaler".to_owned(), RELEASE.to_owned()));
    expected.remove(&("ConfigMap".to_owned(), format!("{RELEASE}-snapshot")));
    assert_eq!(
        defaults.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    let key = ("Deployment".to_owned(), RELEASE.to_owned());
    let got = &defaults[&key];
    assert_eq!(got["spec"]["replicas"], plain[&key]["spec"]["replicas"]);
    let pod = &got["spec"]["template"]["spec"];
    assert!(pod.get("volumes").is_none(), "{pod}");
    let mut args = container_args(&plain[&key]);
    let at = args.iter().position(|a| a == "--snapshot").unwrap();
    args.drain(at..at + 2);
    // The chart knows its namespace, the plain manifests do not: it adds the
    // Services' in-cluster names to --allowed-hosts (allowServiceHosts).
    let mut rendered = container_args(got);
    let at = rendered
        .iter()
        .position(|a| a == "--allowed-hosts")
        .expect("the chart lists the Services' names in --allowed-hosts");
    let hosts: Vec<String> = rendered.drain(at..at + 2).collect();
    let names: Vec<String> = [RELEASE.to_owned(), format!("{RELEASE}-admin")]
        .iter()
        .flat_map(|svc| {
            ["", ".svc", ".svc.cluster.local"].map(|suffix| format!("{svc}.xds{suffix}"))
        })
        .collect();
    assert_eq!(hosts[1], names.join(","));
    assert_eq!(rendered, args);
}

/// The control-plane overlay's JSON patch applied to the base Deployment.
fn overlay_deployment() -> Value {
    let mut deployment =
        kubernetes_manifests()[&("Deployment".to_owned(), RELEASE.to_owned())].clone();
    let text = std::fs::read_to_string(path(&format!(
        "{KUBERNETES_DIR}/control-plane/upstream.yaml"
    )))
    .unwrap();
    let patch: Value = serde_yaml_ng::from_str(&text).unwrap();
    for op in patch.as_array().expect("a JSON patch") {
        let at = op["path"].as_str().unwrap();
        let (parent, key) = at.rsplit_once('/').unwrap();
        let slot = deployment
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("upstream.yaml: no object at {parent}"));
        match op["op"].as_str() {
            Some("replace") => {
                slot.insert(key.to_owned(), op["value"].clone());
            }
            Some("remove") => {
                slot.remove(key)
                    .unwrap_or_else(|| panic!("upstream.yaml: no {at}"));
            }
            other => panic!("upstream.yaml: op {other:?}"),
        }
    }
    deployment
}

#[test]
fn with_an_upstream_the_chart_renders_the_control_plane_overlay() {
    let overlay = overlay_deployment();
    let args = container_args(&overlay);
    let at = args.iter().position(|a| a == "--upstream").unwrap();
    let upstream = format!("upstream={}", args[at + 1]);
    // The chart's defaults (replicas, no HPA: the overlay patches only the
    // Deployment, which the HPA does not change).
    // Without the Services' names in --allowed-hosts: the plain manifests
    // know no namespace (the defaults' test checks the names the chart adds).
    let docs = keyed(render(&[
        "--set",
        upstream.as_str(),
        "--set",
        "allowServiceHosts=false",
    ]));
    let got = &docs[&("Deployment".to_owned(), RELEASE.to_owned())];
    assert_eq!(
        got,
        &overlay,
        "the chart with upstream set renders\n{}\nwhile the overlay makes\n{}",
        serde_yaml_ng::to_string(got).unwrap(),
        serde_yaml_ng::to_string(&overlay).unwrap()
    );
}

/// The binary's configuration for a rendered Deployment: its args, with the
/// rendered ConfigMaps written to a temp dir and their mount paths pointed
/// there (Secrets are not read at this stage).
fn binary_config(docs: &[Value], dir: &Path) -> Config {
    let deployment = deployment(docs);
    let pod = &deployment["spec"]["template"]["spec"];
    let mut mounts = BTreeMap::new();
    for mount in pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(mount["readOnly"], true, "{mount}");
        let name = mount["name"].as_str().unwrap();
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        let Some(configmap) = volume["configMap"]["name"].as_str() else {
            continue;
        };
        let Some(rendered) = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == configmap)
        else {
            continue; // a ConfigMap of the user's (a client CA)
        };
        let host = dir.join(name);
        std::fs::create_dir_all(&host).unwrap();
        for (file, text) in rendered["data"].as_object().unwrap() {
            std::fs::write(host.join(file), text.as_str().unwrap()).unwrap();
        }
        mounts.insert(mount["mountPath"].as_str().unwrap().to_owned(), host);
    }
    let args: Vec<String> = container_args(deployment)
        .into_iter()
        .map(|arg| {
            for (container, host) in &mounts {
                if let Some(rest) = arg.strip_prefix(container.as_str()) {
                    if rest.is_empty() || rest.starts_with('/') {
                        return format!("{}{rest}", host.display());
                    }
                }
            }
            arg
        })
        .collect();
    let settings = Settings::try_parse_from(
        std::iter::once("xds-gateway").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("the container args {args:?} do not parse: {e}"));
    Config::from_settings(settings)
        .unwrap_or_else(|e| panic!("the container args {args:?} are refused: {e}"))
}

#[test]
fn the_rendered_args_are_accepted_by_the_binary_and_mean_what_the_values_say() {
    for (what, args) in renderings() {
        let docs = render(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let dir = tempfile::tempdir().expect("tempdir");
        let config = binary_config(&docs, dir.path());
        assert_eq!(
            (config.listen.port(), config.admin.port()),
            (8080, 9901),
            "{what}"
        );
        match what {
            "defaults" => {
                assert!(config.snapshot.is_none() && config.upstreams.specs.is_empty());
                assert!(config.allow_insecure_listen && config.tls.is_none());
            }
            "ci/kubernetes-values.yaml" => {
                let snapshot = config.snapshot.as_ref().expect("--snapshot");
                for entry in std::fs::read_dir(path("examples/demo")).unwrap().flatten() {
                    let name = entry.file_name();
                    assert_eq!(
                        std::fs::read_to_string(snapshot.join(&name)).unwrap(),
                        std::fs::read_to_string(entry.path()).unwrap(),
                        "{name:?}"
                    );
                }
            }
            "ci/full-values.yaml" => {
                let names: Vec<&str> = config
                    .upstreams
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect();
                assert_eq!(names, ["mesh", "mesh-backup", "edge"], "{what}");
                let mesh = &config.upstreams.specs[0];
                assert_eq!(
                    mesh.tls.cert.as_deref(),
                    Some(Path::new("/etc/xds-gateway/upstream-tls/tls.crt"))
                );
                assert_eq!(mesh.headers, [("x-tenant".to_owned(), "blue".to_owned())]);
                assert_eq!(config.max_wait, std::time::Duration::from_secs(30));
                assert_eq!(config.drain_timeout, std::time::Duration::from_secs(12));
                full_tls(&config, what);
            }
            _ => {
                let spec = config.upstreams.single().expect("one upstream");
                assert!(spec.uri.starts_with("https://"), "{}", spec.uri);
                let tls = &spec.tls;
                assert_eq!(
                    tls.ca.as_deref(),
                    Some(Path::new("/etc/xds-gateway/upstream-tls/ca.crt"))
                );
                assert_eq!(
                    tls.key.as_deref(),
                    Some(Path::new("/etc/xds-gateway/upstream-tls/tls.key"))
                );
                assert_eq!(tls.server_name.as_deref(), Some("control-plane.example"));
                full_tls(&config, what);
            }
        }
    }
}

/// What ci/full-values.yaml says of the listeners and the policy.
fn full_tls(config: &Config, what: &str) {
    assert!(!config.allow_insecure_listen, "{what}");
    let tls = config.tls.as_ref().expect("REST TLS");
    assert_eq!(tls.cert, Path::new("/etc/xds-gateway/tls/tls.crt"));
    assert_eq!(
        tls.client_ca.as_deref(),
        Some(Path::new("/etc/xds-gateway/client-ca/ca.crt"))
    );
    let admin = config.admin_tls.as_ref().expect("admin TLS");
    assert_eq!(
        admin.client_ca.as_deref(),
        Some(Path::new("/etc/xds-gateway/admin-client-ca/ca.crt"))
    );
    assert_eq!(
        config.auth_policy.as_deref(),
        Some(Path::new("/etc/xds-gateway/auth/policy.toml"))
    );
}

#[test]
fn the_full_values_render_every_optional_resource() {
    let full = values("full-values.yaml");
    let docs = render(&["-f", full.as_str()]);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for kind in [
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    // The policy Secret holds the values' policy, which parses as TOML.
    let secret = by_kind(&docs, "Secret")[0];
    let policy = secret["stringData"]["policy.toml"]
        .as_str()
        .expect("policy");
    let _: toml::Value = toml::from_str(policy).expect("the policy is TOML");
    // The HPA owns the replica count; the probes, the security context stay.
    let deployment = deployment(&docs);
    assert!(deployment["spec"].get("replicas").is_none());
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    // On the admin port, over HTTPS since the admin listener has TLS.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "admin", "{probe}");
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    assert!(
        deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"].is_string()
    );
}

#[test]
fn contradictory_values_fail_the_rendering() {
    for (set, says) in [
        (
            vec![
                "--set",
                "upstream=grpc://a:1",
                "--set",
                "snapshot.files.a\\.yaml=x",
            ],
            "at most one of upstream, upstreams and snapshot.files",
        ),
        (
            vec!["--set", "upstreamTLS.secretName=s"],
            "upstreamTLS needs upstream or upstreams",
        ),
        (
            vec!["--set", "tls.clientCA.secretName=ca"],
            "clientCA (mTLS) needs the listener's TLS secretName",
        ),
        (
            vec![
                "--set",
                "adminTLS.secretName=t",
                "--set",
                "adminTLS.clientCA.secretName=ca",
            ],
            "adminTLS.clientCA needs adminTLS.clientAuth: optional",
        ),
    ] {
        let err = template(&set).expect_err("rendered");
        assert!(err.contains(says), "{set:?}: {err}");
    }
}

#[test]
fn the_chart_readme_documents_every_value() {
    let values: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(path(&format!("{CHART}/values.yaml"))).unwrap(),
    )
    .unwrap();
    let readme = std::fs::read_to_string(path(&format!("{CHART}/README.md"))).unwrap();
    for key in values.as_object().expect("values.yaml is a mapping").keys() {
        assert!(
            readme.contains(&format!("`{key}")),
            "{CHART}/README.md does not document the value {key}"
        );
    }
}

/// Issue 54, finding 6: the admin port serves every node's config with no
/// credential by default, so it is fenced: the NetworkPolicy admits only
/// pods labelled `networkPolicy.adminLabels` there (not the whole
/// namespace), and without a NetworkPolicy the chart refuses to render an
/// admin port that asks for no credential, unless `allowInsecureAdmin`;
/// `--allow-insecure-admin` is passed exactly where one of those fences it.
#[test]
fn the_admin_port_is_fenced_by_default() {
    let docs = render(&[]);
    let policy = by_kind(&docs, "NetworkPolicy")
        .into_iter()
        .next()
        .expect("a NetworkPolicy by default");
    let admin_rule = policy["spec"]["ingress"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["ports"][0]["port"] == "admin"))
        .unwrap_or_else(|| panic!("no admin rule: {policy}"));
    assert_eq!(
        admin_rule["from"],
        json!([{"podSelector": {"matchLabels": {"xds-gateway-admin": "true"}}}]),
        "{policy}"
    );
    let open = ["--set", "networkPolicy.enabled=false"];
    let err = template(&open).expect_err("an open admin port rendered");
    assert!(err.contains("allowInsecureAdmin"), "{err}");
    for credential in [
        "allowInsecureAdmin=true",
        "authPolicy.existingSecret=policy",
        "adminTLS.secretName=t",
    ] {
        let mut set = open.to_vec();
        set.extend(["--set", credential]);
        if credential.starts_with("adminTLS") {
            set.extend([
                "--set",
                "adminTLS.clientCA.secretName=ca",
                "--set",
                "adminTLS.clientAuth=optional",
            ]);
        }
        template(&set).unwrap_or_else(|e| panic!("{credential}: {e}"));
    }
    // The binary closes the admin details off loopback without a credential
    // unless told the network fences them: the chart tells it exactly when
    // the NetworkPolicy (or the operator) does, and never once a credential
    // guards them.
    let opens = |extra: &[&str]| {
        let docs = keyed(render(extra));
        let deployment = &docs[&("Deployment".to_owned(), RELEASE.to_owned())];
        container_args(deployment).contains(&"--allow-insecure-admin".to_owned())
    };
    assert!(opens(&[]), "behind the default NetworkPolicy");
    assert!(opens(&[
        "--set",
        "networkPolicy.enabled=false",
        "--set",
        "allowInsecureAdmin=true"
    ]));
    assert!(
        !opens(&["--set", "authPolicy.existingSecret=policy"]),
        "with a credential"
    );
}
