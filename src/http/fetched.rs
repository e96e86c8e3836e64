//! Discovery requests in fetch mode: answered by the upstream's unary
//! `Fetch*` RPC through [`Fetcher`] (coalesced, briefly memoised) instead of
//! a session. Long polls are not held in this mode (there is no stream to
//! wake them); `?wait=` is accepted and ignored.

use axum::response::Response;

use super::discovery::{render_error, respond, source_error, RETRY_AFTER_SECS};
use super::error::ApiError;
use super::parsed::ParsedRequest;
use super::present::Presentation;
use super::Gateway;
use crate::cache::{Coverage, TypeState};
use crate::source::decode_node;
use crate::source::fetch::{FetchAnswer, FetchError, Fetcher};
use crate::xds::rewrite::RestTarget;
use crate::xds::ResourceType;

pub async fn serve(
    gateway: &Gateway,
    fetcher: &Fetcher,
    kind: ResourceType,
    request: &ParsedRequest,
    target: Option<&RestTarget>,
    presentation: Presentation,
) -> Result<Response, ApiError> {
    let renderer = gateway.registry.renderer();
    let node = fetcher
        .node(&request.identity, || decode_node(renderer, request.body()))
        .map_err(source_error)?;
    let presented = request.version_info.as_str();
    let answer = fetcher
        .fetch(&request.identity, node, kind, &request.names, presented)
        .await
        .map_err(fetch_error)?;
    match &*answer {
        FetchAnswer::UpToDate if !presented.is_empty() => {
            gateway.metrics.cache_hit(kind);
            Ok(Presentation::not_modified(presented))
        }
        FetchAnswer::UpToDate => {
            // go-control-plane has version "" for a type missing from its
            // snapshot, so a first poll is "up to date": there is nothing.
            let empty = TypeState::new(
                kind,
                String::new(),
                String::new(),
                Default::default(),
                Coverage::default(),
            );
            let answer = empty
                .answer(renderer, &request.names, presented, target)
                .map_err(render_error)?;
            respond(gateway, kind, &empty, answer, presentation)
        }
        FetchAnswer::State(state) => {
            let answer = state
                .answer(renderer, &request.names, presented, target)
                .map_err(render_error)?;
            respond(gateway, kind, state, answer, presentation)
        }
    }
}

/// Upstream failures are 503 (the client did nothing wrong).
pub fn fetch_error(err: FetchError) -> ApiError {
    ApiError::Unavailable {
        message: err.to_string(),
        retry_after_secs: RETRY_AFTER_SECS,
    }
}
