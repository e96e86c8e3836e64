//! A resource type beyond Envoy's (`--extra-type`), end to end against the
//! in-process scripted control plane (`support/fake_ads.rs`), in SotW and in
//! delta: its resources are served on `/v3/discovery:NAME` with what the
//! built-in types have: a body, 304 at the version served, a long poll
//! (`wait`, and Kuma's `fetch-timeout`), a `?watch` stream, the config
//! history, a metric series of its own and the authorization policy; its
//! descriptors come from the upstream's reflection, and until they do it is
//! served opaque, never NACKed.
//!
//! What it leaves out: the per-type transport (the scripted control plane
//! serves ADS only; `tests/kuma_sd.rs` runs a type's own service against a
//! go-control-plane server), and real clients (`tests/kuma_sd.rs` runs
//! Prometheus's own Kuma service discovery).

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
use serde_json::{json, Value};
use xds_gateway::config::ExtraTypeSpec;
use xds_gateway::config::{Config, UpstreamMode};

const THING: &str = "type.googleapis.com/acme.inventory.v1.Thing";

/// A type like `Thing` whose SotW responses update only what they carry.
const PIECE: &str = "type.googleapis.com/acme.inventory.v1.Piece";

/// `acme.inventory.v1.Thing { string name = 1; string value = 2; }`.
fn thing_file() -> Vec<u8> {
    pair_file("acme/inventory/v1/thing.proto", "Thing")
}

