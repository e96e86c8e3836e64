//! Turning the resources of an upstream response into rendered
//! [`Resource`]s: unwraps `envoy.service.discovery.v3.Resource` (TTL)
//! wrappers, checks every type URL, and renders (memoised by digest). A
//! response is accepted or rejected as a whole, as Envoy does.

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use crate::cache::{Renderer, Resource};
use crate::xds::ResourceType;

const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// Decodes one resource of `kind`; the error says why not.
pub fn decode_one(
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
pub fn decode_all(
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
pub async fn decode_all_off_thread(
    renderer: &Renderer,
    kind: ResourceType,
    anys: Vec<Any>,
) -> Result<BTreeMap<String, Arc<Resource>>, String> {
    let renderer = renderer.clone();
    tokio::task::spawn_blocking(move || decode_all(&renderer, kind, anys))
        .await
        .unwrap_or_else(|e| Err(format!("decoder task failed: {e}")))
}
