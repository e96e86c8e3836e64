//! The admin listener's debug views, in JSON (`?pretty` indents; `pretty=false`
//! or `pretty=0` do not, as on the REST listener):
//! - `GET /debug/clients`: every REST client seen within `--idle-timeout`,
//!   per type its subscriptions, how many are in step, and each one that is
//!   not (catching up, behind, a suspected rejection and why).
//! - `GET /debug/sessions`: every session (one per node identity): the
//!   source, the upstream stream (connecting or open since, stale since, last
//!   error), per type the version served, the names subscribed and the last
//!   ACK/NACK sent, and how many REST clients poll through it.
//! - `GET /debug/config?node=ID[&type=clusters,listeners][&name=N][&rewrite=HOST|none]`:
//!   what that node is served now, every type its session holds, as one
//!   document (like Envoy's `/config_dump`), each type the
//!   `DiscoveryResponse` a client of the node asking for the session's names
//!   would get. ADS config sources are rewritten as the node's most recent
//!   client had them rewritten (`rewrite=` overrides: a host, or `none`).
//!   `name=` narrows every type to that one resource (types without it are
//!   left out).
//! - `GET /debug/client_status[?node=ID]`: CSDS for the REST clients, as
//!   canonical JSON (see `csds.rs`).
//!
//! Guarded like `/metrics` by the policy's admin tokens. Views read; they
//! never change what is served.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;

use serde::Serialize;

use super::{csds, views, Admin};
use crate::cache::{Answer, Names, TypeState};
use crate::face::{ApiError, Params};
use crate::xds::rewrite::RestTarget;
use crate::xds::ResourceType;

/// `GET /debug/clients`.
pub(super) async fn clients(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
) -> Response {
    json_response(&admin.clients.view(), wants_pretty(query.as_deref()))
}

/// `GET /debug/sessions`.
pub(super) async fn sessions(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
) -> Response {
    json_response(&admin.sessions_view(), wants_pretty(query.as_deref()))
}

/// What `/debug/config` shows: a node's config, one type at a time.
#[derive(Debug, Serialize)]
struct ConfigDump {
    node_id: String,
    /// The REST cluster its ADS config sources point at, if rewritten.
    config_sources_rewritten_for: Option<String>,
    configs: Vec<TypeConfig>,
}

/// One type of a [`ConfigDump`].
#[derive(Debug, Serialize)]
struct TypeConfig {
    /// The short type name.
    #[serde(rename = "type")]
    kind: &'static str,
    /// The `DiscoveryResponse` a client of the node would get, as JSON.
    response: serde_json::Value,
}

/// The parameters of `query`, refused if it holds one `path` does not take.
pub(super) fn params_of(
    query: &str,
    path: &str,
    takes: &[&str],
) -> Result<HashMap<String, String>, ApiError> {
    let Params(params) = Params::parse(query)?;
    match params.keys().find(|k| !takes.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::BadRequest(format!(
            "unknown query parameter {unknown:?}; {path} takes {}",
            takes.join(", ")
        ))),
        None => Ok(params),
    }
}

/// `GET /debug/config?node=ID`.
pub(super) async fn config(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = params_of(
        query.as_deref().unwrap_or_default(),
        "/debug/config",
        &["node", "type", "name", "rewrite", "pretty"],
    )?;
    // One resource by name (in every type that has it, or those of `type`).
    let only = params.get("name").filter(|n| !n.is_empty());
    let node = params
        .get("node")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::BadRequest("/debug/config needs ?node=ID (the node id a client sends)".into())
        })?;
    let kinds: Option<Vec<ResourceType>> = (params.get("type"))
        .map(|list| list.split(',').map(short_type).collect::<Result<_, _>>())
        .transpose()?;
    // Where rewritten config sources point: `?rewrite=HOST`, none for
    // `?rewrite=none`, or else where the node's own clients had them pointed.
    let host = match params.get("rewrite").map(String::as_str) {
        Some("none") => None,
        Some(host) => Some(host.to_owned()),
        None => admin.clients.rewritten_for(node),
    };
    let target = host.map(|cluster_name| RestTarget {
        cluster_name,
        refresh_delay: admin.config.rewrite.refresh_delay,
        request_timeout: admin.config.rewrite.request_timeout,
    });
    let states = admin.source.states_of(node);
    if states.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no session holds node {node:?} (see /debug/sessions; a node's config is there once one of its clients polled)"
        )));
    }
    let mut configs = Vec::new();
    for state in states {
        if kinds.as_ref().is_some_and(|k| !k.contains(&state.kind))
            || (state.kind == ResourceType::Secrets && !admin.config.allow_secrets)
        {
            continue;
        }
        configs.extend(type_config(&admin, &state, only, target.as_ref())?);
    }
    let view = ConfigDump {
        node_id: node.clone(),
        config_sources_rewritten_for: target.map(|t| t.cluster_name),
        configs,
    };
    Ok(respond(&view, &params))
}

