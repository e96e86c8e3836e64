//! Decoding what arrives: the resources of an upstream response into
//! rendered [`Resource`]s (unwrapping `envoy.service.discovery.v3.Resource`
//! TTL wrappers, checking every type URL, rendering memoised by digest; a
//! response is accepted or rejected as a whole, as Envoy does), and a REST
//! request's `node` into the protobuf `Node` sent upstream.

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::SourceError;
use crate::cache::{Renderer, Resource};
use crate::xds::raw_node;
use crate::xds::ResourceType;

const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// Decodes one resource of `kind`; the error says why not.
pub(super) fn decode_one(
    renderer: &Renderer,
    kind: ResourceType,
    any: Any,
) -> Result<Arc<Resource>, String> {
    let any = if any.type_url == RESOURCE_WRAPPER {
        let wrapper =
            envoy_types::pb::envoy::service::discovery::v3::Resource::decode(any.value.as_slice())
                .map_err(|e| format!("bad Resource wrapper: {e}"))?;
        wrapper
            .resource
            .ok_or("Resource wrapper without a resource")?
    } else {
        any
    };
    if any.type_url != kind.type_url() {
        return Err(format!(
            "resource of type {} in a {} response",
            any.type_url,
            kind.type_url()
        ));
    }
    renderer
        .resource(kind, any.value.into())
        .map_err(|e| e.to_string())
}

/// Decodes every resource; the first failure fails them all.
pub(super) fn decode_all(
    renderer: &Renderer,
    kind: ResourceType,
    anys: Vec<Any>,
) -> Result<BTreeMap<String, Arc<Resource>>, String> {
    let mut out = BTreeMap::new();
    for any in anys {
        let resource = decode_one(renderer, kind, any)?;
        let name = resource.name.clone();
        if out.insert(name.clone(), resource).is_some() {
            return Err(format!("resource {name:?} appears twice in one response"));
        }
    }
    Ok(out)
}

/// [`decode_all`] on a blocking thread (big responses take a while to render).
pub(super) async fn decode_all_off_thread(
    renderer: &Renderer,
    kind: ResourceType,
    anys: Vec<Any>,
) -> Result<BTreeMap<String, Arc<Resource>>, String> {
    let renderer = renderer.clone();
    tokio::task::spawn_blocking(move || decode_all(&renderer, kind, anys))
        .await
        .unwrap_or_else(|e| Err(format!("decoder task failed: {e}")))
}

/// The request body's `node` as a protobuf `Node` (empty if absent).
pub(super) fn decode_node(renderer: &Renderer, body: &[u8]) -> Result<Node, SourceError> {
    let raw = raw_node(body).map_err(|e| SourceError::InvalidNode(e.to_string()))?;
    let Some(raw) = raw else {
        return Ok(Node::default());
    };
    renderer
        .codec()
        .parse_prost("envoy.config.core.v3.Node", raw.get().as_bytes(), true)
        .map_err(|e| SourceError::InvalidNode(e.to_string()))
}
