//! `GET /debug/history?node=ID&type=T[&cluster=C][&version=V]`: the config
//! history of a node (`observe::ConfigHistory`): per identity of the node,
//! the timeline of the versions of type `T` published (when, the gateway's
//! and the upstream's version, the nonce, the resources added, modified
//! and removed) and the NACKs sent upstream (with their `error_detail`).
//! With `version=V` (a gateway version, or an upstream version: the newest
//! event with it), that version's full content: the `DiscoveryResponse` a
//! client asking the session's names got, as canonical JSON.
//!
//! Errors, `google.rpc.Status` JSON: 400 for a missing or unknown
//! parameter or type; 404 (`NOT_FOUND`) for a node with no history of the
//! type and for a version no longer held (evicted by the byte bound, or
//! never served); 401/403 as [`Sight`] decides.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::access::Sight;
use super::debug::{answer_json, params_of, respond, short_type};
use super::{authorization, needs_token, Admin, Peer};
use crate::face::ApiError;
use crate::observe::{covered_names, EventView, TimelineView};
use crate::xds::ResourceType;

const PATH: &str = "/debug/history";

/// What `/debug/history` shows.
#[derive(Debug, Serialize)]
struct HistoryView {
    node_id: String,
    /// The short type name.
    #[serde(rename = "type")]
    kind: &'static str,
    /// Bytes the whole history holds now, and its bound (`--history-max-bytes`).
    held_bytes: u64,
    max_bytes: u64,
    /// One per identity of the node (cluster, metadata, locality).
    timelines: Vec<TimelineView>,
}

/// What `/debug/history?...&version=V` shows.
#[derive(Debug, Serialize)]
struct VersionView {
    node_id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    cluster: String,
    identity: String,
    /// The event that published it.
    event: EventView,
    /// The `DiscoveryResponse` served at it (canonical JSON).
    response: serde_json::Value,
}

/// `GET /debug/history`.
pub(super) async fn history(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    peer: Peer,
) -> Response {
    judged(&admin, PATH, &headers, peer, query, history_view)
}

/// `answer` to `query` with what the request may see ([`Sight`]), or the 401.
pub(super) fn judged(
    admin: &Admin,
    path: &str,
    headers: &HeaderMap,
    peer: Peer,
    query: Option<String>,
    answer: fn(&Admin, &Sight, &str) -> Result<Response, ApiError>,
) -> Response {
    let peer = peer.as_ref().map(|axum::Extension(p)| &**p);
    match admin.sight(path, authorization(headers), peer) {
        Ok(sight) => answer(admin, &sight, query.as_deref().unwrap_or_default())
            .unwrap_or_else(IntoResponse::into_response),
        Err(message) => needs_token(message),
    }
}

/// The required `node` and `type` parameters of `params`, not empty; the
/// type refused when secrets are not served at all.
pub(super) fn node_and_kind<'a>(
    admin: &Admin,
    params: &'a HashMap<String, String>,
    path: &str,
) -> Result<(&'a String, ResourceType), ApiError> {
    let required = |name: &str, what: &str| {
        params
            .get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ApiError::BadRequest(format!("{path} needs ?{name}= ({what})")))
    };
    let node = required("node", "the node id a client sends")?;
    let kind = short_type(required("type", "a short type name: clusters, ...")?)?;
    if kind == ResourceType::Secrets && !admin.config.allow_secrets {
        return Err(ApiError::Forbidden(
            "secrets are not served without --allow-secrets, so neither is their history".into(),
        ));
    }
    Ok((node, kind))
}

fn history_view(admin: &Admin, sight: &Sight, query: &str) -> Result<Response, ApiError> {
    let params = params_of(
        query,
        PATH,
        &["node", "type", "cluster", "version", "pretty"],
    )?;
    let (node, kind) = node_and_kind(admin, &params, PATH)?;
    let cluster = params.get("cluster").map(String::as_str);
    // Seeing a node of `cluster` implies seeing it of some cluster.
    sight.check(kind, node, cluster)?;
    let timelines = admin.history.timelines(node, cluster, kind);
    if timelines.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no history of {} for node {node:?}{} (kept from the first version a session of the node is served; see /debug/sessions)",
            kind.short_name(),
            cluster.map(|c| format!(" of cluster {c:?}")).unwrap_or_default()
        )));
    }
    for timeline in &timelines {
        sight.check(kind, node, Some(&timeline.cluster))?;
    }
    let Some(version) = params.get("version") else {
        let (held_bytes, max_bytes) = admin.history.held_bytes();
        let view = HistoryView {
            node_id: node.clone(),
            kind: kind.short_name(),
            held_bytes,
            max_bytes,
            timelines,
        };
        return Ok(respond(&view, &params));
    };
    version_view(admin, node, cluster, kind, version, &timelines)
        .map(|view| respond(&view, &params))
}

/// `&version=V`: the event that published it and the response served at it.
fn version_view(
    admin: &Admin,
    node: &str,
    cluster: Option<&str>,
    kind: ResourceType,
    version: &str,
    timelines: &[TimelineView],
) -> Result<VersionView, ApiError> {
    let held = admin
        .history
        .version(node, cluster, kind, version)
        .ok_or_else(|| not_held(node, kind, version, timelines))?;
    if kind == ResourceType::Secrets || held.state.resources.holds_keys() {
        // A rotated-away private key stays secret: of secrets, and of any
        // version holding key material as sent (`--allow-secrets`), only
        // the version served now is shown whole.
        let newest = timelines
            .iter()
            .filter(|t| t.identity == held.identity)
            .flat_map(|t| t.events.iter().rev().filter_map(|e| e.version.as_deref()))
            .next();
        if held.event.version.as_deref() != newest {
            return Err(ApiError::Forbidden(format!(
                "version {version:?} of {} for node {node:?} is no longer served, and holds key \
                 material: the content of a rotated-away secret is not shown (its timeline entry is)",
                kind.short_name()
            )));
        }
    }
    Ok(VersionView {
        node_id: node.to_owned(),
        kind: kind.short_name(),
        response: answer_json(admin, &held.state, &covered_names(&held.state), None)?
            .ok_or_else(|| ApiError::Internal("a 304 for an empty version".into()))?,
        cluster: held.cluster,
        identity: held.identity,
        event: held.event,
    })
}

/// The 404 of a version not held, saying which are.
pub(super) fn not_held(
    node: &str,
    kind: ResourceType,
    version: &str,
    timelines: &[TimelineView],
) -> ApiError {
    let held: Vec<&str> = timelines
        .iter()
        .flat_map(|t| t.events.iter().filter_map(|e| e.version.as_deref()))
        .collect();
    let range = match (held.first(), held.last()) {
        (Some(first), Some(last)) => format!(
            "; {} versions are held, {first:?} to {last:?} (see /debug/history?node=...&type={})",
            held.len(),
            kind.short_name()
        ),
        _ => String::new(),
    };
    ApiError::NotFound(format!(
        "version {version:?} of {} for node {node:?} is not held: never served, or evicted by --history-max-bytes{range}",
        kind.short_name()
    ))
}
