//! A snapshot bigger than gRPC's 4 MiB default message limit: the gateway
//! accepts it from the upstream (its own limit is --max-upstream-message-bytes,
//! 64 MiB by default) and serves it whole over REST; with the limit set below
//! the message size the stream fails and the client gets a 503, not a
//! truncated answer. The control plane is the in-process scripted fake.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use prost::Message;

use gateway::Gateway;
use process::http_get;

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const CLUSTERS: usize = 6_000;

fn clusters() -> Vec<envoy_types::pb::google::protobuf::Any> {
    let codec = xds_gateway::xds::Codec::embedded();
    let padding = "x".repeat(800);
    (0..CLUSTERS)
        .map(|i| {
            let json = format!(
                r#"{{"@type":"{CDS}","name":"cluster-{i}","connect_timeout":"1s",
                "metadata":{{"filter_metadata":{{"pad":{{"text":"{padding}"}}}}}}}}"#
            );
            let any = codec.parse_any(json.as_bytes()).expect("fixture");
            envoy_types::pb::google::protobuf::Any {
                type_url: any.type_url,
                value: any.value,
            }
        })
        .collect()
}

async fn get_once(gw: &Gateway) -> (u16, String) {
    let path = "/v3/discovery:clusters?node=big";
    http_get(gw.port, path).await.unwrap_or((0, String::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_over_four_mebibytes() {
    let resources = clusters();
    let size: usize = resources.iter().map(|a| a.encoded_len()).sum();
    assert!(size > 4 * 1024 * 1024, "fixture is only {size} bytes");
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "big-1", resources);
    let outcome = tokio::time::timeout(Duration::from_secs(90), async {
        let flags = [
            "--first-response-timeout",
            "20s",
            "--request-timeout",
            "20s",
        ];
        let gw = Gateway::start(&upstream.url(), &flags).await;
        let (status, body) = get_once(&gw).await;
        assert_eq!(status, 200, "{}", gw.log_text());
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["resources"].as_array().map(Vec::len), Some(CLUSTERS));
        let version = v["versionInfo"].as_str().unwrap_or_default();
        assert!(version.starts_with("big-1~"), "{version}");
        drop(gw);

        let gw = Gateway::start(
            &upstream.url(),
            &[
                "--max-upstream-message-bytes",
                "1048576",
                "--first-response-timeout",
                "3s",
            ],
        )
        .await;
        let (status, body) = get_once(&gw).await;
        assert_eq!(status, 503, "{body}\n{}", gw.log_text());
    })
    .await;
    assert!(outcome.is_ok(), "timed out");
}
