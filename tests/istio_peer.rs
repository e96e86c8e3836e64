//! The Istio test peer itself (`tests/peers/istio/`, `support/istio_peer.rs`):
//! it starts, Istio's own config generator answers its `POST /xds` with the
//! clusters a productpage sidecar gets in its bookinfo mesh, and its
//! `/descriptors` is a FileDescriptorSet with Istio's own filter configs that
//! the gateway's codec accepts (`--descriptor-set`), after which every
//! listener and cluster Istio sends that sidecar reads as JSON.
//!
//! The gateway tests against Istio build on this; this file only checks the
//! peer.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/istio_peer.rs"]
mod istio_peer;
#[path = "support/process.rs"]
mod process;

use prost::Message as _;
use serde_json::Value;

use istio_peer::{IstioPeer, CLUSTER_TYPE, LISTENER_TYPE, PRODUCTPAGE_POD};
use xds_gateway::xds::Codec;

const TEST: &str = "istio_peer";
const ALPN_FILTER_CONFIG: &str = "istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig";

fn names(response: &Value) -> Vec<String> {
    response["names"]
        .as_array()
        .unwrap_or_else(|| panic!("no names in {response}"))
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_serves_the_mesh_and_its_descriptors() {
    let mut peer = IstioPeer::start(TEST);
    let node = peer.node(PRODUCTPAGE_POD).await;
    assert_eq!(
        node["id"],
        "sidecar~10.244.1.10~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local"
    );

    // Istio's clusters for the productpage sidecar, asked for directly.
    let cds = peer.direct_xds(&node, CLUSTER_TYPE, &[], false).await;
    let clusters = names(&cds);
    for want in [
        "outbound|9080||reviews.default.svc.cluster.local",
        "outbound|9080|v1|reviews.default.svc.cluster.local",
        "outbound|9080|v2|reviews.default.svc.cluster.local",
        "outbound|9080||ratings.default.svc.cluster.local",
        "inbound|9080||",
    ] {
        assert!(
            clusters.iter().any(|c| c == want),
            "{want} is not among Istio's clusters for productpage: {clusters:?}"
        );
    }
    assert!(
        !cds["version_info"].as_str().unwrap_or_default().is_empty(),
        "{cds}"
    );
    assert_eq!(
        cds["resources"].as_array().map(Vec::len),
        Some(clusters.len())
    );

    // The descriptor set: a FileDescriptorSet with the ALPN filter's config...
    let bytes = peer.descriptors().await;
    let set = prost_types::FileDescriptorSet::decode(bytes.as_slice())
        .expect("GET /descriptors decodes as a FileDescriptorSet");
    let alpn = set
        .file
        .iter()
        .find(|f| f.package() == "istio.envoy.config.filter.http.alpn.v2alpha1")
        .unwrap_or_else(|| {
            let files: Vec<&str> = set.file.iter().map(|f| f.name()).collect();
            panic!("no ALPN filter config file in the descriptor set: {files:?}")
        });
    assert!(
        alpn.message_type.iter().any(|m| m.name() == "FilterConfig"),
        "{alpn:?}"
    );

    // ...that the gateway's codec takes on top of its embedded Envoy API, as
    // --descriptor-set does, after which every listener and cluster Istio
    // sent (nested Anys included: Istio's ALPN, stats and TypedStruct
    // filter configs) reads as JSON.
    let mut pool = Codec::embedded().pool();
    pool.decode_file_descriptor_set(bytes.as_slice())
        .expect("the gateway's descriptor pool accepts the peer's descriptor set");
    assert!(pool.get_message_by_name(ALPN_FILTER_CONFIG).is_some());
    let any = pool
        .get_message_by_name("google.protobuf.Any")
        .expect("Any in the embedded pool");
    let lds = peer.direct_xds(&node, LISTENER_TYPE, &[], false).await;
    let mut resources: Vec<Value> = lds["resources"].as_array().cloned().unwrap_or_default();
    assert!(!resources.is_empty(), "no listeners: {lds}");
    resources.extend(cds["resources"].as_array().cloned().unwrap_or_default());
    for resource in &resources {
        prost_reflect::DynamicMessage::deserialize(any.clone(), resource).unwrap_or_else(|e| {
            panic!(
                "the gateway's pool plus the peer's descriptors cannot read {}: {e}",
                resource["name"]
            )
        });
    }
    assert!(
        lds.to_string().contains(ALPN_FILTER_CONFIG),
        "Istio's listeners carry no ALPN filter config"
    );

    peer.assert_running();
}
