//! Descriptors learned from the upstream by gRPC server reflection, against
//! the in-process scripted control plane (`support/fake_ads.rs`), whose
//! reflection service answers what each test scripts, a hostile control
//! plane's files included:
//!
//! - a type the gateway lacks is asked of the upstream (`v1`, else
//!   `v1alpha`), once; its files join the pool, and what was served opaque
//!   is served in full at a new version, waking a long poll held on the
//!   opaque one; in SotW and in delta; no NACK ever reaches the upstream;
//! - files that redefine one of Envoy's types, extend one, form a
//!   dependency cycle, are too large or do not decode are refused, and a
//!   symbol the upstream does not know is not asked again before its
//!   backoff: the resource stays opaque, `/readyz` says why, and the
//!   upstream gets no NACK;
//! - `--upstream-reflection off` asks nothing;
//! - a client whose node says it is an Envoy (whose config sources are
//!   rewritten) is served the opaque form too, not a 500.
//!
//! What it leaves out: a real control plane's reflection (`tests/istio.rs`
//! runs Istio's own), TLS toward the reflection service (the same channel
//! as the streams, which `tests/upstream_tls.rs` covers).

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use fake_ads::FakeAds;
use inproc::InProcess;
use prost::Message;
use prost_types::{
    field_descriptor_proto, DescriptorProto, FieldDescriptorProto, FileDescriptorProto,
};
use serde_json::Value;
use xds_gateway::config::{Config, UpstreamMode};
use xds_gateway::xds::{ResourceType, OPAQUE_TYPE_URL};

const LDS: &str = ResourceType::Listeners.type_url();
/// An in-house HTTP filter's config, which Envoy's API does not have.
const ALPN: &str = "type.googleapis.com/acme.filters.v1.AlpnConfig";
const ALPN_SYMBOL: &str = "acme.filters.v1.AlpnConfig";
/// `alpn_override: ["h2"]`.
const ALPN_PAYLOAD: [u8; 4] = [0x0a, 0x02, b'h', b'2'];
const OPAQUE_HEADER: &str = "x-xds-gateway-opaque-types";

/// The file defining `AlpnConfig { repeated string alpn_override = 1; }`
/// in `package`, depending on `deps`.
fn alpn_file(name: &str, package: &str, message: &str, deps: &[&str]) -> Vec<u8> {
    FileDescriptorProto {
        name: Some(name.into()),
        package: Some(package.into()),
        dependency: deps.iter().map(|d| (*d).to_owned()).collect(),
        message_type: vec![DescriptorProto {
            name: Some(message.into()),
            field: vec![FieldDescriptorProto {
                name: Some("alpn_override".into()),
                number: Some(1),
                label: Some(field_descriptor_proto::Label::Repeated as i32),
                r#type: Some(field_descriptor_proto::Type::String as i32),
                json_name: Some("alpnOverride".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        syntax: Some("proto3".into()),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The in-house filter's file, which also extends Envoy's `Cluster` with
/// a field of its own (it would render as a new field of every cluster).
fn extending_cluster() -> Vec<u8> {
    let mut file = FileDescriptorProto::decode(good_file().as_slice()).expect("the good file");
    file.dependency
        .push("envoy/config/cluster/v3/cluster.proto".into());
    file.extension.push(FieldDescriptorProto {
        name: Some("shadow".into()),
        number: Some(99_999),
        label: Some(field_descriptor_proto::Label::Optional as i32),
        r#type: Some(field_descriptor_proto::Type::String as i32),
        extendee: Some(".envoy.config.cluster.v3.Cluster".into()),
        json_name: Some("shadow".into()),
        ..Default::default()
    });
    file.syntax = Some("proto2".into());
    file.encode_to_vec()
}

fn good_file() -> Vec<u8> {
    alpn_file(
        "acme/filters/v1/alpn.proto",
        "acme.filters.v1",
        "AlpnConfig",
        &[],
    )
}

/// A listener whose HTTP connection manager's one HTTP filter is the
/// in-house one, with `stat_prefix` (to make new contents).
fn listener(stat_prefix: &str) -> Any {
    use envoy_types::pb::envoy::config::core::v3::{
        config_source, AggregatedConfigSource, ConfigSource,
    };
    use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::RouteSpecifier, http_filter, HttpConnectionManager, HttpFilter,
        Rds,
    };
    use prost::Name;
    let hcm = HttpConnectionManager {
        stat_prefix: stat_prefix.into(),
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            route_config_name: "r".into(),
            config_source: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                ..Default::default()
            }),
        })),
        http_filters: vec![HttpFilter {
            name: "acme.alpn".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(Any {
                type_url: ALPN.into(),
                value: ALPN_PAYLOAD.to_vec(),
            })),
            ..Default::default()
        }],
        ..Default::default()
    };
    let listener = Listener {
        name: "l1".into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(Any {
                    type_url: HttpConnectionManager::type_url(),
                    value: hcm.encode_to_vec(),
                })),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    Any {
        type_url: Listener::type_url(),
        value: listener.encode_to_vec(),
    }
}