/// `acme.inventory.v1.<message> { string name = 1; string value = 2; }`,
/// alone in `file`.
fn pair_file(file: &str, message: &str) -> Vec<u8> {
    let field = |name: &str, number: i32, json: &str| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(field_descriptor_proto::Label::Optional as i32),
        r#type: Some(field_descriptor_proto::Type::String as i32),
        json_name: Some(json.into()),
        ..Default::default()
    };
    FileDescriptorProto {
        name: Some(file.into()),
        package: Some("acme.inventory.v1".into()),
        message_type: vec![DescriptorProto {
            name: Some(message.into()),
            field: vec![field("name", 1, "name"), field("value", 2, "value")],
            ..Default::default()
        }],
        syntax: Some("proto3".into()),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A `Thing`'s bytes, by hand: field 1 and field 2, both strings.
fn thing(name: &str, value: &str) -> Any {
    pair(THING, name, value)
}

/// A two-string message of `type_url`, by hand: field 1 and field 2.
fn pair(type_url: &str, name: &str, value: &str) -> Any {
    let mut bytes = Vec::new();
    for (tag, text) in [(0x0a_u8, name), (0x12, value)] {
        bytes.push(tag);
        bytes.push(u8::try_from(text.len()).expect("short"));
        bytes.extend_from_slice(text.as_bytes());
    }
    Any {
        type_url: type_url.into(),
        value: bytes,
    }
}

fn things_type() -> ExtraTypeSpec {
    ExtraTypeSpec::parse_flag(&format!("things={THING}")).expect("a valid flag")
}

/// `pieces`, configured with `complete-state = false`.
fn pieces_type() -> ExtraTypeSpec {
    ExtraTypeSpec {
        complete_state: false,
        ..ExtraTypeSpec::parse_flag(&format!("pieces={PIECE}")).expect("a valid flag")
    }
}

async fn gateway(upstream: &FakeAds, mode: UpstreamMode) -> InProcess {
    let config = Config {
        upstream: Some(upstream.url()),
        upstream_mode: mode,
        extra_types: vec![things_type(), pieces_type()],
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

async fn get(port: u16, path: &str) -> (u16, http::HeaderMap, Value) {
    let (status, headers, body) = tokio::time::timeout(
        Duration::from_secs(30),
        process::http_exchange(port, http::Method::GET, path, &[], bytes::Bytes::new()),
    )
    .await
    .expect("an answer within 30 s")
    .expect("an HTTP exchange");
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, headers, json)
}

/// What a poll of the things gets, by name: `value`, once rendered in full.
fn values(body: &Value) -> Vec<(String, String)> {
    body["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            assert_eq!(r["@type"], THING, "{body}");
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_type_is_served_like_envoys_own() {
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta] {
        let upstream = FakeAds::start_delta().await;
        upstream.serve_reflection(vec![thing_file()], false);
        upstream.set(THING, "v1", vec![thing("a", "1"), thing("b", "2")]);
        let gw = gateway(&upstream, mode).await;
        let path = "/v3/discovery:things?node=tool";

        // Rendered in full once its descriptors came by reflection.
        let full = process::eventually(
            Duration::from_secs(20),
            Duration::from_millis(100),
            || async {
                let (status, headers, body) = get(gw.rest_port, path).await;
                (status == 200 && !headers.contains_key("x-xds-gateway-opaque-types"))
                    .then_some(body)
            },
        )
        .await
        .unwrap_or_else(|| panic!("{mode:?}: never rendered in full"));
        assert_eq!(
            values(&full),
            pairs(&[("a", "1"), ("b", "2")]),
            "{mode:?}: {full}"
        );
        assert_eq!(full["typeUrl"], THING);
        let version = full["versionInfo"].as_str().expect("a version").to_owned();

        // 304 at the version served.
        let (status, _, _) = get(gw.rest_port, &format!("{path}&version={version}")).await;
        assert_eq!(status, 304, "{mode:?}");

        // Its first subscription was probed on a stream of its own; once
        // answered there, the type moves to the node's stream, which the
        // upstream answers again at the same version (ending a long poll
        // held then with a 304). The long poll is held once the gateway
        // ACKed the type on a second stream.
        let moved = process::eventually(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async {
                let requests = upstream.requests();
                let of_thing = requests.iter().filter(|r| r.type_url == THING);
                let asked: std::collections::BTreeSet<usize> = of_thing.map(|r| r.stream).collect();
                let last = *asked.last()?;
                let acked = requests.iter().any(|r| {
                    let ack = r.stream == last && r.type_url == THING && !r.nonce.is_empty();
                    ack && r.error_detail.is_none()
                });
                (asked.len() >= 2 && acked).then_some(())
            },
        )
        .await;
        assert!(
            moved.is_some(),
            "{mode:?}: the type never moved to the node's stream"
        );

        // A long poll in Kuma's spelling, woken by a change.
        let held = tokio::spawn({
            let port = gw.rest_port;
            let body = json!({"node": {"id": "tool"}, "version_info": version, "type_url": THING});
            async move {
                process::http_exchange(
                    port,
                    http::Method::POST,
                    "/v3/discovery:things?fetch-timeout=2m0s",
                    &[("content-type", "application/json")],
                    bytes::Bytes::from(body.to_string()),
                )
                .await
                .expect("an HTTP exchange")
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        upstream.set(THING, "v2", vec![thing("a", "1"), thing("c", "3")]);
        let (status, _, body) = tokio::time::timeout(Duration::from_secs(20), held)
            .await
            .expect("woken within 20 s")
            .expect("the long poll");
        assert_eq!(status, 200, "{mode:?}");
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            values(&body),
            pairs(&[("a", "1"), ("c", "3")]),
            "{mode:?}: {body}"
        );

        // Named, as a client may ask.
        let (_, _, named) = get(gw.rest_port, &format!("{path}&names=c")).await;
        assert_eq!(values(&named), pairs(&[("c", "3")]), "{mode:?}");

        // The config history, and a metric series of its own.
        let (status, _, history) = get(gw.admin_port, "/debug/history?node=tool&type=things").await;
        assert_eq!(status, 200, "{mode:?}: {history}");
        assert!(history.to_string().contains("\"c\""), "{mode:?}: {history}");
        let (_, metrics) = process::http_get(gw.admin_port, "/metrics")
            .await
            .expect("metrics");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("xds_gateway_cache_hits_total{type=\"things\"}")),
            "{mode:?}: no series for the type"
        );
        let nacks: Vec<String> = upstream
            .requests()
            .into_iter()
            .filter_map(|r| r.error_detail)
            .collect();
        assert!(nacks.is_empty(), "{mode:?}: NACKed: {nacks:?}");
        gw.stop().await;
    }
}

/// A2: with `complete-state = false`, a SotW response of the type updates
/// what it carries and keeps the rest, as the text groups every type but
/// Listener and Cluster: a second version without `b` still serves `b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_type_without_complete_state_keeps_what_a_response_leaves_out() {
    let upstream = FakeAds::start().await;
    upstream.serve_reflection(
        vec![pair_file("acme/inventory/v1/piece.proto", "Piece")],
        false,
    );
    upstream.set(
        PIECE,
        "v1",
        vec![pair(PIECE, "a", "1"), pair(PIECE, "b", "2")],
    );
    let gw = gateway(&upstream, UpstreamMode::Sotw).await;
    let path = "/v3/discovery:pieces?node=tool";
    let served = |expected: Vec<(String, String)>| {
        let port = gw.rest_port;
        async move {
            process::eventually(Duration::from_secs(20), Duration::from_millis(100), || {
                let expected = expected.clone();
                async move {
                    let (status, headers, body) = get(port, path).await;
                    let full = status == 200 && !headers.contains_key("x-xds-gateway-opaque-types");
                    let by_name = body["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            (
                                r["name"].as_str().unwrap_or_default().to_owned(),
                                r["value"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect::<Vec<_>>();
                    (full && by_name == expected).then_some(())
                }
            })
            .await
        }
    };
    assert!(
        served(pairs(&[("a", "1"), ("b", "2")])).await.is_some(),
        "v1 never served in full"
    );
    upstream.set(
        PIECE,
        "v2",
        vec![pair(PIECE, "a", "9"), pair(PIECE, "c", "3")],
    );
    assert!(
        served(pairs(&[("a", "9"), ("b", "2"), ("c", "3")]))
            .await
            .is_some(),
        "v2 updates a, adds c and keeps b: {}",
        get(gw.rest_port, path).await.2
    );
    gw.stop().await;
}

/// Without its descriptors the type is served opaque (its bytes whole), and
/// never NACKed: the gateway's limit, not the upstream's fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_type_without_descriptors_is_served_opaque() {
    let upstream = FakeAds::start().await;
    upstream.set(THING, "v1", vec![thing("a", "1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw).await;
    let (status, headers, body) = get(gw.rest_port, "/v3/discovery:things?node=tool").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-xds-gateway-opaque-types"], THING);
    let resource = &body["resources"][0];
    assert_eq!(
        resource["@type"],
        xds_gateway::xds::OPAQUE_TYPE_URL,
        "{body}"
    );
    assert_eq!(resource["typeUrl"], THING, "{body}");
    let nacks: Vec<String> = upstream
        .requests()
        .into_iter()
        .filter_map(|r| r.error_detail)
        .collect();
    assert!(nacks.is_empty(), "NACKed: {nacks:?}");
    gw.stop().await;
}

/// A `?watch` stream of the type sends its current state first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_type_can_be_watched() {
    let upstream = FakeAds::start().await;
    upstream.serve_reflection(vec![thing_file()], false);
    upstream.set(THING, "v1", vec![thing("a", "1")]);
    let gw = gateway(&upstream, UpstreamMode::Sotw).await;
    let mut stream = inproc::connect(gw.rest_port).await;
    inproc::send(
        &mut stream,
        b"GET /v3/discovery:things?node=watcher&watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while !seen.contains(THING) && tokio::time::Instant::now() < deadline {
        use tokio::io::AsyncReadExt as _;
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            _ => {}
        }
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.contains(THING),
        "the first event holds the state: {seen}"
    );
    gw.stop().await;
}
