//! How subscription changes reach the upstream: REST clients ask for EDS
//! names one poll at a time, and a burst of them (an Envoy starting with
//! many EDS clusters) must reach the control plane as a few requests, not
//! one per name: each request is answered with the whole named set, so one
//! request per name is O(names²) work on both sides. The control plane is
//! the in-process scripted fake, which records every request.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use inproc::InProcess;
use process::http_get;
use xds_gateway::config::Config;
use xds_gateway::xds::{Codec, ResourceType};

const EDS: &str = ResourceType::Endpoints.type_url();
const CLUSTERS: usize = 200;

fn endpoints() -> Vec<envoy_types::pb::google::protobuf::Any> {
    let codec = Codec::embedded();
    (0..CLUSTERS)
        .map(|i| {
            let json = format!(
                r#"{{"@type":"{EDS}","cluster_name":"cluster-{i}","endpoints":[{{"lb_endpoints":[
                {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{}}}}}}}}}]}}]}}"#,
                10_000 + i
            );
            let any = codec.parse_any(json.as_bytes()).expect("fixture");
            envoy_types::pb::google::protobuf::Any {
                type_url: any.type_url,
                value: any.value,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_new_names_reaches_the_upstream_in_a_few_requests() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(EDS, "e1", endpoints());
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    // Every cluster's first poll at once, as a starting Envoy sends them.
    let polls: Vec<_> = (0..CLUSTERS)
        .map(|i| {
            tokio::spawn(async move {
                let path = format!("/v3/discovery:endpoints?node=burst&names=cluster-{i}");
                http_get(port, &path).await
            })
        })
        .collect();
    for (i, poll) in polls.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(Duration::from_secs(30), poll)
            .await
            .expect("every poll is answered")
            .expect("poll task")
            .expect("an HTTP answer");
        assert_eq!(status, 200, "cluster-{i}: {body}");
        assert!(
            body.contains(&format!("\"cluster-{i}\"")),
            "cluster-{i}: {body}"
        );
    }
    let eds_requests: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.type_url == EDS)
        .collect();
    // Without coalescing this was one request per name (about 200).
    assert!(
        eds_requests.len() <= 40,
        "{} EDS requests upstream for {CLUSTERS} names: {:?}",
        eds_requests.len(),
        eds_requests
            .iter()
            .map(|r| r.names.len())
            .collect::<Vec<_>>()
    );
    let last = eds_requests.last().expect("at least one EDS request");
    assert_eq!(
        last.names.len(),
        CLUSTERS,
        "the last request names them all"
    );
    gw.stop().await;
}