async fn gateway(upstream: &FakeAds, mode: UpstreamMode, reflection: bool) -> InProcess {
    InProcess::start(Config {
        upstream: Some(upstream.url()),
        upstream_mode: mode,
        upstream_reflection: reflection,
        ..Config::default()
    })
    .await
}

/// A listeners answer: (status, opaque-types header, body, ETag version).
struct Answer {
    status: u16,
    opaque: Option<String>,
    body: Value,
    version: String,
}

impl Answer {
    /// The in-house filter's config as served.
    fn filter_config(&self) -> &Value {
        let hcm = &self.body["resources"][0]["filterChains"][0]["filters"][0]["typedConfig"];
        &hcm["httpFilters"][0]["typedConfig"]
    }

    fn assert_opaque(&self) {
        assert_eq!(self.status, 200, "{}", self.body);
        assert_eq!(self.opaque.as_deref(), Some(ALPN), "{}", self.body);
        let config = self.filter_config();
        assert_eq!(config["@type"], OPAQUE_TYPE_URL, "{}", self.body);
        assert_eq!(config["typeUrl"], ALPN, "{}", self.body);
    }

    fn assert_full(&self) {
        assert_eq!(self.status, 200, "{}", self.body);
        assert_eq!(self.opaque, None, "{}", self.body);
        let config = self.filter_config();
        assert_eq!(config["@type"], ALPN, "{}", self.body);
        assert_eq!(
            config["alpnOverride"],
            serde_json::json!(["h2"]),
            "{}",
            self.body
        );
    }
}

/// POSTs a listeners poll for node `sidecar`, presenting `version`, from
/// an Envoy (`user_agent_name`), so its config sources are rewritten.
async fn poll(port: u16, version: &str, wait: Option<&str>) -> Answer {
    let path = match wait {
        Some(wait) => format!("/v3/discovery:listeners?wait={wait}"),
        None => "/v3/discovery:listeners".to_owned(),
    };
    let body = serde_json::json!({
        "node": {"id": "sidecar", "user_agent_name": "envoy"},
        "version_info": version,
        "type_url": LDS,
    });
    let (status, headers, body) = tokio::time::timeout(
        Duration::from_secs(30),
        process::http_exchange(
            port,
            http::Method::POST,
            &path,
            &[
                ("content-type", "application/json"),
                ("host", "xds_cluster"),
            ],
            bytes::Bytes::from(body.to_string()),
        ),
    )
    .await
    .expect("an answer within 30 s")
    .expect("an HTTP exchange");
    let body: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
    Answer {
        status,
        opaque: headers
            .get(OPAQUE_HEADER)
            .map(|v| v.to_str().unwrap_or_default().to_owned()),
        version: body["versionInfo"].as_str().unwrap_or_default().to_owned(),
        body,
    }
}

async fn readyz_problems(admin_port: u16) -> String {
    let (_, body) = process::http_get(admin_port, "/readyz")
        .await
        .expect("/readyz answers");
    let ready: Value = serde_json::from_str(&body).expect("/readyz JSON");
    ready["problems"].to_string()
}

