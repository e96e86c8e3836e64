//! The one JSON error body of both listeners: a `google.rpc.Status`-shaped
//! object, `{"code": <google.rpc.Code number>, "message": "<what was
//! wrong>"}` and a newline, served as `application/json` (the response
//! the admin listener's JSON views use too, [`json`]); the google.rpc.Code
//! numbers the gateway uses; and the `Retry-After` a 503 asks for. The REST
//! error table (`face/error.rs`), the admin listener's refusals and the
//! listener's own refusals (`serve`) all write their bodies here, so they
//! cannot drift apart. It sits below `http`, `admin` and `serve` and imports
//! nothing of the crate.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Seconds a 503 asks the client to wait before retrying.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

/// google.rpc.Code numbers used here.
pub(crate) mod code {
    pub(crate) const INVALID_ARGUMENT: i32 = 3;
    pub(crate) const DEADLINE_EXCEEDED: i32 = 4;
    pub(crate) const NOT_FOUND: i32 = 5;
    pub(crate) const PERMISSION_DENIED: i32 = 7;
    pub(crate) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(crate) const UNIMPLEMENTED: i32 = 12;
    pub(crate) const INTERNAL: i32 = 13;
    pub(crate) const UNAVAILABLE: i32 = 14;
    pub(crate) const UNAUTHENTICATED: i32 = 16;
}

/// The body's two fields, in the order they are written.
#[derive(serde::Serialize)]
struct Status<'a> {
    code: i32,
    message: &'a str,
}

/// The body text: `{"code":<code>,"message":"<message>"}` and a newline.
pub(crate) fn body(code: i32, message: &str) -> String {
    let status = Status { code, message };
    // A struct of an integer and a string always serializes.
    let mut text = serde_json::to_string(&status).unwrap_or_default();
    text.push('\n');
    text
}

/// A response of `status` carrying [`body`].
pub(crate) fn response(status: StatusCode, code: i32, message: &str) -> Response {
    json(status, body(code, message))
}

/// A response of `status` carrying `text` (JSON) as `application/json`:
/// every error, and the admin listener's JSON views.
pub(crate) fn json(status: StatusCode, text: String) -> Response {
    let content_type = HeaderValue::from_static("application/json");
    (status, [(header::CONTENT_TYPE, content_type)], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_status_object_then_a_newline() {
        assert_eq!(
            body(code::UNAVAILABLE, "a \"quoted\" reason"),
            "{\"code\":14,\"message\":\"a \\\"quoted\\\" reason\"}\n"
        );
    }

    #[tokio::test]
    async fn a_response_is_json_with_that_body() {
        let response = response(StatusCode::NOT_FOUND, code::NOT_FOUND, "no such thing");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"{\"code\":5,\"message\":\"no such thing\"}\n");
    }
}
