//! The one error → HTTP status table of both faces: [`ApiError`], and the
//! `From` impls that bring every other error into it (the request body, the
//! policy's refusal, the request's JSON, the source, a render). Nothing
//! else in `http` or `admin` decides a status for an error.
//!
//! Every error body is a `google.rpc.Status`-shaped JSON object,
//! `{"code": <google.rpc.Code number>, "message": "<what was wrong>"}`
//! (written by `crate::error_body`), so a client can always tell what
//! happened. Client mistakes are 4xx; only the
//! gateway's own failures are 5xx.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::AuthError;
use crate::error_body::{self, code, RETRY_AFTER_SECS};
use crate::face::body::BodyError;
use crate::profiles::query::QueryError;
use crate::shares::OverShare;
use crate::store::SourceError;
use crate::xds::{JsonError, RequestError};

/// Everything a REST request can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The body did not arrive in time; the connection is closed after this.
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after_secs: u64,
    },
    #[error("{0}")]
    NotImplemented(String),
    /// The upstream failed on what was asked (502).
    #[error("{0}")]
    BadGateway(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn rpc_code(&self) -> i32 {
        match self {
            ApiError::NotFound(_) => code::NOT_FOUND,
            ApiError::MethodNotAllowed(_) | ApiError::NotImplemented(_) => code::UNIMPLEMENTED,
            ApiError::BadRequest(_) | ApiError::UnsupportedMediaType(_) => code::INVALID_ARGUMENT,
            ApiError::BodyTooLarge { .. } => code::RESOURCE_EXHAUSTED,
            ApiError::Unauthenticated(_) => code::UNAUTHENTICATED,
            ApiError::Forbidden(_) => code::PERMISSION_DENIED,
            ApiError::Unavailable { .. } | ApiError::BadGateway(_) => code::UNAVAILABLE,
            ApiError::RequestTimeout(_) => code::DEADLINE_EXCEEDED,
            ApiError::Internal(_) => code::INTERNAL,
        }
    }

    /// A 503 for a condition expected to pass, with `Retry-After`.
    pub(crate) fn unavailable(message: String) -> ApiError {
        ApiError::Unavailable {
            message,
            retry_after_secs: RETRY_AFTER_SECS,
        }
    }
}

impl From<SourceError> for ApiError {
    fn from(err: SourceError) -> ApiError {
        match err {
            SourceError::InvalidNode(_) | SourceError::NoNodeId => {
                ApiError::BadRequest(err.to_string())
            }
            SourceError::NoUpstream { .. } | SourceError::DeltaOnly { .. } => {
                ApiError::NotImplemented(err.to_string())
            }
            SourceError::Unserved {
                refused: crate::store::Refused::Unimplemented(_),
                ..
            } => ApiError::NotImplemented(err.to_string()),
            SourceError::Unserved { .. } | SourceError::NameUnserved { .. } => {
                ApiError::BadGateway(err.to_string())
            }
            SourceError::TooManySessions { .. }
            | SourceError::OverShare(_)
            | SourceError::SessionBytes { .. }
            | SourceError::AnswerBytes { .. }
            | SourceError::TooManyNames { .. }
            | SourceError::NotLoaded { .. }
            | SourceError::Probing
            | SourceError::NoAnswer { .. }
            | SourceError::Refused { .. }
            | SourceError::Upstream(_) => ApiError::unavailable(err.to_string()),
        }
    }
}

/// One principal over its share of a limit: 503, naming the principal and
/// the limit, with `Retry-After` (its own places free up; others' do not
/// matter to it).
impl From<OverShare> for ApiError {
    fn from(err: OverShare) -> ApiError {
        ApiError::unavailable(err.to_string())
    }
}

impl From<BodyError> for ApiError {
    fn from(err: BodyError) -> ApiError {
        match err {
            BodyError::TooLarge { limit } => ApiError::BodyTooLarge { limit },
            BodyError::Unreadable(_) | BodyError::Invalid(_) => {
                ApiError::BadRequest(err.to_string())
            }
            BodyError::NotJson(_) => ApiError::UnsupportedMediaType(err.to_string()),
            BodyError::TimedOut(_) => ApiError::RequestTimeout(err.to_string()),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> ApiError {
        match err {
            AuthError::Unauthenticated(m) => ApiError::Unauthenticated(m),
            AuthError::Forbidden(m) => ApiError::Forbidden(m),
        }
    }
}

/// A GET's node parameters that say no node (an unknown profile,
/// malformed metadata): a 400 naming the parameter.
impl From<QueryError> for ApiError {
    fn from(err: QueryError) -> ApiError {
        ApiError::BadRequest(format!("query parameter {err}"))
    }
}

/// A discovery request body that is not a `DiscoveryRequest`.
impl From<RequestError> for ApiError {
    fn from(err: RequestError) -> ApiError {
        ApiError::BadRequest(err.to_string())
    }
}

/// A render failure is the gateway's own: states were validated on arrival.
impl From<JsonError> for ApiError {
    fn from(err: JsonError) -> ApiError {
        ApiError::Internal(format!("rendering failed: {err}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = error_body::response(self.status(), self.rpc_code(), &self.to_string());
        let headers = response.headers_mut();
        // An error is one moment's (503) or one caller's (401, 403): never
        // for an HTTP cache to give to anyone else.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match self {
            ApiError::Unavailable {
                retry_after_secs, ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            // The rest of the body is still on the wire: this connection
            // cannot carry another request.
            ApiError::RequestTimeout(_) => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::Unauthenticated(_) => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"xds-gateway\""),
                );
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bodies_are_rpc_status_shaped() {
        let response = ApiError::Unavailable {
            message: "upstream has not answered".into(),
            retry_after_secs: 2,
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["code"], 14);
        assert_eq!(v["message"], "upstream has not answered");
    }
}
