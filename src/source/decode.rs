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
use crate::cache::{Renderer, Resource, ResourceError};
use crate::xds::raw_node;
use crate::xds::ResourceType;

const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// Why an upstream response was rejected: the message of the NACK's
/// `error_detail` (and of the log line).
#[derive(Debug, thiserror::Error)]
pub(super) enum Rejection {
    #[error("bad Resource wrapper: {0}")]
    BadWrapper(prost::DecodeError),
    #[error("Resource wrapper without a resource")]
    EmptyWrapper,
    #[error("resource of type {found} in a {expected} response")]
    WrongType {
        found: String,
        expected: &'static str,
    },
    #[error(transparent)]
    Undecodable(#[from] ResourceError),
    #[error("resource {0:?} appears twice in one response")]
    Duplicate(String),
    #[error("resource {index} ({name:?}): {reason}")]
    At {
        index: usize,
        name: String,
        reason: Box<Rejection>,
    },
    #[error("resource {index} is named {wrapper:?} but carries {inner:?}")]
    NameMismatch {
        index: usize,
        wrapper: String,
        inner: String,
    },
    #[error("resource {0} has neither a name nor a payload")]
    Nameless(usize),
    #[error("resource {0:?} is both updated and removed in one response")]
    UpdatedAndRemoved(String),
    #[error("decoder task failed: {0}")]
    Task(String),
}

impl Rejection {
    /// Whether a resource decoded but breaks one of Envoy's field rules.
    pub(super) fn breaks_rules(&self) -> bool {
        match self {
            Rejection::Undecodable(ResourceError::Invalid { .. }) => true,
            Rejection::At { reason, .. } => reason.breaks_rules(),
            _ => false,
        }
    }
}

/// Decodes one resource of `kind`; the error says why not.
pub(super) fn decode_one(
    renderer: &Renderer,
    kind: ResourceType,
    any: Any,
) -> Result<Arc<Resource>, Rejection> {
    let any = if any.type_url == RESOURCE_WRAPPER {
        let wrapper =
            envoy_types::pb::envoy::service::discovery::v3::Resource::decode(any.value.as_slice())
                .map_err(Rejection::BadWrapper)?;
        wrapper.resource.ok_or(Rejection::EmptyWrapper)?
    } else {
        any
    };
    if any.type_url != kind.type_url() {
        return Err(Rejection::WrongType {
            found: any.type_url,
            expected: kind.type_url(),
        });
    }
    Ok(renderer.resource(kind, any.value.into())?)
}

/// Decodes every resource; the first failure fails them all.
pub(super) fn decode_all(
    renderer: &Renderer,
    kind: ResourceType,
    anys: Vec<Any>,
) -> Result<BTreeMap<String, Arc<Resource>>, Rejection> {
    let mut out = BTreeMap::new();
    for any in anys {
        let resource = decode_one(renderer, kind, any)?;
        let name = resource.name.clone();
        if out.insert(name.clone(), resource).is_some() {
            return Err(Rejection::Duplicate(name));
        }
    }
    Ok(out)
}

/// [`decode_all`] on a blocking thread (big responses take a while to render).
pub(super) async fn decode_all_off_thread(
    renderer: &Renderer,
    kind: ResourceType,
    anys: Vec<Any>,
) -> Result<BTreeMap<String, Arc<Resource>>, Rejection> {
    let renderer = renderer.clone();
    tokio::task::spawn_blocking(move || decode_all(&renderer, kind, anys))
        .await
        .unwrap_or_else(|e| Err(Rejection::Task(e.to_string())))
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
