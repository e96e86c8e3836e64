//! What the gateway says when it has an answer from the upstream but cannot
//! serve it, and what a partial SotW answer leaves, against the in-process
//! scripted control plane (`support/fake_ads.rs`):
//!
//! - an answer the gateway refused (NACKed) is never reported as an upstream
//!   that did not answer: the 503 names the refusal and its reason, and
//!   `/readyz` lists the session among its problems (without making the
//!   replica unready: other nodes are served);
//! - a SotW EDS push naming one assignment leaves the others served (the
//!   xDS grouping rule for every type but Listener and Cluster).

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use inproc::InProcess;
use process::http_get;
use serde_json::Value;
use xds_gateway::config::Config;
use xds_gateway::xds::ResourceType;

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();

fn any(json: &str) -> Any {
    fake_ads::json_any(json)
}

fn assignment(name: &str, port: u32) -> Any {
    any(&format!(
        r#"{{"@type":"{EDS}","cluster_name":"{name}","endpoints":[{{"lb_endpoints":[
        {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{port}}}}}}}}}]}}]}}"#
    ))
}

async fn get_json(port: u16, path: &str) -> (u16, Value) {
    let (status, body) = http_get(port, path).await.expect("an HTTP answer");
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_answer_is_named_in_the_503_and_in_readyz() {
    let upstream = fake_ads::FakeAds::start().await;
    // Envoy refuses a cluster whose connect_timeout is not positive.
    let bad = any(&format!(
        r#"{{"@type":"{CDS}","name":"bad","connect_timeout":"-1s"}}"#
    ));
    upstream.set(CDS, "v1", vec![bad]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        first_response_timeout: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    let (status, body) = get_json(gw.rest_port, "/v3/discovery:clusters?node=n1").await;
    assert_eq!(status, 503, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refused the answer") && message.contains("connect_timeout"),
        "the 503 names the refusal and its reason: {message}"
    );
    assert!(!message.contains("has not answered"), "{message}");
    let (status, ready) = get_json(gw.admin_port, "/readyz").await;
    assert_eq!(status, 200, "other nodes are served: {ready}");
    assert_eq!(ready["refusing_sessions"], 1, "{ready}");
    let problems = ready["problems"].to_string();
    assert!(
        problems.contains("n1") && problems.contains("refuses the upstream's answers"),
        "{ready}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_sotw_endpoints_push_leaves_the_other_assignments_served() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(
        EDS,
        "e1",
        vec![assignment("a", 1001), assignment("b", 1002)],
    );
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    for name in ["a", "b"] {
        let (status, body) = get_json(
            port,
            &format!("/v3/discovery:endpoints?node=n&names={name}"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // An incremental push, as Istio sends one: only the changed assignment.
    upstream.set(EDS, "e2", vec![assignment("a", 2001)]);
    let a = "/v3/discovery:endpoints?node=n&names=a";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = get_json(port, a).await;
        if body.to_string().contains("2001") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "e2 never arrived: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = get_json(port, "/v3/discovery:endpoints?node=n&names=b").await;
    assert_eq!(status, 200, "{body}");
    let resources = body["resources"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        resources.len(),
        1,
        "b is still served after a push naming only a: {body}"
    );
    assert_eq!(resources[0]["clusterName"], "b");
    gw.stop().await;
}

/// An Istio-like listener: an HTTP connection manager whose one HTTP filter
/// is Istio's ALPN filter, a type Envoy's API does not have.
fn istio_listener(alpn: &[u8]) -> Any {
    use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::RouteSpecifier, http_filter, HttpConnectionManager, HttpFilter,
    };
    use prost::{Message, Name};
    let hcm = HttpConnectionManager {
        stat_prefix: "inbound_0.0.0.0_9080".into(),
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: "inbound|9080||".into(),
            ..Default::default()
        })),
        http_filters: vec![HttpFilter {
            name: "istio.alpn".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(Any {
                type_url: ALPN.into(),
                value: alpn.to_vec(),
            })),
            ..Default::default()
        }],
        ..Default::default()
    };
    let listener = Listener {
        name: "virtualInbound".into(),
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

const ALPN: &str = "type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig";

/// A type the gateway has no descriptor for is its own limit, not the
/// upstream's fault: never NACKed; the resource is served with that Any as
/// an `xds_gateway.v1.OpaqueAny` (type URL and bytes kept), the answer says
/// so in a header, `/metrics` counts it, and `/readyz` names the type and
/// the remedy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_without_a_descriptor_is_served_opaque_and_never_nacked() {
    let upstream = fake_ads::FakeAds::start().await;
    let alpn = [0x0a, 0x04, 0x0a, 0x02, 0x68, 0x32];
    upstream.set(
        ResourceType::Listeners.type_url(),
        "l1",
        vec![istio_listener(&alpn)],
    );
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let (status, headers, body) = process::http_exchange(
        gw.rest_port,
        http::Method::GET,
        "/v3/discovery:listeners?node=sidecar",
        &[],
        bytes::Bytes::new(),
    )
    .await
    .expect("an answer");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["x-xds-gateway-opaque-types"], ALPN);
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    let filter = &body["resources"][0]["filterChains"][0]["filters"][0]["typedConfig"];
    let opaque = &filter["httpFilters"][0]["typedConfig"];
    assert_eq!(opaque["@type"], xds_gateway::xds::OPAQUE_TYPE_URL, "{body}");
    assert_eq!(opaque["typeUrl"], ALPN);
    use base64::Engine as _;
    let value = base64::engine::general_purpose::STANDARD
        .decode(opaque["value"].as_str().expect("base64 bytes"))
        .expect("base64");
    assert_eq!(value, alpn, "the bytes as the upstream sent them");
    let nacks: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.error_detail.is_some())
        .collect();
    assert!(nacks.is_empty(), "no NACK reaches the upstream: {nacks:?}");
    let (_, ready) = get_json(gw.admin_port, "/readyz").await;
    let problems = ready["problems"].to_string();
    assert!(
        problems.contains(ALPN) && problems.contains("--descriptor-set"),
        "/readyz names the type and the remedy: {ready}"
    );
    let (_, metrics) = http_get(gw.admin_port, "/metrics").await.expect("metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "xds_gateway_opaque_resources_total 1"),
        "{metrics}"
    );
    gw.stop().await;
}