/// The type a short name (`clusters`) names.
pub(super) fn short_type(name: &str) -> Result<ResourceType, ApiError> {
    crate::auth::short_type(name.trim())
        .map_err(|known| ApiError::BadRequest(format!("type={name:?} is not one of {known}")))
}

/// One type's `DiscoveryResponse` as the node's clients are served it (the
/// names they asked for, or only `only`); `None` when it has nothing to show.
fn type_config(
    admin: &Admin,
    state: &TypeState,
    only: Option<&String>,
    target: Option<&RestTarget>,
) -> Result<Option<TypeConfig>, ApiError> {
    let names = match only {
        Some(name) if state.coverage.wants(name) => Names::Named([name.clone()].into()),
        Some(_) => return Ok(None),
        None if state.coverage.wildcard => Names::Wildcard,
        None => Names::Named(state.coverage.names.clone()),
    };
    if only.is_some() && state.select(&names).next().is_none() {
        return Ok(None);
    }
    Ok(
        answer_json(admin, state, &names, target)?.map(|response| TypeConfig {
            kind: state.kind.short_name(),
            response,
        }),
    )
}

/// The `DiscoveryResponse` a client asking `names` of `state` (with config
/// sources pointed at `target`) is served, as JSON; `None` for a 304 (an
/// empty version). Parsed with [`plain_json`](crate::xds::plain_json): a
/// resource's own keys are content.
pub(super) fn answer_json(
    admin: &Admin,
    state: &TypeState,
    names: &Names,
    target: Option<&RestTarget>,
) -> Result<Option<serde_json::Value>, ApiError> {
    let answer = state
        .answer(&admin.assembler, names, "", target)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let Answer::Body { json, .. } = answer else {
        return Ok(None);
    };
    crate::xds::plain_json::from_slice(&json.to_bytes())
        .map(Some)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// `GET /debug/client_status[?node=ID]`: the CSDS `ClientStatusResponse`
/// for the REST clients, as canonical JSON.
pub(super) async fn client_status(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = query.as_deref().unwrap_or_default();
    let params = params_of(query, "/debug/client_status", &["node", "pretty"])?;
    let mut request = ClientStatusRequest::default();
    if let Some(node) = params.get("node") {
        request.node_matchers.push(NodeMatcher {
            node_id: Some(StringMatcher {
                match_pattern: Some(MatchPattern::Exact(node.clone())),
                ..StringMatcher::default()
            }),
            ..NodeMatcher::default()
        });
    }
    let answer =
        csds::client_status(&admin, &request).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let json = admin
        .assembler
        .codec()
        .render_prost("envoy.service.status.v3.ClientStatusResponse", &answer)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let value =
        crate::xds::plain_json::from_slice(&json).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(respond(&value, &params))
}

/// Whether the query has `pretty` (with any value but `false` or `0`, as
/// on the REST listener).
fn wants_pretty(query: Option<&str>) -> bool {
    query.unwrap_or_default().split('&').any(|pair| match pair {
        "pretty" => true,
        _ => pair
            .strip_prefix("pretty=")
            .is_some_and(|value| pretty_value(Some(value))),
    })
}

/// Whether a `pretty` parameter (absent: `None`) asks for indented JSON.
pub(super) fn pretty_value(value: Option<&str>) -> bool {
    value.is_some_and(|v| v != "false" && v != "0")
}

/// `view` as a JSON response, indented when `params` ask for it.
pub(super) fn respond(view: &impl Serialize, params: &HashMap<String, String>) -> Response {
    json_response(view, pretty_value(params.get("pretty").map(String::as_str)))
}

/// `view` as a JSON response, indented when `pretty`.
pub(super) fn json_response(view: &impl Serialize, pretty: bool) -> Response {
    crate::error_body::json(StatusCode::OK, format!("{}\n", views::json(view, pretty)))
}

#[cfg(test)]
mod tests {
    use super::{pretty_value, wants_pretty};

    #[test]
    fn pretty_means_the_same_as_on_the_rest_listener() {
        for query in ["pretty", "a=1&pretty", "pretty=", "pretty=true", "pretty=1"] {
            assert!(wants_pretty(Some(query)), "{query}");
        }
        for query in ["", "pretty=false", "pretty=0", "prettyx"] {
            assert!(!wants_pretty(Some(query)), "{query}");
        }
        assert!(!wants_pretty(None));
        assert!(pretty_value(Some("")) && !pretty_value(Some("0")) && !pretty_value(None));
    }
}
