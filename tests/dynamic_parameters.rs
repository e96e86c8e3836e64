//! Variants of resources by dynamic parameters (xDS TP2), end to end: REST
//! clients whose `resource_locators` carry parameters, the gateway's
//! subscriptions upstream (SotW, delta and fetch), and the variants the
//! control plane sends in `Resource` wrappers whose `resource_name` carries
//! their constraints.
//!
//! The scripted control plane sends every variant of a name it is asked
//! for, whatever the parameters (a server sending more than the matching
//! one): what each client gets is the gateway's choice. No control plane
//! here sends variants of its own (Envoy 1.40 marks the fields not
//! implemented; go-control-plane and java-control-plane have none), so
//! the constraints' JSON is checked against Python's `json_format` with
//! `xds-protos`.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/json_reference.rs"]
mod json_reference;
#[path = "support/process.rs"]
mod process;

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    single_constraint::{ConstraintType, Exists},
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DynamicParameterConstraints, Resource, ResourceName,
};
use envoy_types::pb::google::protobuf::Any;
use inproc::InProcess;
use prost::Message;
use serde_json::{json, Value};
use xds_gateway::config::{Config, UpstreamMode};

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

fn cluster(name: &str, timeout_s: i64) -> Any {
    fake_ads::json_any(&format!(
        r#"{{"@type":"{CDS}","name":"{name}","connect_timeout":"{timeout_s}s"}}"#
    ))
}

fn single(key: &str, constraint: ConstraintType) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: key.into(),
            constraint_type: Some(constraint),
        })),
    }
}

fn env_is(value: &str) -> DynamicParameterConstraints {
    single("env", ConstraintType::Value(value.into()))
}

fn no_env() -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(Type::NotConstraints(Box::new(single(
            "env",
            ConstraintType::Exists(Exists {}),
        )))),
    }
}

/// `resource` as the variant of `name` under `constraints`, in the wrapper
/// a control plane sends it in.
fn variant(name: &str, resource: Any, constraints: DynamicParameterConstraints) -> Any {
    let wrapper = Resource {
        resource_name: Some(ResourceName {
            name: name.into(),
            dynamic_parameter_constraints: Some(constraints),
        }),
        resource: Some(resource),
        ..Default::default()
    };
    Any {
        type_url: WRAPPER.into(),
        value: wrapper.encode_to_vec(),
    }
}

/// The control plane's clusters: `a` plain; `b` in two variants (env prod
/// with a 1 s connect timeout, env test with 2 s); `c` only for clients
/// sending no `env`.
fn clusters() -> Vec<Any> {
    vec![
        cluster("a", 5),
        variant("b", cluster("b", 1), env_is("prod")),
        variant("b", cluster("b", 2), env_is("test")),
        variant("c", cluster("c", 3), no_env()),
    ]
}

async fn post(port: u16, body: Value) -> (u16, Value) {
    let (status, _, body) = process::http_exchange(
        port,
        http::Method::POST,
        "/v3/discovery:clusters",
        &[("content-type", "application/json")],
        bytes::Bytes::from(body.to_string()),
    )
    .await
    .expect("an answer");
    let body = serde_json::from_slice(&body).expect("a JSON body");
    (status, body)
}

/// A request for `a`, `b` and `c` as locators carrying `env` (or as plain
/// names when `env` is `None`).
fn asking(env: Option<&str>) -> Value {
    let names = ["a", "b", "c"];
    match env {
        Some(env) => json!({
            "node": {"id": "n", "cluster": "k"},
            "resource_locators": names.map(|n| json!({"name": n, "dynamic_parameters": {"env": env}})),
        }),
        None => json!({"node": {"id": "n", "cluster": "k"}, "resource_names": names}),
    }
}

