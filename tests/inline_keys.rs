//! Private keys outside SDS, against the gateway run in process on the
//! scripted control plane (`support/fake_ads.rs`): a cluster's
//! `UpstreamTlsContext` and a listener's `DownstreamTlsContext` carry
//! inline keys, and a cluster and an added type carry a Secret of a type
//! the gateway has no descriptor for. Without `--allow-secrets` no key
//! reaches a REST answer, `/debug/config`, `/debug/client_status` or
//! `/debug/history` (before or after a rotation), as text or as base64;
//! with it, the keys are served as sent, and a version rotated away is
//! refused by the history as a rotated-away secret is.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use base64::Engine as _;
use envoy_types::pb::google::protobuf::Any;
use fake_ads::FakeAds;
use inproc::InProcess;
use prost::Message as _;
use serde_json::Value;
use xds_gateway::config::{Config, ExtraTypeSpec};
use xds_gateway::xds::ResourceType;

const CDS: &str = ResourceType::Clusters.type_url();
const LDS: &str = ResourceType::Listeners.type_url();
const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DOWNSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
/// A Secret of an API version the gateway has no descriptor for.
const V2_SECRET: &str = "type.googleapis.com/envoy.api.v2.auth.Secret";
const WITHIN: Duration = Duration::from_secs(20);
const CERTIFICATE: &str = "certificate-chain-is-public";

/// The key texts of one version of the config.
struct Keys {
    as_string: String,
    as_bytes: String,
    password: String,
    listener: String,
    ticket: String,
    opaque: String,
}

impl Keys {
    fn of(version: &str) -> Keys {
        let key = |what: &str| format!("{what}-private-key-{version}");
        Keys {
            as_string: key("string"),
            as_bytes: key("bytes"),
            password: key("password"),
            listener: key("listener"),
            ticket: format!("{:-<80}", key("ticket")),
            opaque: key("opaque"),
        }
    }

    fn all(&self) -> [&str; 6] {
        [
            &self.as_string,
            &self.as_bytes,
            &self.password,
            &self.listener,
            &self.ticket,
            &self.opaque,
        ]
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn parse(json: &str) -> Any {
    fake_ads::json_any(json)
}

/// A cluster whose TLS context holds a key inline as a string, another as
/// bytes (with a password), and one on the client's disk (not a secret).
fn cluster(keys: &Keys) -> Any {
    parse(&format!(
        r#"{{"@type": "{CDS}", "name": "tls-upstream", "connect_timeout": "1s",
        "transport_socket": {{"name": "envoy.transport_sockets.tls", "typed_config": {{
          "@type": "{UPSTREAM_TLS}",
          "common_tls_context": {{"tls_certificates": [
            {{"certificate_chain": {{"inline_string": "{CERTIFICATE}"}},
              "private_key": {{"inline_string": "{}"}}}},
            {{"certificate_chain": {{"filename": "/etc/certs/b.pem"}},
              "private_key": {{"inline_bytes": "{}"}}, "password": {{"inline_string": "{}"}}}},
            {{"certificate_chain": {{"filename": "/etc/certs/c.pem"}},
              "private_key": {{"filename": "/etc/certs/c-key.pem"}}}}
          ]}}}}}}}}"#,
        keys.as_string,
        b64(&keys.as_bytes),
        keys.password,
    ))
}

/// A listener whose filter chain's TLS context holds a key and session
/// ticket keys inline.
fn listener(keys: &Keys) -> Any {
    parse(&format!(
        r#"{{"@type": "{LDS}", "name": "tls-in",
        "address": {{"socket_address": {{"address": "0.0.0.0", "port_value": 8443}}}},
        "filter_chains": [{{"transport_socket": {{"name": "envoy.transport_sockets.tls", "typed_config": {{
          "@type": "{DOWNSTREAM_TLS}",
          "common_tls_context": {{"tls_certificates": [
            {{"certificate_chain": {{"inline_string": "{CERTIFICATE}"}},
              "private_key": {{"inline_string": "{}"}}}}]}},
          "session_ticket_keys": {{"keys": [{{"inline_bytes": "{}"}}]}}}}}}}}]}}"#,
        keys.listener,
        b64(&keys.ticket),
    ))
}

/// A v2 `Secret` (`envoy.api.v2.auth.Secret`, which the gateway has no
/// descriptor for) named `name` holding `key`: the v3 message's bytes, the
/// same wire layout.
fn v2_secret(name: &str, key: &str) -> Any {
    let v3 = parse(&format!(
        r#"{{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "name": "{name}", "tls_certificate": {{"private_key": {{"inline_string": "{key}"}}}}}}"#
    ));
    Any {
        type_url: V2_SECRET.into(),
        value: v3.value,
    }
}

