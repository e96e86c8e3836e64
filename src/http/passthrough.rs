//! `POST /v3/discovery:health_check` (HDS) and `POST /v3/discovery:client_status`
//! (CSDS): canonical JSON both ways around the upstream's unary
//! `FetchHealthCheck` and `FetchClientStatus`, asked through the source.
//!
//! The request body is parsed into the endpoint's own request message
//! (snake_case or camelCase, unknown fields ignored); the upstream's answer is
//! rendered like every other response (every `Any` with `@type`).
//!
//! Under an auth policy the upstream is asked with the gateway's own
//! credentials, so the question is authorized here first: HDS only as a
//! node the principal's rules bind (`hds = true`), CSDS only about nodes
//! named by exact id that its rules name (`csds = true`), and CSDS's answer
//! keeps only the nodes a rule allows by id *and* cluster. There is
//! no caching: these are questions, not config. A source without an
//! upstream (a snapshot) answers 501.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::service::health::v3::health_check_request_or_endpoint_health_response::RequestType;
use envoy_types::pb::envoy::service::health::v3::HealthCheckRequestOrEndpointHealthResponse;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;

use super::authorize::{authenticate, Caller};
use super::Gateway;
use crate::face::body::{check_json, read_body, BodyError};
use crate::face::ApiError;
use crate::store::{PassThrough, PassedThrough};
use crate::tls::PeerIdentity;
use crate::xds::Endpoint;

/// Serves one pass-through request of `endpoint` (HealthCheck or ClientStatus).
pub(super) async fn handle(
    gateway: Arc<Gateway>,
    endpoint: Endpoint,
    headers: HeaderMap,
    peer: Option<Arc<PeerIdentity>>,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let served = serve(&gateway, endpoint, &headers, peer.as_ref(), body).await;
    super::discovery::finish(&gateway, None, started, served)
}

async fn serve(
    gateway: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
    peer: Option<&Arc<PeerIdentity>>,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = authenticate(gateway, headers, peer)?;
    check_json(headers)?;
    let body = read_body(
        body,
        gateway.config.max_body_bytes,
        gateway.config.body_read_timeout,
    )
    .await?;
    let call = question(gateway, endpoint, &caller, &body)?;
    let answer = gateway.source.pass_through(call).await?;
    let json = answer_json(gateway, endpoint, &caller, answer)?;
    let content_type = HeaderValue::from_static("application/json");
    Ok(([(header::CONTENT_TYPE, content_type)], json).into_response())
}

/// The question `body` asks of `endpoint`, if `caller` may ask it.
fn question(
    gateway: &Gateway,
    endpoint: Endpoint,
    caller: &Caller,
    body: &[u8],
) -> Result<PassThrough, ApiError> {
    let codec = gateway.assembler.codec();
    let invalid = |e: crate::xds::JsonError| BodyError::Invalid(e.to_string());
    match endpoint {
        Endpoint::HealthCheck => {
            let request: HealthCheckRequestOrEndpointHealthResponse = codec
                .parse_prost(endpoint.request_message(), body, true)
                .map_err(invalid)?;
            caller.may_use_hds(hds_node(&request))?;
            Ok(PassThrough::HealthCheck(request))
        }
        Endpoint::ClientStatus => {
            let request: ClientStatusRequest = codec
                .parse_prost(endpoint.request_message(), body, true)
                .map_err(invalid)?;
            if caller.principal().is_some() {
                caller.may_ask_csds_about(&csds_nodes(&request)?)?;
            }
            Ok(PassThrough::ClientStatus(request))
        }
        Endpoint::Discovery(_) => Err(ApiError::Internal("not a pass-through endpoint".into())),
    }
}

/// The upstream's `answer` as canonical JSON, keeping only what `caller`
/// may see.
fn answer_json(
    gateway: &Gateway,
    endpoint: Endpoint,
    caller: &Caller,
    answer: PassedThrough,
) -> Result<Bytes, ApiError> {
    let codec = gateway.assembler.codec();
    Ok(match answer {
        PassedThrough::HealthCheck(answer) => codec.render_prost(endpoint.message(), &answer)?,
        PassedThrough::ClientStatus(mut answer) => {
            // The upstream is asked with the gateway's credentials: what
            // it says of nodes this caller may not see does not reach it.
            // Both halves of each node: its id and its cluster.
            answer.config.retain(|config| {
                let (id, cluster) = config
                    .node
                    .as_ref()
                    .map_or(("", ""), |n| (n.id.as_str(), n.cluster.as_str()));
                caller.may_see_csds_of(id, cluster)
            });
            codec.render_prost(endpoint.message(), &answer)?
        }
    })
}

/// The node (id, cluster) an HDS request speaks for: its
/// `health_check_request.node`; an endpoint health report names none.
fn hds_node(request: &HealthCheckRequestOrEndpointHealthResponse) -> Option<(&str, &str)> {
    match &request.request_type {
        Some(RequestType::HealthCheckRequest(hc)) => hc
            .node
            .as_ref()
            .map(|n| (n.id.as_str(), n.cluster.as_str())),
        _ => None,
    }
}

/// The node ids a CSDS request asks about, for a caller under a policy:
/// only exact `node_id` matchers can be checked against its rules.
fn csds_nodes(request: &ClientStatusRequest) -> Result<Vec<&str>, ApiError> {
    request
        .node_matchers
        .iter()
        .enumerate()
        .map(|(i, m)| match m.node_id.as_ref().and_then(|s| s.match_pattern.as_ref()) {
            Some(MatchPattern::Exact(id)) if m.node_metadatas.is_empty() => Ok(id.as_str()),
            _ => Err(ApiError::Forbidden(format!(
                "node_matchers[{i}]: under the gateway's auth policy CSDS is asked about nodes by exact \
                 node_id only (no prefix, pattern or metadata matchers), so each can be checked"
            ))),
        })
        .collect()
}
