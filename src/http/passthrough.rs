//! `POST /v3/discovery:health_check` (HDS) and `POST /v3/discovery:client_status`
//! (CSDS): canonical JSON both ways around the upstream's unary
//! `FetchHealthCheck` and `FetchClientStatus`, asked through the source.
//!
//! The request body is parsed into the endpoint's own request message
//! (snake_case or camelCase, unknown fields ignored); the upstream's answer is
//! rendered like every other response (every `Any` with `@type`). There is
//! no caching: these are questions, not config. A source without an
//! upstream (a snapshot) answers 501.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::authorize::authenticate;
use super::body::{check_json, read_body, BodyError};
use super::error::ApiError;
use super::Gateway;
use crate::source::{PassThrough, PassedThrough};
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
    let response = serve(&gateway, endpoint, &headers, peer.as_deref(), body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    gateway.metrics.request(
        None,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

async fn serve(
    gateway: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
    peer: Option<&PeerIdentity>,
    body: Body,
) -> Result<Response, ApiError> {
    authenticate(gateway, headers, peer)?.may_pass_through(&endpoint.path())?;
    check_json(headers)?;
    let body = read_body(
        body,
        gateway.config.max_body_bytes,
        gateway.config.body_read_timeout,
    )
    .await?;
    let codec = gateway.renderer.codec();
    let invalid = |e: crate::xds::JsonError| BodyError::Invalid(e.to_string());
    let call = match endpoint {
        Endpoint::HealthCheck => PassThrough::HealthCheck(
            codec
                .parse_prost(endpoint.request_message(), &body, true)
                .map_err(invalid)?,
        ),
        Endpoint::ClientStatus => PassThrough::ClientStatus(
            codec
                .parse_prost(endpoint.request_message(), &body, true)
                .map_err(invalid)?,
        ),
        Endpoint::Discovery(_) => {
            return Err(ApiError::Internal("not a pass-through endpoint".into()))
        }
    };
    let json = match gateway.source.pass_through(call).await? {
        PassedThrough::HealthCheck(answer) => codec.render_prost(endpoint.message(), &answer)?,
        PassedThrough::ClientStatus(answer) => codec.render_prost(endpoint.message(), &answer)?,
    };
    let mut response = (StatusCode::OK, json).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