/// A cluster carrying that v2 Secret where any `Any` may sit: in its
/// `typed_extension_protocol_options`.
fn cluster_with_opaque_secret(key: &str) -> Any {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    let cluster = Cluster {
        name: "opaque-holder".into(),
        typed_extension_protocol_options: [("acme.tls".to_owned(), v2_secret("inner", key))]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    Any {
        type_url: CDS.into(),
        value: cluster.encode_to_vec(),
    }
}

fn serve(upstream: &FakeAds, version: &str) {
    let keys = Keys::of(version);
    upstream.set(
        CDS,
        version,
        vec![cluster(&keys), cluster_with_opaque_secret(&keys.opaque)],
    );
    upstream.set(LDS, version, vec![listener(&keys)]);
    upstream.set(
        V2_SECRET,
        version,
        vec![v2_secret("whole", &format!("whole-{}", keys.opaque))],
    );
}

async fn gateway(upstream: &FakeAds, allow_secrets: bool) -> InProcess {
    let config = Config {
        upstream: Some(upstream.url()),
        allow_secrets,
        extra_types: vec![
            ExtraTypeSpec::parse_flag(&format!("v2secrets={V2_SECRET}")).expect("a valid flag")
        ],
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

async fn get(port: u16, path: &str) -> (u16, String) {
    process::http_get(port, path)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Where `body` shows `key`: in any JSON string, as text or inside what
/// the string decodes to as base64 (an `inline_bytes`, an opaque `Any`'s
/// bytes, at any offset).
fn leaks(body: &str, key: &str) -> Option<String> {
    fn walk(value: &Value, key: &str) -> Option<String> {
        match value {
            Value::String(s) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .unwrap_or_default();
                let inside = decoded.windows(key.len()).any(|w| w == key.as_bytes());
                (s.contains(key) || inside).then(|| s.clone())
            }
            Value::Array(items) => items.iter().find_map(|v| walk(v, key)),
            Value::Object(map) => map.values().find_map(|v| walk(v, key)),
            _ => None,
        }
    }
    if body.contains(key) || body.contains(&b64(key)) {
        return Some("the body's text".into());
    }
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    walk(&json, key)
}

fn assert_no_key(what: &str, body: &str, keys: &Keys) {
    for key in keys
        .all()
        .into_iter()
        .chain([&*format!("whole-{}", keys.opaque)])
    {
        if let Some(place) = leaks(body, key) {
            panic!("{what} serves {key:?} in {place:?}: {body}");
        }
    }
}

/// `any` is the `OpaqueAny` standing for a v2 Secret whose bytes were
/// taken out.
fn assert_taken_out(any: &Value) {
    assert_eq!(any["@type"], xds_gateway::xds::OPAQUE_TYPE_URL, "{any}");
    assert_eq!(any["typeUrl"], V2_SECRET, "{any}");
    assert_eq!(any["redacted"], xds_gateway::xds::REDACTED, "{any}");
    assert!(any.get("value").is_none(), "{any}");
}

/// Polls `path` until its answer is at the gateway's version of the
/// upstream's `version` (`v1~<digest>`); returns the body and that version.
async fn at_version(port: u16, path: &str, version: &str) -> (String, String) {
    let prefix = format!("\"versionInfo\":\"{version}");
    let body = process::get_until(
        port,
        path,
        WITHIN,
        Duration::from_millis(50),
        || {},
        |b| b.contains(&prefix),
    )
    .await
    .unwrap_or_else(|last| panic!("{path} never reached {version}: {last}"));
    let json: Value = serde_json::from_str(&body).expect("JSON");
    let served = json["versionInfo"].as_str().unwrap_or_default().to_owned();
    (body, served)
}

/// The resource named `name` in the answer `json`.
fn named<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
}

const CLUSTERS: &str = "/v3/discovery:clusters?node=edge-1";
const LISTENERS: &str = "/v3/discovery:listeners?node=edge-1";
const V2_SECRETS: &str = "/v3/discovery:v2secrets?node=edge-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_private_keys_are_not_served_without_allow_secrets() {
    let upstream = FakeAds::start().await;
    serve(&upstream, "v1");
    let gw = gateway(&upstream, false).await;
    let (rest, admin) = (gw.rest_port, gw.admin_port);
    let old = Keys::of("v1");
    let (clusters, v1) = at_version(rest, CLUSTERS, "v1").await;
    assert_no_key("a clusters answer", &clusters, &old);
    let json: Value = serde_json::from_str(&clusters).expect("JSON");
    let tls = &named(&json, "tls-upstream")["transportSocket"]["typedConfig"];
    let certificates = &tls["commonTlsContext"]["tlsCertificates"];
    assert_eq!(
        certificates[0]["certificateChain"]["inlineString"], CERTIFICATE,
        "a certificate is no secret: {clusters}"
    );
    for (i, field) in [(0, "privateKey"), (1, "privateKey"), (1, "password")] {
        let marker = certificates[i][field]["inlineString"]
            .as_str()
            .unwrap_or_default();
        assert!(
            marker.contains("--allow-secrets"),
            "{i} {field}: {clusters}"
        );
    }
    assert_eq!(
        certificates[2]["privateKey"]["filename"], "/etc/certs/c-key.pem",
        "a key on the client's disk is named as sent: {clusters}"
    );
    let opaque = &named(&json, "opaque-holder")["typedExtensionProtocolOptions"]["acme.tls"];
    assert_taken_out(opaque);
    let (listeners, _) = at_version(rest, LISTENERS, "v1").await;
    assert_no_key("a listeners answer", &listeners, &old);
    let (whole, _) = at_version(rest, V2_SECRETS, "v1").await;
    assert_no_key("an added type's answer", &whole, &old);
    let json: Value = serde_json::from_str(&whole).expect("JSON");
    assert_taken_out(&json["resources"][0]);
    for path in [
        "/debug/config?node=edge-1".to_owned(),
        "/debug/client_status?node=edge-1".to_owned(),
        format!("/debug/history?node=edge-1&type=clusters&version={v1}"),
    ] {
        let (status, body) = get(admin, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_no_key(&path, &body, &old);
    }
    // Rotated: the history of the version rotated away shows no key either.
    serve(&upstream, "v2");
    let (clusters, v2) = at_version(rest, CLUSTERS, "v2").await;
    assert_no_key("the rotated clusters answer", &clusters, &Keys::of("v2"));
    let path = format!("/debug/history?node=edge-1&type=clusters&version={v1}");
    let (status, body) = get(admin, &path).await;
    assert_eq!(status, 200, "{path}: {body}");
    assert_no_key(&path, &body, &old);
    let path = format!("/debug/diff?node=edge-1&type=clusters&from={v1}&to={v2}");
    let (status, body) = get(admin, &path).await;
    assert_eq!(status, 200, "{path}: {body}");
    assert_no_key(&path, &body, &old);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_secrets_inline_keys_are_served_and_a_rotated_one_is_not_shown() {
    let upstream = FakeAds::start().await;
    serve(&upstream, "v1");
    let gw = gateway(&upstream, true).await;
    let (rest, admin) = (gw.rest_port, gw.admin_port);
    let old = Keys::of("v1");
    let (clusters, v1) = at_version(rest, CLUSTERS, "v1").await;
    assert!(clusters.contains(&old.as_string), "{clusters}");
    assert!(clusters.contains(&b64(&old.as_bytes)), "{clusters}");
    assert!(leaks(&clusters, &old.opaque).is_some(), "{clusters}");
    let (listeners, _) = at_version(rest, LISTENERS, "v1").await;
    assert!(listeners.contains(&old.listener), "{listeners}");
    let (whole, _) = at_version(rest, V2_SECRETS, "v1").await;
    assert!(
        leaks(&whole, &format!("whole-{}", old.opaque)).is_some(),
        "{whole}"
    );
    let history = format!("/debug/history?node=edge-1&type=clusters&version={v1}");
    let (status, body) = get(admin, &history).await;
    assert_eq!(status, 200, "the version served now is shown: {body}");
    assert!(body.contains(&old.as_string), "{body}");
    serve(&upstream, "v2");
    let (_, v2) = at_version(rest, CLUSTERS, "v2").await;
    let (status, body) = get(admin, &history).await;
    assert_eq!(status, 403, "a version rotated away is not: {body}");
    assert!(leaks(&body, &old.as_string).is_none(), "{body}");
    let diff = format!("/debug/diff?node=edge-1&type=clusters&from={v1}&to={v2}");
    let (status, body) = get(admin, &diff).await;
    assert_eq!(status, 403, "{body}");
    assert!(leaks(&body, &old.as_string).is_none(), "{body}");
    gw.stop().await;
}
