//! The gateway in front of Istio's own xDS server (`tests/peers/istio/`:
//! istiod's config generator over a fake Kubernetes client holding a small
//! bookinfo mesh, `support/istio_peer.rs`), in SotW, delta and auto:
//!
//! - profile GETs (`examples/profiles`) of CDS, LDS, RDS and EDS for the
//!   productpage sidecar, and of CDS and LDS for the ingress gateway, equal
//!   what Istio sends the same node directly: the same names, and each
//!   resource's JSON equal to Go's `protojson` of it (the gateway started
//!   with no `--descriptor-set` and no config-source rewrite: it learns
//!   Istio's own filter configs from istiod's gRPC server reflection);
//! - an RDS subscription that grows and then shrinks keeps every route
//!   configuration asked for (Istio sends only the added one);
//! - a pod leaving and joining (an incremental EDS push of one service)
//!   leaves every other assignment served;
//! - a ServiceEntry added and removed reaches a held long poll;
//! - no NACK ever reaches Istio; with reflection off, the listeners are
//!   served to the Envoy profile with its config sources rewritten (Istio's
//!   ALPN filter as an opaque Any, never a 500), never NACKed, and
//!   `/readyz` names the types; `xds-gateway descriptors`, run against
//!   Istio with the types the header names, writes a descriptor set with
//!   which they render in full.
//!
//! Istio serves ADS only (its per-type services and Fetch are
//! UNIMPLEMENTED: see the peer's README), so there is no per-type run.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/istio_peer.rs"]
mod istio_peer;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use inproc::InProcess;
use istio_peer::{
    IstioPeer, CLUSTER_TYPE, DETAILS_POD, ENDPOINT_TYPE, INGRESS_POD, LISTENER_TYPE,
    PRODUCTPAGE_POD, REVIEWS_V2_POD, ROUTE_TYPE,
};
use xds_gateway::config::{Config, RewritePolicy, UpstreamMode};

const TEST_TIMEOUT: Duration = Duration::from_secs(180);
const OPAQUE_HEADER: &str = "x-xds-gateway-opaque-types";
/// How long a change may take to reach a poll.
const CHANGE_WAIT: Duration = Duration::from_secs(15);

fn profiles_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/profiles")
}

/// How the gateway in front of Istio learns Istio's own types.
enum Learning {
    /// From istiod's gRPC server reflection.
    Reflection,
    /// Not at all, config sources rewritten for the Envoy profiles.
    Off,
    /// From a descriptor set file, reflection off.
    File(PathBuf),
}

/// The gateway in front of `peer` in `mode`, presenting the example
/// profiles, learning Istio's types as `learning` says; config sources as
/// Istio wrote them unless learning is off.
async fn gateway(peer: &IstioPeer, mode: UpstreamMode, learning: Learning) -> InProcess {
    let (reflection, rewrite, descriptor_sets) = match learning {
        Learning::Reflection => (true, RewritePolicy::Never, Vec::new()),
        Learning::Off => (false, RewritePolicy::Auto, Vec::new()),
        Learning::File(path) => (false, RewritePolicy::Never, vec![path]),
    };
    let config = Config {
        upstream: Some(peer.upstream()),
        upstream_mode: mode,
        node_profiles: Some(profiles_dir()),
        rewrite_config_sources: rewrite,
        upstream_reflection: reflection,
        descriptor_sets,
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

/// A REST answer: status, headers and JSON body.
async fn get(gw: &InProcess, path: &str) -> (u16, http::HeaderMap, Value) {
    let reply = gateway::http_request(
        gw.rest_port,
        http::Method::GET,
        path,
        &[],
        bytes::Bytes::new(),
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let json = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status, reply.headers, json)
}

/// The resources of an answer by name (`name`, or `clusterName`).
fn by_name(resources: &Value) -> BTreeMap<String, Value> {
    resources
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let name = r
                .get("name")
                .or_else(|| r.get("clusterName"))
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("a resource without a name: {r}"));
            (name.to_owned(), r.clone())
        })
        .collect()
}

/// The first place `a` and `b` differ, as a JSON path, if any.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (l, r) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                first_difference(l, r, &format!("{path}.{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (l, r))| first_difference(l, r, &format!("{path}[{i}]"))),
        // A JSON number is a number: protojson writes a double 100.0 as
        // `100`, the gateway (as Python's json_format) as `100.0`.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(format!("{path}: gateway {a} | Istio {b}")),
    }
}