/// Each resource served as (name, connect timeout, constraints if it came
/// as a variant).
fn served(body: &Value) -> Vec<(String, String, Option<Value>)> {
    let resources = body["resources"].as_array().cloned().unwrap_or_default();
    resources
        .iter()
        .map(|r| match r["@type"].as_str() {
            Some(WRAPPER) => (
                r["resourceName"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                r["resource"]["connectTimeout"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                Some(r["resourceName"]["dynamicParameterConstraints"].clone()),
            ),
            _ => (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["connectTimeout"].as_str().unwrap_or_default().to_owned(),
                None,
            ),
        })
        .collect()
}

fn entry(name: &str, timeout: &str, constraints: Option<Value>) -> (String, String, Option<Value>) {
    (name.to_owned(), timeout.to_owned(), constraints)
}

/// What each of the three clients must be served, in every mode.
fn check_answers(prod: &Value, test: &Value, plain: &Value) {
    let prod_constraints = json!({"constraint": {"key": "env", "value": "prod"}});
    let test_constraints = json!({"constraint": {"key": "env", "value": "test"}});
    let no_env = json!({"notConstraints": {"constraint": {"key": "env", "exists": {}}}});
    assert_eq!(
        served(prod),
        [
            entry("a", "5s", None),
            entry("b", "1s", Some(prod_constraints))
        ],
        "env=prod: {prod}"
    );
    assert_eq!(
        served(test),
        [
            entry("a", "5s", None),
            entry("b", "2s", Some(test_constraints))
        ],
        "env=test: {test}"
    );
    assert_eq!(
        served(plain),
        [entry("a", "5s", None), entry("c", "3s", Some(no_env))],
        "by names: {plain}"
    );
}

/// Every variant is kept with its constraints, side by side across the
/// sessions of the parameter sets asking; each client is served the one
/// its parameters match, in a wrapper carrying the constraints; a client
/// asking by names gets the variants that match no parameters. Upstream,
/// each session subscribes with locators carrying its parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_gets_the_variant_its_parameters_match() {
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta, UpstreamMode::Fetch] {
        let upstream = fake_ads::FakeAds::start_delta().await;
        upstream.set(CDS, "v1", clusters());
        let gw = InProcess::start(Config {
            upstream: Some(upstream.url()),
            upstream_mode: mode,
            ..Config::default()
        })
        .await;
        let port = gw.rest_port;
        let (s1, prod) = post(port, asking(Some("prod"))).await;
        let (s2, test) = post(port, asking(Some("test"))).await;
        let (s3, plain) = post(port, asking(None)).await;
        assert_eq!(
            (s1, s2, s3),
            (200, 200, 200),
            "{mode:?}: {prod} {test} {plain}"
        );
        check_answers(&prod, &test, &plain);
        // The same locators in proto3 JSON's other spelling: the same
        // client, served from the same session.
        let camel = asking(Some("prod")).to_string();
        let camel = camel
            .replace("resource_locators", "resourceLocators")
            .replace("dynamic_parameters", "dynamicParameters");
        let (status, again) = post(port, serde_json::from_str(&camel).expect("JSON")).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(served(&again), served(&prod));

        if mode != UpstreamMode::Fetch {
            let with_locators: Vec<_> = upstream
                .requests()
                .into_iter()
                .filter(|r| r.type_url == CDS && !r.locators.is_empty())
                .collect();
            let mut envs: Vec<String> = with_locators
                .iter()
                .flat_map(|r| r.locators.iter().map(|(_, p)| p["env"].clone()))
                .collect();
            envs.sort();
            envs.dedup();
            assert_eq!(envs, ["prod", "test"], "{mode:?}");
            for request in &with_locators {
                let names: Vec<&str> = request.locators.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(names, ["a", "b", "c"], "{mode:?}: {request:?}");
            }
            assert_eq!(upstream.streams_opened(), 3, "{mode:?}: a session per set");
        }
        gw.stop().await;
    }
}

