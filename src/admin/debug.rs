//! The admin listener's debug views, in JSON (`?pretty` indents):
//! - `GET /debug/clients`: every REST client seen within `--idle-timeout`,
//!   per type its subscriptions, how many are in step, and each one that is
//!   not (catching up, behind, a suspected rejection and why).
//! - `GET /debug/sessions`: every session (one per node identity): the
//!   source, the upstream stream (connecting or open since, stale since, last
//!   error), per type the version served, the names subscribed and the last
//!   ACK/NACK sent, and how many REST clients poll through it.
//!
//! Guarded like `/metrics` by the policy's admin tokens. Views read; they
//! never change what is served.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::{needs_token, Admin};

/// `GET /debug/clients`.
pub(super) async fn clients(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if !admin.may_see_details(&headers) {
        return needs_token("/debug/clients");
    }
    json_response(&admin.clients.view(), wants_pretty(query.as_deref()))
}

/// `GET /debug/sessions`.
pub(super) async fn sessions(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if !admin.may_see_details(&headers) {
        return needs_token("/debug/sessions");
    }
    let clients = admin.clients.per_node();
    let mut sessions = admin.source.sessions();
    for session in &mut sessions {
        let node = (
            session["node_id"].as_str().unwrap_or_default().to_owned(),
            session["cluster"].as_str().unwrap_or_default().to_owned(),
        );
        session["clients"] = clients.get(&node).copied().unwrap_or(0).into();
    }
    let status = admin.source.status();
    let view = serde_json::json!({
        "source": status.description,
        "ready": status.ready,
        "sessions": sessions,
    });
    json_response(&view, wants_pretty(query.as_deref()))
}

/// Whether the query has `pretty` (with any value but `false`).
fn wants_pretty(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "pretty" || (pair.starts_with("pretty=") && pair != "pretty=false"))
}

/// `value` as a JSON response, indented when `pretty`.
fn json_response(value: &serde_json::Value, pretty: bool) -> Response {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .unwrap_or_else(|_| "{}".to_owned());
    let mut response = format!("{text}\n").into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