fn nacks(upstream: &FakeAds) -> Vec<String> {
    upstream
        .requests()
        .into_iter()
        .filter_map(|r| r.error_detail)
        .collect()
}

/// The whole path, in SotW and in delta: served opaque while reflection
/// is held, then in full at a new version once it answers, the long poll
/// held on the opaque version woken by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_learned_by_reflection_is_served_in_full_at_a_new_version() {
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta] {
        let upstream = FakeAds::start_delta().await;
        upstream.serve_reflection(vec![good_file()], false);
        upstream.hold_reflection(true);
        upstream.set(LDS, "v1", vec![listener("p1")]);
        let gw = gateway(&upstream, mode, true).await;

        let first = poll(gw.rest_port, "", None).await;
        first.assert_opaque();
        assert!(
            first
                .body
                .to_string()
                .contains(r#""clusterNames":["xds_cluster"]"#),
            "{mode:?}: the rest of the listener is rewritten for the Envoy: {}",
            first.body
        );
        let held = tokio::spawn({
            let (port, version) = (gw.rest_port, first.version.clone());
            async move { poll(port, &version, Some("20s")).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        upstream.hold_reflection(false);
        let woken = held.await.expect("the long poll");
        woken.assert_full();
        assert_ne!(
            woken.version, first.version,
            "{mode:?}: a new answer, a new version"
        );
        assert_eq!(
            upstream.reflection_asks(),
            [ALPN_SYMBOL],
            "{mode:?}: asked once"
        );
        poll(gw.rest_port, "", None).await.assert_full();
        let problems = readyz_problems(gw.admin_port).await;
        assert!(
            !problems.contains(ALPN),
            "{mode:?}: /readyz no longer lists it: {problems}"
        );

        // A new content of the same type renders in full at once.
        upstream.set(LDS, "v2", vec![listener("p2")]);
        let changed = poll(gw.rest_port, &woken.version, Some("20s")).await;
        changed.assert_full();
        assert_eq!(
            upstream.reflection_asks().len(),
            1,
            "{mode:?}: not asked again"
        );
        assert_eq!(nacks(&upstream), Vec::<String>::new(), "{mode:?}: no NACK");
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_only_v1alpha_reflection_is_asked_there() {
    let upstream = FakeAds::start().await;
    upstream.serve_reflection(vec![good_file()], true);
    upstream.set(LDS, "v1", vec![listener("p1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw, true).await;
    let full = process::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let answer = poll(gw.rest_port, "", None).await;
            answer.opaque.is_none().then_some(answer)
        },
    )
    .await;
    let Some(full) = full else {
        panic!(
            "never rendered in full: {}",
            readyz_problems(gw.admin_port).await
        );
    };
    full.assert_full();
    gw.stop().await;
}

/// What a hostile (or broken) control plane's reflection sends, and what
/// `/readyz` then says. Each leaves the type opaque, with no NACK.
fn hostile_cases() -> Vec<(&'static str, Vec<Vec<u8>>, &'static str)> {
    vec![
        (
            "redefines Envoy's Cluster",
            vec![alpn_file(
                "evil.proto",
                "envoy.config.cluster.v3",
                "Cluster",
                &[],
            )],
            "redefines envoy.config.cluster.v3.Cluster",
        ),
        (
            "a dependency cycle",
            vec![
                alpn_file(
                    "acme/filters/v1/alpn.proto",
                    "acme.filters.v1",
                    "AlpnConfig",
                    &["acme/b.proto"],
                ),
                alpn_file(
                    "acme/b.proto",
                    "acme.b",
                    "B",
                    &["acme/filters/v1/alpn.proto"],
                ),
            ],
            "dependency cycle",
        ),
        (
            "oversized",
            (0..6)
                .map(|i| {
                    alpn_file(
                        &format!("f{i}.proto"),
                        &format!("p{i}"),
                        &"M".repeat(1 << 20),
                        &[],
                    )
                })
                .collect(),
            "more than",
        ),
        ("not a descriptor", vec![vec![0xff; 16]], "does not decode"),
        (
            "extends Envoy's Cluster",
            vec![extending_cluster()],
            "extends envoy.config.cluster.v3.Cluster",
        ),
        (
            "files that do not define the type",
            vec![alpn_file("acme/other.proto", "acme.other", "Other", &[])],
            "do not define the type",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_reflection_is_refused_and_the_type_stays_opaque() {
    for (case, files, why) in hostile_cases() {
        let upstream = FakeAds::start().await;
        upstream.serve_reflection(files, false);
        upstream.set(LDS, "v1", vec![listener("p1")]);
        let gw = gateway(&upstream, UpstreamMode::Sotw, true).await;
        poll(gw.rest_port, "", None).await.assert_opaque();
        let problems = process::eventually(
            Duration::from_secs(20),
            Duration::from_millis(100),
            || async {
                let problems = readyz_problems(gw.admin_port).await;
                problems.contains(why).then_some(problems)
            },
        )
        .await
        .unwrap_or_else(|| panic!("{case}: /readyz never said {why:?}"));
        assert!(
            problems.contains(ALPN) && problems.contains("--descriptor-set"),
            "{case}: {problems}"
        );
        poll(gw.rest_port, "", None).await.assert_opaque();
        assert_eq!(nacks(&upstream), Vec::<String>::new(), "{case}: no NACK");
        gw.stop().await;
    }
}

/// A symbol the upstream's reflection does not know is asked once: new
/// contents holding it, within the backoff, ask nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbol_that_never_resolves_is_not_asked_again_before_its_backoff() {
    let upstream = FakeAds::start().await;
    // Files that answer every symbol with something else: never the type.
    upstream.serve_reflection(
        vec![alpn_file("acme/other.proto", "acme.other", "Other", &[])],
        false,
    );
    upstream.set(LDS, "v1", vec![listener("p1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw, true).await;
    let mut version = poll(gw.rest_port, "", None).await.version;
    process::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (!upstream.reflection_asks().is_empty()).then_some(()) },
    )
    .await
    .expect("asked once");
    for round in 2..5 {
        upstream.set(
            LDS,
            &format!("v{round}"),
            vec![listener(&format!("p{round}"))],
        );
        let answer = poll(gw.rest_port, &version, Some("10s")).await;
        answer.assert_opaque();
        version = answer.version;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        upstream.reflection_asks(),
        [ALPN_SYMBOL],
        "one ask within the backoff"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_off_asks_nothing_and_says_so() {
    let upstream = FakeAds::start().await;
    upstream.serve_reflection(vec![good_file()], false);
    upstream.set(LDS, "v1", vec![listener("p1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw, false).await;
    poll(gw.rest_port, "", None).await.assert_opaque();
    let problems = readyz_problems(gw.admin_port).await;
    assert!(problems.contains("reflection is off"), "{problems}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(upstream.reflection_asks().is_empty());
    poll(gw.rest_port, "", None).await.assert_opaque();
    gw.stop().await;
}

/// An upstream without reflection (UNIMPLEMENTED): opaque, served to an
/// Envoy too (its config sources rewritten around the opaque Any).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reflection_an_envoy_is_served_the_opaque_form() {
    let upstream = FakeAds::start().await;
    upstream.set(LDS, "v1", vec![listener("p1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw, true).await;
    let answer = poll(gw.rest_port, "", None).await;
    answer.assert_opaque();
    assert!(
        answer
            .body
            .to_string()
            .contains(r#""clusterNames":["xds_cluster"]"#),
        "{}",
        answer.body
    );
    let problems = process::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let problems = readyz_problems(gw.admin_port).await;
            problems
                .contains("does not serve gRPC server reflection")
                .then_some(problems)
        },
    )
    .await
    .expect("/readyz says the upstream serves no reflection");
    assert!(problems.contains(ALPN), "{problems}");
    gw.stop().await;
}