/// "The xDS client should ACK or NACK every DiscoveryResponse": a response
/// of a type the gateway does not serve, which no request asked for, is
/// NACKed with a reason, and the session's other types are served on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_of_a_type_never_asked_for_is_nacked() {
    const STRANGE: &str = "type.googleapis.com/acme.Unasked";
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(
        CDS,
        "v1",
        vec![any(&format!(
            r#"{{"@type":"{CDS}","name":"a","connect_timeout":"1s"}}"#
        ))],
    );
    upstream.set(
        STRANGE,
        "s1",
        vec![Any {
            type_url: STRANGE.into(),
            value: vec![0x0a, 0x01, b'x'],
        }],
    );
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let (status, _) = get_json(gw.rest_port, "/v3/discovery:clusters?node=n").await;
    assert_eq!(status, 200);
    upstream.push_unasked(STRANGE);
    let nack = process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            upstream
                .requests()
                .into_iter()
                .find(|r| r.type_url == STRANGE && r.error_detail.is_some())
        },
    )
    .await
    .expect("the unasked response NACKed");
    assert!(!nack.nonce.is_empty(), "it names the response: {nack:?}");
    assert!(
        nack.error_detail
            .as_deref()
            .is_some_and(|d| d.contains("did not ask")),
        "{nack:?}"
    );
    let (status, _) = get_json(gw.rest_port, "/v3/discovery:clusters?node=n").await;
    assert_eq!(status, 200, "the session's other types are served on");
    gw.stop().await;
}

/// A request the server fails on, after the type was served (it ends the
/// stream with an error status): the gateway reconnects with backoff and
/// sends the same request again, while its clients keep the last good
/// state, marked stale; and it takes the type up again once the server
/// serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_server_fails_on_after_serving_keeps_the_last_state_stale() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(EDS, "v1", vec![assignment("a", 1), assignment("b", 2)]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let (status, body) = get_json(gw.rest_port, "/v3/discovery:endpoints?node=n&names=a").await;
    assert_eq!(status, 200, "{body}");
    // From now on every EDS request ends the stream; a new name asks again.
    upstream.end_streams_asked_for(EDS);
    let opened = upstream.streams_opened();
    // (It waits for b, which never comes; its answer does not matter.)
    let port = gw.rest_port;
    let asking = tokio::spawn(async move {
        let _ = process::http_get(port, "/v3/discovery:endpoints?node=n&names=a,b").await;
    });
    let stale = process::eventually(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async {
            let (status, headers, body) = process::http_exchange(
                gw.rest_port,
                http::Method::GET,
                "/v3/discovery:endpoints?node=n&names=a",
                &[],
                bytes::Bytes::new(),
            )
            .await
            .ok()?;
            (status == 200 && headers.contains_key("x-xds-gateway-stale-since"))
                .then(|| String::from_utf8_lossy(&body).into_owned())
        },
    )
    .await
    .expect("the last good state, marked stale");
    assert!(stale.contains("\"a\""), "{stale}");
    // It keeps trying, with backoff: a few streams, not a storm.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let retries = upstream.streams_opened() - opened;
    assert!((1..=6).contains(&retries), "{retries} streams in about 2 s");
    // The server serves the type again: fresh, with the name asked.
    upstream.serve_again(EDS);
    let fresh = process::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let (status, headers, body) = process::http_exchange(
                gw.rest_port,
                http::Method::GET,
                "/v3/discovery:endpoints?node=n&names=a,b",
                &[],
                bytes::Bytes::new(),
            )
            .await
            .ok()?;
            let body = String::from_utf8_lossy(&body).into_owned();
            // Fresh, with the name asked (a name the failed stream waited on
            // may be checked apart first: the answer has it once cleared).
            (status == 200
                && !headers.contains_key("x-xds-gateway-stale-since")
                && body.contains("\"b\""))
            .then_some(body)
        },
    )
    .await
    .expect("fresh again, with b, once the server serves the type");
    assert!(fresh.contains("\"a\""), "{fresh}");
    asking.abort();
    gw.stop().await;
}
