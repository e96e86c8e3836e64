//! Test-only: states of Clusters built through the renderer, as an upstream
//! push builds them, for the cache's unit tests.

use std::collections::BTreeSet;

use serde_json::json;

use super::{Coverage, Renderer, TypeState};
use crate::xds::ResourceType;

/// A wildcard-covered state at `version` (with `nonce`) of one Cluster per
/// `(name, connect_timeout)`.
pub(crate) fn clusters(
    renderer: &Renderer,
    version: &str,
    nonce: &str,
    clusters: &[(&str, &str)],
) -> TypeState {
    let kind = ResourceType::Clusters;
    let resources = clusters
        .iter()
        .map(|(name, timeout)| {
            let json = json!({"@type": kind.type_url(), "name": name, "connect_timeout": timeout});
            let any = renderer
                .codec()
                .parse_any(json.to_string().as_bytes())
                .unwrap();
            let resource = renderer.resource(kind, any.value.into()).unwrap();
            (name.to_string(), resource)
        })
        .collect();
    let coverage = Coverage {
        wildcard: true,
        names: BTreeSet::new(),
    };
    TypeState::new(kind, version.into(), nonce.into(), resources, coverage)
}
