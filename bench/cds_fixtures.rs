//! The CDS and EDS fixtures the scale and identities benches push: `n` EDS
//! clusters of which one changes per generation, and their endpoints.

use envoy_types::pb::google::protobuf::Any as PbAny;
use xds_gateway::xds::{Codec, ResourceType};

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();

/// The number in environment variable `name`, else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `json` (with its `@type`) as an `Any`.
fn any(codec: &Codec, json: &str) -> PbAny {
    let a = codec.parse_any(json.as_bytes()).expect("fixture parses");
    PbAny {
        type_url: a.type_url,
        value: a.value,
    }
}

/// `n` EDS clusters with `ads: {}` sources; from one generation to the
/// next only cluster-0 changes (its circuit-breaker threshold).
pub fn clusters(codec: &Codec, n: usize, generation: usize) -> Vec<PbAny> {
    (0..n)
        .map(|i| {
            let bump = if i == 0 { generation } else { 0 };
            any(
                codec,
                &format!(
                    r#"{{"@type":"{CDS}","name":"cluster-{i}","type":"EDS","connect_timeout":"1s",
                "eds_cluster_config":{{"eds_config":{{"ads":{{}},"resource_api_version":"V3"}}}},
                "circuit_breakers":{{"thresholds":[{{"max_connections":{}}}]}}}}"#,
                    1000 + i + bump
                ),
            )
        })
        .collect()
}

pub fn endpoints(codec: &Codec, n: usize) -> Vec<PbAny> {
    (0..n)
        .map(|i| {
            any(
                codec,
                &format!(
                    r#"{{"@type":"{EDS}","cluster_name":"cluster-{i}","endpoints":[{{"lb_endpoints":[
            {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{}}}}}}}}}]}}]}}"#,
                    10000 + i % 50000
                ),
            )
        })
        .collect()
}
