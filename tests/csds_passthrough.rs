//! CSDS pass-through under an auth policy (issue 38, finding 4), against
//! the gateway run in process in front of a CSDS upstream made here
//! (tonic, on loopback): the upstream is asked by node id, and answers
//! about edge-2 twice, once in cluster `edge` and once in cluster
//! `payments` (with that cluster's secret). A principal allowed edge-2 of
//! cluster `edge` gets only the first entry: an entry is kept only if a
//! rule allows both its node id and its cluster.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
    ClientStatusDiscoveryService, ClientStatusDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse,
};
use inproc::InProcess;
use sha2::{Digest, Sha256};
use xds_gateway::config::Config;

const TOKEN: &str = "ops-token-38f4";

/// Answers every question with edge-2 in two clusters.
struct TwoClusters;

#[tonic::async_trait]
impl ClientStatusDiscoveryService for TwoClusters {
    type StreamClientStatusStream =
        futures::stream::Empty<Result<ClientStatusResponse, tonic::Status>>;

    async fn stream_client_status(
        &self,
        _: tonic::Request<tonic::Streaming<ClientStatusRequest>>,
    ) -> Result<tonic::Response<Self::StreamClientStatusStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("fetch only"))
    }

    async fn fetch_client_status(
        &self,
        _: tonic::Request<ClientStatusRequest>,
    ) -> Result<tonic::Response<ClientStatusResponse>, tonic::Status> {
        let config = |cluster: &str| ClientConfig {
            node: Some(Node {
                id: "edge-2".into(),
                cluster: cluster.into(),
                ..Node::default()
            }),
            ..ClientConfig::default()
        };
        Ok(tonic::Response::new(ClientStatusResponse {
            config: vec![config("edge"), config("payments")],
        }))
    }
}

#[tokio::test]
async fn csds_answers_keep_only_nodes_a_rule_allows_by_id_and_cluster() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ClientStatusDiscoveryServiceServer::new(TwoClusters))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[principal]]\nname = \"ops\"\ntoken-sha256 = [\"{}\"]\ncsds = true\n\
             [[principal.allow]]\nnodes = [\"edge-*\"]\nclusters = [\"edge\"]\ntypes = [\"clusters\"]\n",
            hex::encode(Sha256::digest(TOKEN.as_bytes()))
        ),
    )
    .unwrap();
    let gw = InProcess::start(
        Config {
            upstream: Some(format!("grpc://{upstream}")),
            auth_policy: Some(policy),
            ..Config::default()
        }
        .validate()
        .unwrap(),
    )
    .await;
    let auth = format!("Bearer {TOKEN}");
    let body = serde_json::json!({"node_matchers": [{"node_id": {"exact": "edge-2"}}]});
    let reply = gateway::http_request(
        gw.rest_port,
        http::Method::POST,
        "/v3/discovery:client_status",
        &[
            ("content-type", "application/json"),
            ("authorization", auth.as_str()),
        ],
        body.to_string(),
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    let clusters: Vec<&str> = answer["config"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|c| c["node"]["cluster"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(clusters, ["edge"], "{answer}");
    gw.stop().await;
}
