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
use xds_gateway::xds::{Codec, ResourceType};

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();

fn any(json: &str) -> Any {
    let any = Codec::embedded()
        .parse_any(json.as_bytes())
        .expect("fixture");
    Any {
        type_url: any.type_url,
        value: any.value,
    }
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
    let a = format!("/v3/discovery:endpoints?node=n&names=a");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = get_json(port, &a).await;
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
