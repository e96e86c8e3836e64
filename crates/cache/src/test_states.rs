//! Test-only: states of Clusters built through the intake, as an upstream
//! push builds them, for the cache's unit tests.

use std::collections::BTreeSet;

use bytes::Bytes;
use serde_json::json;

use super::{Coverage, Intake, ResourceMap, TypeState};
use crate::xds::{Codec, ResourceType};

/// The protobuf bytes of a Cluster `name` with `connect_timeout`.
pub fn cluster_payload(codec: &Codec, name: &str, connect_timeout: &str) -> Bytes {
    let kind = ResourceType::Clusters;
    let json = json!({"@type": kind.type_url(), "name": name, "connect_timeout": connect_timeout});
    let any = codec.parse_any(json.to_string().as_bytes()).unwrap();
    Bytes::from(any.value)
}

/// A wildcard-covered state at `version` (with `nonce`) of one Cluster per
/// `(name, connect_timeout)`.
pub fn clusters(
    intake: &Intake,
    version: &str,
    nonce: &str,
    clusters: &[(&str, &str)],
) -> TypeState {
    let kind = ResourceType::Clusters;
    let resources: ResourceMap = clusters
        .iter()
        .map(|(name, timeout)| {
            let payload = cluster_payload(intake.codec(), name, timeout);
            let resource = intake.resource(kind, payload).unwrap();
            (name.to_string(), resource)
        })
        .collect();
    let coverage = Coverage {
        wildcard: true,
        names: BTreeSet::new(),
    };
    TypeState::new(kind, version.into(), nonce.into(), resources, coverage)
}
