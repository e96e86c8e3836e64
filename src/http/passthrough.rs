//! `POST /v3/discovery:health_check` (HDS) and `POST /v3/discovery:client_status`
//! (CSDS): canonical JSON both ways around the upstream's unary
//! `FetchHealthCheck` and `FetchClientStatus`.
//!
//! The request body is parsed into the endpoint's own request message
//! (snake_case or camelCase, unknown fields ignored); the upstream's answer is
//! rendered like every other response (every `Any` with `@type`). There is
//! no caching: these are questions, not config. With a snapshot source there
//! is no upstream to ask, so they answer 501.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use envoy_types::pb::envoy::service::health::v3::{
    HealthCheckRequestOrEndpointHealthResponse, HealthCheckSpecifier,
};
use envoy_types::pb::envoy::service::status::v3::{ClientStatusRequest, ClientStatusResponse};

use super::error::ApiError;
use super::fetched::fetch_error;
use super::Gateway;
use crate::xds::Endpoint;

/// Serves one pass-through request of `endpoint` (HealthCheck or ClientStatus).
pub async fn handle(
    gateway: Arc<Gateway>,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = std::time::Instant::now();
    let response = serve(&gateway, endpoint, body)
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
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Some(fetcher) = &gateway.fetcher else {
        return Err(ApiError::NotImplemented(format!(
            "{} is passed through to a gRPC upstream; this gateway serves a snapshot (start it with --upstream)",
            endpoint.path()
        )));
    };
    let body = body.map_err(|rejection| {
        super::discovery::body_error(rejection, gateway.config.max_body_bytes)
    })?;
    let codec = gateway.registry.renderer().codec();
    let bad_request = |e: crate::xds::JsonError| ApiError::BadRequest(e.to_string());
    let json = match endpoint {
        Endpoint::HealthCheck => {
            let request: HealthCheckRequestOrEndpointHealthResponse = codec
                .parse_prost(endpoint.request_message(), &body, true)
                .map_err(bad_request)?;
            let response: HealthCheckSpecifier = fetcher
                .unary(endpoint, request)
                .await
                .map_err(fetch_error)?;
            codec.render_prost(endpoint.message(), &response)
        }
        Endpoint::ClientStatus => {
            let request: ClientStatusRequest = codec
                .parse_prost(endpoint.request_message(), &body, true)
                .map_err(bad_request)?;
            let response: ClientStatusResponse = fetcher
                .unary(endpoint, request)
                .await
                .map_err(fetch_error)?;
            codec.render_prost(endpoint.message(), &response)
        }
        Endpoint::Discovery(_) => {
            return Err(ApiError::Internal("not a pass-through endpoint".into()))
        }
    }
    .map_err(|e| ApiError::Internal(format!("rendering the upstream's answer failed: {e}")))?;
    let mut response = (StatusCode::OK, json).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
