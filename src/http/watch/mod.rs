//! `?watch` on a discovery route (`GET ...?node=ID&watch`, or a POST with a
//! `DiscoveryRequest` body and `?watch`): a response that stays open and
//! carries every new version the client would be answered, as Server-Sent
//! Events (`Accept: text/event-stream`, or `?format=sse`) or NDJSON
//! (`?format=ndjson`, `Accept: application/x-ndjson`, and the default).
//!
//! What a watch is answered is what a poll is: the request is checked,
//! authorized and polled by `discovery` exactly as a poll, and its answers
//! are booked as a poll's are (`asked`); this module then takes over: the
//! format, where the client resumes from (`Last-Event-ID` over `version`),
//! admission (`--max-watches` and the drain, as for a long poll: a 503 with
//! `Retry-After`), open watches ended by the drain, revocation (a reload of
//! the auth policy that no longer allows the watch ends it with a closing
//! event saying why), and the stream itself ([`stream`]).

mod frame;
mod stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::asked::{Answered, Asked};
use super::present::mark_stale;
use super::Gateway;
use crate::face::ApiError;
use crate::serve::Streaming;
pub(crate) use frame::Format;
use stream::Watch;

/// Opens a watch on `asked` (`vary`: the `Vary` of the poll it stands
/// for, `Accept` picking the format): the stream's response (its first
/// event is the current state unless the client presents it), or why not.
pub(super) async fn open(
    gateway: &Arc<Gateway>,
    asked: Asked<'_>,
    vary: String,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    check_query(query)?;
    let format = format_of(query, headers)?;
    let request = match last_event_id(headers)? {
        Some(version) => asked.request.presenting(&version),
        None => asked.request.clone(),
    };
    let slot = gateway
        .watches
        .admit(&gateway.drain, asked.tenant.as_ref())?;
    let polled = gateway
        .source
        .poll(asked.kind, &request, asked.tenant.as_ref())
        .await?;
    let answered = Answered {
        request: &request,
        watch: true,
        ..asked.answered()
    };
    if request.error_detail().is_some() {
        gateway.metrics.client_nack(asked.kind);
    }
    let first = answered.answer(gateway, &polled)?;
    let stale_since = polled.stale_since();
    let body = Watch::open(
        gateway.clone(),
        asked,
        request,
        format,
        polled,
        slot,
        &first,
    )
    .into_body();
    Ok(response(body, format, &vary, stale_since))
}

/// Refuses what does not go with `?watch`.
fn check_query(query: &HashMap<String, String>) -> Result<(), ApiError> {
    for (param, why) in [
        ("wait", "a watch stays open by itself"),
        ("fetch-timeout", "a watch stays open by itself"),
        ("pretty", "each event is one line of JSON; pipe it to jq"),
        (
            "field-names",
            "a watch's events have lowerCamelCase field names only",
        ),
    ] {
        if query.contains_key(param) {
            return Err(ApiError::BadRequest(format!(
                "?{param} does not go with ?watch: {why}"
            )));
        }
    }
    Ok(())
}

/// The response carrying a watch's `body` in `format`: never cacheable
/// (`vary` still says what selected it), never buffered by a proxy, never
/// closed as idle, marked stale when the state it opened on is.
fn response(body: Body, format: Format, vary: &str, stale_since: Option<SystemTime>) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    // The connection must not be closed as idle while the stream is open.
    response.extensions_mut().insert(Streaming);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    // Never cacheable; Vary still says what selected the body.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(vary) = HeaderValue::from_str(vary) {
        headers.insert(header::VARY, vary);
    }
    // nginx buffers responses unless told not to.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    mark_stale(headers, stale_since);
    response
}

/// `?format=sse|ndjson`, else `Accept: text/event-stream` for SSE, else NDJSON.
fn format_of(query: &HashMap<String, String>, headers: &HeaderMap) -> Result<Format, ApiError> {
    let accepts_sse = || {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("text/event-stream"))
    };
    Ok(match query.get("format").map(String::as_str) {
        Some("sse") => Format::Sse,
        Some("ndjson") => Format::Ndjson,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "format={other:?} does not go with ?watch: use sse or ndjson"
            )))
        }
        None if accepts_sse() => Format::Sse,
        None => Format::Ndjson,
    })
}

/// The version an SSE client reconnects with (`Last-Event-ID`, set by
/// `EventSource` to the last `id:` it saw); empty means none.
fn last_event_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| {
        ApiError::BadRequest(
            "Last-Event-ID is not ASCII text; send the id of the last event".into(),
        )
    })?;
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::face::switch;
    use crate::http::tests::query_of as q;

    #[test]
    fn watch_is_asked_for_explicitly() {
        let requested = |query: &HashMap<String, String>| switch(query, "watch");
        assert!(!requested(&q(&[])).unwrap());
        assert!(!requested(&q(&[("watch", "false")])).unwrap());
        assert!(requested(&q(&[("watch", "")])).unwrap());
        assert!(requested(&q(&[("watch", "true")])).unwrap());
        assert!(requested(&q(&[("watch", "yes please")])).is_err());
    }

    #[test]
    fn format_from_query_then_accept() {
        let mut sse = HeaderMap::new();
        sse.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let none = HeaderMap::new();
        assert_eq!(format_of(&q(&[]), &none).unwrap(), Format::Ndjson);
        assert_eq!(format_of(&q(&[]), &sse).unwrap(), Format::Sse);
        assert_eq!(
            format_of(&q(&[("format", "ndjson")]), &sse).unwrap(),
            Format::Ndjson
        );
        assert_eq!(
            format_of(&q(&[("format", "sse")]), &none).unwrap(),
            Format::Sse
        );
        assert!(format_of(&q(&[("format", "yaml")]), &none).is_err());
    }
}