/// A variant removed upstream stops being served to the clients it
/// matched, and only to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variant_removed_upstream_is_no_longer_served() {
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta] {
        let upstream = fake_ads::FakeAds::start_delta().await;
        upstream.set(CDS, "v1", clusters());
        let gw = InProcess::start(Config {
            upstream: Some(upstream.url()),
            upstream_mode: mode,
            ..Config::default()
        })
        .await;
        let port = gw.rest_port;
        assert_eq!(post(port, asking(Some("prod"))).await.0, 200);
        assert_eq!(post(port, asking(Some("test"))).await.0, 200);
        let mut without_prod = clusters();
        without_prod.remove(1);
        upstream.set(CDS, "v2", without_prod);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, prod) = post(port, asking(Some("prod"))).await;
            if served(&prod).len() == 1 {
                assert_eq!(served(&prod), [entry("a", "5s", None)], "{mode:?}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{mode:?}: still {prod}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (_, test) = post(port, asking(Some("test"))).await;
        assert_eq!(served(&test).len(), 2, "{mode:?}: {test}");
        gw.stop().await;
    }
}

/// The same variant twice in one response is a duplicate, which a client
/// would refuse: the response is NACKed. A constraint saying neither a
/// value nor `exists` breaks Envoy's rule (`validate.required`): NACKed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variant_twice_or_a_constraint_without_a_type_is_nacked() {
    let bare = DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: None,
        })),
    };
    let cases = [
        (
            vec![
                variant("b", cluster("b", 1), env_is("prod")),
                variant("b", cluster("b", 1), env_is("prod")),
            ],
            "twice",
        ),
        (
            vec![variant("b", cluster("b", 1), bare)],
            "neither a value nor exists",
        ),
    ];
    for (resources, says) in cases {
        let upstream = fake_ads::FakeAds::start().await;
        upstream.set(CDS, "v1", resources);
        let gw = InProcess::start(Config {
            upstream: Some(upstream.url()),
            first_response_timeout: std::time::Duration::from_secs(2),
            ..Config::default()
        })
        .await;
        let (status, body) = post(gw.rest_port, asking(Some("prod"))).await;
        assert!(status >= 500, "{status} {body}");
        let nack = upstream
            .requests()
            .into_iter()
            .find_map(|r| r.error_detail)
            .expect("a NACK");
        assert!(nack.contains(says), "{nack}");
        gw.stop().await;
    }
}

/// A request whose names go with more than one set of parameters is the
/// gateway's limit (one set per session): 501 in `google.rpc.Status` shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_two_parameter_sets_are_not_served() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "v1", clusters());
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    for body in [
        json!({"node": {"id": "n"}, "resource_locators": [
            {"name": "a", "dynamic_parameters": {"env": "prod"}},
            {"name": "b", "dynamic_parameters": {"env": "test"}},
        ]}),
        json!({"node": {"id": "n"}, "resource_names": ["a"], "resource_locators": [
            {"name": "b", "dynamic_parameters": {"env": "prod"}},
        ]}),
    ] {
        let (status, answer) = post(gw.rest_port, body).await;
        assert_eq!(status, 501, "{answer}");
        assert_eq!(answer["code"], 12, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("dynamic_parameters")),
            "{answer}"
        );
    }
    assert_eq!(upstream.streams_opened(), 0, "nothing asked upstream");
    gw.stop().await;
}

/// The wrapper a variant is served in reads, in protobuf's reference JSON
/// mapping, as the `Resource` the control plane sent: its name, its
/// constraints and its resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_variant_is_what_the_reference_mapping_reads() {
    let python = process::require_python("dynamic_parameters");
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "v1", clusters());
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let (status, body) = post(gw.rest_port, asking(Some("prod"))).await;
    assert_eq!(status, 200, "{body}");
    let wrapped = body["resources"][1].clone();
    let responses =
        json_reference::reference(&python, &[json!({"op": "parse", "items": [wrapped]})]);
    let parsed = &responses[0]["results"][0];
    assert_eq!(parsed["type_url"], WRAPPER, "{parsed}");
    let bytes = hex::decode(parsed["value_hex"].as_str().unwrap_or_default()).expect("hex");
    let read = Resource::decode(bytes.as_slice()).expect("a Resource");
    let sent = Resource::decode(clusters()[1].value.as_slice()).expect("a Resource");
    assert_eq!(read.resource_name, sent.resource_name);
    let inner = |r: &Resource| {
        let any = r.resource.clone().expect("a resource");
        envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(any.value.as_slice())
            .expect("a Cluster")
    };
    assert_eq!(inner(&read), inner(&sent));
    gw.stop().await;
}