/// The profile GET of `type_path` for `pod` (its node id from the mesh)
/// equals what Istio sends the pod's own node directly: names and JSON.
async fn same_as_direct(
    gw: &InProcess,
    peer: &IstioPeer,
    profile: &str,
    pod: &str,
    (type_path, type_url): (&str, &str),
    names: &[&str],
) -> Vec<String> {
    let node = peer.node(pod).await;
    let id = node["id"].as_str().expect("a node id").to_owned();
    let mut path = format!(
        "/v3/discovery:{type_path}?profile={profile}&node={}",
        encode(&id)
    );
    if !names.is_empty() {
        path.push_str(&format!("&names={}", encode(&names.join(","))));
    }
    // An answer given before istiod's reflection answered holds Istio's
    // types opaque; it is given again in full at a new version.
    let full = process::eventually(CHANGE_WAIT, Duration::from_millis(100), || async {
        let (status, headers, body) = get(gw, &path).await;
        (status != 200 || !headers.contains_key(OPAQUE_HEADER)).then_some((status, body))
    })
    .await;
    let Some((status, body)) = full else {
        let (_, headers, _) = get(gw, &path).await;
        panic!("{type_path} of {pod}: still opaque after {CHANGE_WAIT:?}: {headers:?}");
    };
    assert_eq!(status, 200, "{type_path} of {pod}: {body}");
    let direct = peer.direct_xds(&node, type_url, names, false).await;
    let (ours, istios) = (by_name(&body["resources"]), by_name(&direct["resources"]));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        istios.keys().collect::<Vec<_>>(),
        "{type_path} of {pod}: not the names Istio sends directly"
    );
    for (name, resource) in &ours {
        if let Some(difference) = first_difference(resource, &istios[name], name) {
            panic!("{type_path} of {pod}: {difference}");
        }
    }
    ours.into_keys().collect()
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The names a REST answer holds.
async fn names_of(gw: &InProcess, path: &str) -> Vec<String> {
    let (status, _, body) = get(gw, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    by_name(&body["resources"]).into_keys().collect()
}

/// Polls `path` until `done` holds for its answer; panics with `what`.
async fn until(gw: &InProcess, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    process::eventually(CHANGE_WAIT, Duration::from_millis(100), || async {
        let (status, _, body) = get(gw, path).await;
        (status == 200 && done(&body)).then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("{what} within {CHANGE_WAIT:?} ({path})"))
}

const EXTERNAL_API: &str = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: external-api
  namespace: default
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
"#;

async fn against_istio(test: &str, mode: UpstreamMode) {
    rest::bounded(TEST_TIMEOUT, async {
        let peer = IstioPeer::start(test);
        let gw = gateway(&peer, mode, Learning::Reflection).await;

        // What a sidecar and the ingress gateway get, as Istio sends it.
        let clusters = same_as_direct(
            &gw,
            &peer,
            "istio-sidecar",
            PRODUCTPAGE_POD,
            ("clusters", CLUSTER_TYPE),
            &[],
        )
        .await;
        same_as_direct(
            &gw,
            &peer,
            "istio-sidecar",
            PRODUCTPAGE_POD,
            ("listeners", LISTENER_TYPE),
            &[],
        )
        .await;
        let routes = ["80", "8000", "9080"];
        same_as_direct(
            &gw,
            &peer,
            "istio-sidecar",
            PRODUCTPAGE_POD,
            ("routes", ROUTE_TYPE),
            &routes,
        )
        .await;
        let eds: Vec<&str> = clusters
            .iter()
            .map(String::as_str)
            .filter(|c| {
                c.starts_with("outbound|")
                    && c.ends_with(".svc.cluster.local")
                    && !c.contains("istio-ingressgateway")
            })
            .collect();
        same_as_direct(
            &gw,
            &peer,
            "istio-sidecar",
            PRODUCTPAGE_POD,
            ("endpoints", ENDPOINT_TYPE),
            &eds,
        )
        .await;
        same_as_direct(
            &gw,
            &peer,
            "istio-ingressgateway",
            INGRESS_POD,
            ("clusters", CLUSTER_TYPE),
            &[],
        )
        .await;
        same_as_direct(
            &gw,
            &peer,
            "istio-ingressgateway",
            INGRESS_POD,
            ("listeners", LISTENER_TYPE),
            &[],
        )
        .await;

        // An RDS subscription that grows, then shrinks (a node of its own:
        // productpage's session subscribed all three above).
        let details = peer.node(DETAILS_POD).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let details = format!("profile=istio-sidecar&node={}", encode(&details));
        let rds = |names: &str| format!("/v3/discovery:routes?{details}&names={names}");
        assert_eq!(names_of(&gw, &rds("9080")).await, ["9080"]);
        assert_eq!(
            names_of(&gw, &rds("80,8000,9080")).await,
            ["80", "8000", "9080"],
            "the subscription grew"
        );
        assert_eq!(names_of(&gw, &rds("9080")).await, ["9080"], "and shrank");

        let id = peer.node(PRODUCTPAGE_POD).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let base = format!("profile=istio-sidecar&node={}", encode(&id));

        // A pod leaves and joins: an incremental EDS push of one service.
        let all = format!(
            "/v3/discovery:endpoints?{base}&names={}",
            encode(&eds.join(","))
        );
        assert_eq!(names_of(&gw, &all).await.len(), eds.len());
        let v2_subset = "outbound|9080|v2|reviews.default.svc.cluster.local";
        let v2_endpoints = |body: &Value| {
            by_name(&body["resources"])
                .get(v2_subset)
                .map(|a| a["endpoints"].as_array().map_or(0, Vec::len))
        };
        peer.remove_pod("default", REVIEWS_V2_POD).await;
        let left = until(&gw, &all, "reviews-v2 left the v2 subset", |b| {
            v2_endpoints(b) == Some(0)
        })
        .await;
        assert_eq!(
            by_name(&left["resources"]).len(),
            eds.len(),
            "every other assignment is still served: {left}"
        );
        peer.add_pod("default", REVIEWS_V2_POD).await;
        let back = until(&gw, &all, "reviews-v2 came back", |b| {
            v2_endpoints(b) == Some(1)
        })
        .await;
        assert_eq!(by_name(&back["resources"]).len(), eds.len());

        // A ServiceEntry added, then removed, reaches a held long poll.
        let cds = format!("/v3/discovery:clusters?{base}");
        let external = "outbound|443||api.example.com";
        for (add, what) in [(true, "added"), (false, "removed")] {
            let (_, _, now) = get(&gw, &cds).await;
            let version = now["versionInfo"].as_str().expect("a version").to_owned();
            let held = {
                let path = format!("{cds}&version={}&wait=10s", encode(&version));
                let port = gw.rest_port;
                tokio::spawn(async move {
                    let reply = gateway::http_request(
                        port,
                        http::Method::GET,
                        &path,
                        &[],
                        bytes::Bytes::new(),
                        Duration::from_secs(20),
                    )
                    .await;
                    reply.map(|r| {
                        (
                            r.status,
                            serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null),
                        )
                    })
                })
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            if add {
                peer.add_config(EXTERNAL_API).await;
            } else {
                peer.delete_config("ServiceEntry", "default", "external-api")
                    .await;
            }
            let (status, body) = held.await.expect("the held poll").expect("an answer");
            eprintln!(
                "{test}: a ServiceEntry {what} reached the held poll in {:?}",
                started.elapsed()
            );
            assert_eq!(status, 200, "{what}: {body}");
            assert_eq!(
                by_name(&body["resources"]).contains_key(external),
                add,
                "{what}: {body}"
            );
        }

        // Never a NACK to Istio.
        let stats = peer.stats().await;
        let nacks: Vec<&Value> = stats["nacks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["direct"] != true)
            .collect();
        assert!(nacks.is_empty(), "the gateway NACKed Istio: {nacks:?}");
        gw.stop().await;

        // Reflection off: served to the Envoy profile (opaque), never a
        // 500, never NACKed; /readyz names the types.
        let gw = gateway(&peer, mode, Learning::Off).await;
        let listeners = format!("/v3/discovery:listeners?{base}");
        let (status, headers, body) = get(&gw, &listeners).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.to_string().contains("\"apiType\":\"REST\""),
            "config sources rewritten for the Envoy profile: {body}"
        );
        let opaque: Vec<String> = headers
            .get(OPAQUE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        assert!(
            opaque
                .iter()
                .any(|t| t.ends_with("istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig")),
            "{headers:?}"
        );
        let (_, ready) = process::http_get(gw.admin_port, "/readyz")
            .await
            .expect("/readyz");
        assert!(
            opaque.iter().all(|t| ready.contains(t.as_str()))
                && ready.contains("reflection is off"),
            "/readyz names each opaque type and why: {ready}"
        );
        gw.stop().await;

        // The command an operator runs instead: the descriptors of the
        // types the header named, from istiod's reflection, to a file.
        let dir = tempfile::tempdir().expect("a temp dir");
        let out = dir.path().join("istio.pb");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_xds-gateway"));
        command
            .arg("descriptors")
            .arg("--upstream")
            .arg(peer.upstream())
            .arg("--out")
            .arg(&out);
        for type_url in &opaque {
            command.arg("--type").arg(type_url);
        }
        let ran =
            process::run_in_group(command, Duration::from_secs(30), "xds-gateway descriptors")
                .await;
        assert!(
            ran.success,
            "xds-gateway descriptors: {} {}",
            ran.stdout, ran.stderr
        );
        let gw = gateway(&peer, mode, Learning::File(out)).await;
        let (status, headers, body) = get(&gw, &listeners).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            !headers.contains_key(OPAQUE_HEADER),
            "rendered with the file: {headers:?}"
        );
        let stats = peer.stats().await;
        let nacks = stats["nacks"]
            .as_array()
            .map_or(0, |n| n.iter().filter(|n| n["direct"] != true).count());
        assert_eq!(nacks, 0, "NACKed: {stats}");
        gw.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_through_the_gateway_over_sotw() {
    against_istio("istio_through_the_gateway_over_sotw", UpstreamMode::Sotw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_through_the_gateway_over_delta() {
    against_istio("istio_through_the_gateway_over_delta", UpstreamMode::Delta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_through_the_gateway_in_auto_mode() {
    against_istio("istio_through_the_gateway_in_auto_mode", UpstreamMode::Auto).await;
}
