//! Fetch mode: each REST request proxied to the type's unary `Fetch*` RPC
//! (go-control-plane, rust-control-plane), and the unary pass-through of
//! HDS (`FetchHealthCheck`) and CSDS (`FetchClientStatus`).
//!
//! "Already up to date" answers become [`FetchAnswer::UpToDate`] (a 304):
//! go-control-plane sends gRPC UNKNOWN with a message starting "skip fetch",
//! rust-control-plane ALREADY_EXISTS. Concurrent identical requests share
//! one upstream call, and answers are kept for `--fetch-cache-ttl` so a burst
//! of identical polls costs one call. Errors are never cached.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use http::uri::PathAndQuery;
use moka::future::Cache;
use tonic::Code;

use super::decode::decode_all_off_thread;
use super::{IdentityKey, UpstreamContext};
use crate::cache::{Coverage, Names, TypeState};
use crate::xds::{Endpoint, ResourceType};

/// How many decoded nodes (one per identity) are kept.
const NODE_MEMO_ENTRIES: u64 = 10_000;
/// How many distinct fetch answers are kept (each only for the TTL).
const ANSWER_MEMO_ENTRIES: u64 = 100_000;

/// Why a fetch failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    #[error("upstream {method} failed: {code:?}: {message}")]
    Upstream {
        method: String,
        code: Code,
        message: String,
    },
    #[error("upstream answer rejected: {0}")]
    BadAnswer(String),
}

impl FetchError {
    /// Whether the upstream answered "unimplemented" (for mode probing).
    pub fn is_unimplemented(&self) -> bool {
        matches!(
            self,
            FetchError::Upstream {
                code: Code::Unimplemented,
                ..
            }
        )
    }
}

/// The upstream's answer to one discovery fetch.
#[derive(Debug)]
pub enum FetchAnswer {
    UpToDate,
    State(Arc<TypeState>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FetchKey {
    identity: IdentityKey,
    kind: ResourceType,
    names: Names,
    version: String,
}

/// The fetch proxy.
#[derive(Debug)]
pub struct Fetcher {
    ctx: Arc<UpstreamContext>,
    answers: Cache<FetchKey, Arc<FetchAnswer>>,
    nodes: moka::sync::Cache<IdentityKey, Arc<Node>>,
}

impl Fetcher {
    pub fn new(ctx: Arc<UpstreamContext>, ttl: Duration) -> Fetcher {
        Fetcher {
            ctx,
            answers: Cache::builder()
                .max_capacity(ANSWER_MEMO_ENTRIES)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
            nodes: moka::sync::Cache::new(NODE_MEMO_ENTRIES),
        }
    }

    pub fn context(&self) -> &UpstreamContext {
        &self.ctx
    }

    /// The node of `identity`, decoded from `node()` the first time.
    pub fn node<E>(
        &self,
        identity: &IdentityKey,
        node: impl FnOnce() -> Result<Node, E>,
    ) -> Result<Arc<Node>, E> {
        if let Some(hit) = self.nodes.get(identity) {
            return Ok(hit);
        }
        let node = Arc::new(node()?);
        self.nodes.insert(identity.clone(), node.clone());
        Ok(node)
    }

    /// Fetches `names` of `kind` for `node`, presenting `version`; coalesced
    /// with identical concurrent requests and memoised for the TTL.
    pub async fn fetch(
        &self,
        identity: &IdentityKey,
        node: Arc<Node>,
        kind: ResourceType,
        names: &Names,
        version: &str,
    ) -> Result<Arc<FetchAnswer>, FetchError> {
        let key = FetchKey {
            identity: identity.clone(),
            kind,
            names: names.clone(),
            version: version.to_owned(),
        };
        // Built only on a memo miss: the node (hundreds of extensions) is
        // not copied for the polls a memoised answer serves.
        let call = async {
            let request = DiscoveryRequest {
                version_info: version.to_owned(),
                node: Some((*node).clone()),
                resource_names: match names {
                    Names::Wildcard => Vec::new(),
                    Names::Named(set) => set.iter().cloned().collect(),
                },
                type_url: kind.type_url().to_owned(),
                ..Default::default()
            };
            self.call(kind, request).await
        };
        self.answers
            .try_get_with(key, call)
            .await
            .map_err(|e| (*e).clone())
    }

    async fn call(
        &self,
        kind: ResourceType,
        request: DiscoveryRequest,
    ) -> Result<Arc<FetchAnswer>, FetchError> {
        let response: DiscoveryResponse = match self.unary(Endpoint::Discovery(kind), request).await
        {
            Ok(response) => response,
            Err(FetchError::Upstream { code, message, .. }) if is_up_to_date(code, &message) => {
                return Ok(Arc::new(FetchAnswer::UpToDate));
            }
            Err(err) => return Err(err),
        };
        self.ctx.ready.mark_ready();
        let resources = decode_all_off_thread(&self.ctx.renderer, kind, response.resources)
            .await
            .map_err(FetchError::BadAnswer)?;
        let coverage = Coverage {
            wildcard: true,
            names: Default::default(),
        };
        let state = TypeState::new(
            kind,
            response.version_info,
            response.nonce,
            resources,
            coverage,
        );
        Ok(Arc::new(FetchAnswer::State(Arc::new(state))))
    }

    /// One unary call to `endpoint`'s Fetch method with prost messages.
    pub async fn unary<Req, Resp>(
        &self,
        endpoint: Endpoint,
        request: Req,
    ) -> Result<Resp, FetchError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let method = format!("/{}/{}", endpoint.service(), endpoint.fetch_method());
        let fail = |code: Code, message: String| FetchError::Upstream {
            method: method.clone(),
            code,
            message,
        };
        let path = PathAndQuery::try_from(method.as_str())
            .map_err(|e| fail(Code::Internal, e.to_string()))?;
        let mut grpc = tonic::client::Grpc::new(self.ctx.channel.clone())
            .max_decoding_message_size(self.ctx.max_message_bytes)
            .max_encoding_message_size(self.ctx.max_message_bytes);
        grpc.ready()
            .await
            .map_err(|e| fail(Code::Unavailable, e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(self.ctx.request(request), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| fail(status.code(), status.message().to_owned()))
    }
}

/// go-control-plane: UNKNOWN "skip fetch: version up to date";
/// rust-control-plane: ALREADY_EXISTS.
fn is_up_to_date(code: Code, message: &str) -> bool {
    code == Code::AlreadyExists || (code == Code::Unknown && message.starts_with("skip fetch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_date_in_both_styles() {
        assert!(is_up_to_date(
            Code::Unknown,
            "skip fetch: version up to date"
        ));
        assert!(is_up_to_date(Code::AlreadyExists, "anything"));
        assert!(!is_up_to_date(Code::Unknown, "boom"));
        assert!(!is_up_to_date(Code::Unavailable, "skip fetch"));
    }
}
