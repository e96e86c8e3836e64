//! `POST` and `GET /v3/discovery:<type>`: one REST discovery request,
//! answered from the node's session. A GET is turned into the equivalent
//! POST body (`?node=&cluster=&names=a,b&version=`, `If-None-Match` as the
//! version) and served by the same code.
//!
//! Order of checks: secrets gate, body (size, JSON), type_url vs path, node,
//! session, then the answer: wait (bounded) for the upstream's first state,
//! 200 with the assembled body or 304, holding a 304 as a long poll when the
//! client asked to wait. Nothing here mutates a state except through its
//! body memo, so a bad request cannot poison what others are served.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tracing::warn;

use super::error::ApiError;
use super::parsed::ParsedRequest;
use super::present::{version_from_if_none_match, Presentation};
use super::Gateway;
use crate::cache::{Answer, TypeState};
use crate::config::{RewritePolicy, UpstreamMode};
use crate::source::session::{wait_for_change, wait_for_coverage, Command, SETTLE};
use crate::source::{Session, SourceError, Upstream};
use crate::xds::rewrite::RestTarget;
use crate::xds::{Endpoint, ResourceType};

/// Seconds a 503 asks the client to wait before retrying.
pub(super) const RETRY_AFTER_SECS: u64 = 1;

/// A render failure is the gateway's fault (states were validated on arrival).
pub(super) fn render_error(e: crate::xds::JsonError) -> ApiError {
    ApiError::Internal(format!("rendering failed: {e}"))
}

/// Query parameters a POST accepts.
const POST_PARAMS: &[&str] = &["wait", "pretty", "format"];
/// Query parameters a GET accepts.
const GET_PARAMS: &[&str] = &[
    "wait", "pretty", "format", "node", "cluster", "names", "version",
];

/// Serves one discovery request and records its metrics.
pub async fn handle(
    gateway: Arc<Gateway>,
    kind: ResourceType,
    headers: HeaderMap,
    query: HashMap<String, String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let served = match check_params(&query, POST_PARAMS) {
        Ok(()) => serve(&gateway, kind, &headers, &query, body).await,
        Err(err) => Err(err),
    };
    finish(&gateway, kind, started, served)
}

/// Serves `GET /v3/discovery:<type>?node=ID&cluster=C&names=a,b&version=V`.
pub async fn handle_get(
    gateway: Arc<Gateway>,
    kind: ResourceType,
    headers: HeaderMap,
    query: HashMap<String, String>,
) -> Response {
    let started = Instant::now();
    let served = match check_params(&query, GET_PARAMS) {
        Ok(()) => {
            let body = get_body(&query, &headers);
            serve(&gateway, kind, &headers, &query, Ok(body)).await
        }
        Err(err) => Err(err),
    };
    finish(&gateway, kind, started, served)
}

fn check_params(query: &HashMap<String, String>, allowed: &[&str]) -> Result<(), ApiError> {
    match query.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(ApiError::BadRequest(format!(
            "unknown query parameter {key:?}; this method accepts {}",
            allowed.join(", ")
        ))),
    }
}

/// The DiscoveryRequest JSON a GET stands for.
fn get_body(query: &HashMap<String, String>, headers: &HeaderMap) -> Bytes {
    let names: Vec<&str> = query
        .get("names")
        .map(|n| {
            n.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let version = query
        .get("version")
        .cloned()
        .or_else(|| version_from_if_none_match(headers))
        .unwrap_or_default();
    let body = serde_json::json!({
        "version_info": version,
        "resource_names": names,
        "node": {
            "id": query.get("node").map_or("", String::as_str),
            "cluster": query.get("cluster").map_or("", String::as_str),
        },
    });
    Bytes::from(body.to_string())
}

fn finish(
    gateway: &Gateway,
    kind: ResourceType,
    started: Instant,
    served: Result<Response, ApiError>,
) -> Response {
    let response = match served {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    gateway.metrics.request(
        Some(kind),
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

async fn serve(
    gateway: &Gateway,
    kind: ResourceType,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let config = &gateway.config;
    if kind == ResourceType::Secrets && !config.allow_secrets {
        return Err(ApiError::Forbidden(
            "serving secrets over HTTP is off; start the gateway with --allow-secrets to serve them".into(),
        ));
    }
    let body = body.map_err(|rejection| body_error(rejection, config.max_body_bytes))?;
    let request = gateway
        .parsed
        .parse(body)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if !request.type_url.is_empty() && request.type_url != kind.type_url() {
        return Err(ApiError::BadRequest(format!(
            "type_url {:?} contradicts the path {} (which serves {})",
            request.type_url,
            Endpoint::Discovery(kind).path(),
            kind.type_url()
        )));
    }
    let wait = requested_wait(query, config.default_wait, config.max_wait)?;
    let presentation = Presentation::from_request(query, headers)?;
    let target = rest_target(
        config.rewrite_config_sources,
        &request.user_agent_name,
        headers,
        config.refresh_delay,
    );
    if let Some(fetcher) = &gateway.fetcher {
        let mode = fetcher
            .context()
            .wait_mode(config.first_response_timeout)
            .await;
        match mode {
            Some(UpstreamMode::Fetch) => {
                return super::fetched::serve(
                    gateway,
                    fetcher,
                    kind,
                    &request,
                    target.as_ref(),
                    presentation,
                )
                .await;
            }
            Some(_) => {}
            None => {
                return Err(ApiError::Unavailable {
                    message: "the upstream's API is still being probed (--upstream-mode auto)"
                        .into(),
                    retry_after_secs: RETRY_AFTER_SECS,
                });
            }
        }
    }
    if let Upstream::Snapshot(source) = gateway.registry.upstream() {
        if !source.is_loaded() {
            return Err(ApiError::Unavailable {
                message: format!(
                    "the {} did not load: {}; see the admin /readyz for every problem",
                    source.origin(),
                    source
                        .problems()
                        .first()
                        .map_or("no files yet", String::as_str)
                ),
                retry_after_secs: RETRY_AFTER_SECS,
            });
        }
    }
    let names = &request.names;
    let session = gateway
        .registry
        .session(&request.identity, request.body())
        .map_err(source_error)?;
    let _serving = session.serving();
    let (rx, settled) = session.want(kind, names, SETTLE);
    let wait_first = if settled {
        Duration::ZERO
    } else {
        config.first_response_timeout
    };
    let Some(mut state) = wait_for_coverage(rx.clone(), names, wait_first).await else {
        return Err(ApiError::Unavailable {
            message: format!(
                "the upstream has not answered for {} within {:?}",
                kind.type_url(),
                config.first_response_timeout
            ),
            retry_after_secs: RETRY_AFTER_SECS,
        });
    };
    let presented = request.version_info.as_str();
    check_rejection(gateway, &session, kind, &request, &state, target.as_ref());

    let renderer = gateway.registry.renderer();
    let mut answer = state
        .answer(renderer, names, presented, target.as_ref())
        .map_err(render_error)?;
    if answer == Answer::NotModified && !wait.is_zero() {
        let next = wait_for_change(rx, &state, wait).await;
        if !Arc::ptr_eq(&next, &state) {
            state = next;
            answer = state
                .answer(renderer, names, presented, target.as_ref())
                .map_err(render_error)?;
        }
    }
    if matches!(answer, Answer::Body { .. }) {
        session.with_rejections(kind, |t| t.served(&state.version));
    }
    let mut response = respond(gateway, kind, &state, answer, presentation)?;
    if let Some(since) = session.stale_since() {
        // The upstream is down: this is the last good state, kept serving.
        let stamp = humantime::format_rfc3339_seconds(since).to_string();
        if let Ok(value) = axum::http::HeaderValue::from_str(&stamp) {
            response.headers_mut().insert(STALE_HEADER, value);
        }
    }
    Ok(response)
}

/// Response header set while the session's upstream stream is down: the
/// RFC 3339 time since which the state served is stale.
pub const STALE_HEADER: &str = "x-xds-gateway-stale-since";

/// The HTTP answer for `answer`, counted as a cache hit or miss.
pub(super) fn respond(
    gateway: &Gateway,
    kind: ResourceType,
    state: &TypeState,
    answer: Answer,
    presentation: Presentation,
) -> Result<Response, ApiError> {
    match answer {
        Answer::NotModified => {
            gateway.metrics.cache_hit(kind);
            Ok(Presentation::not_modified(&state.version))
        }
        Answer::Body { json, cached } => {
            if cached {
                gateway.metrics.cache_hit(kind);
            } else {
                gateway.metrics.cache_miss(kind);
            }
            presentation.ok(json, &state.version)
        }
    }
}

/// Counts polls that present an older version than one already served to
/// the same subscription, and reports (and optionally NACKs upstream) a
/// suspected rejection.
fn check_rejection(
    gateway: &Gateway,
    session: &Session,
    kind: ResourceType,
    request: &ParsedRequest,
    state: &TypeState,
    target: Option<&RestTarget>,
) {
    let presented = request.version_info.as_str();
    if presented.is_empty() {
        return;
    }
    let subscription = || format!("{}\u{0}{:?}", request.node_id, request.names);
    if presented == state.version {
        session.with_rejections(kind, |t| t.caught_up(subscription));
        return;
    }
    let threshold = gateway.config.rejection_threshold;
    let subscription = subscription();
    let served_current = state.has_served(&request.names, target);
    let Some(suspicion) = session.with_rejections(kind, |t| {
        t.observe(
            &subscription,
            presented,
            &state.version,
            served_current,
            threshold,
        )
    }) else {
        return;
    };
    warn!(
        node = %session.node.id, %kind, presented = %suspicion.presented, current = %suspicion.current,
        polls = suspicion.polls, "suspected rejection: a REST client keeps presenting an older version"
    );
    gateway.metrics.suspected_rejection(kind);
    if gateway.config.forward_rejections {
        session.send(Command::Nack {
            kind,
            presented: suspicion.presented.clone(),
            message: format!(
                "xds-gateway: a REST client of node {:?} kept presenting version {:?} for {} polls after version {:?} was served; it probably rejected it",
                session.node.id, suspicion.presented, suspicion.polls, suspicion.current
            ),
        });
    }
}

/// Where rewritten config sources point, if this client gets them rewritten.
/// Envoy sets `Host` to its xDS cluster name.
fn rest_target(
    policy: RewritePolicy,
    user_agent: &str,
    headers: &HeaderMap,
    refresh_delay: Duration,
) -> Option<RestTarget> {
    let rewrite = match policy {
        RewritePolicy::Always => true,
        RewritePolicy::Never => false,
        RewritePolicy::Auto => user_agent == "envoy",
    };
    let host = headers.get(header::HOST)?.to_str().ok()?;
    (rewrite && !host.is_empty()).then(|| RestTarget {
        cluster_name: host.to_owned(),
        refresh_delay,
    })
}

/// `?wait=25s` (or the configured default), capped by `max_wait`.
fn requested_wait(
    query: &HashMap<String, String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, ApiError> {
    let wait = match query.get("wait") {
        None => default,
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            ApiError::BadRequest(format!(
                "wait={text:?} is not a duration like 25s or 500ms: {e}"
            ))
        })?,
    };
    Ok(wait.min(max))
}

pub(super) fn body_error(rejection: BytesRejection, limit: usize) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::BodyTooLarge { limit }
    } else {
        ApiError::BadRequest(format!(
            "could not read the request body: {}",
            rejection.body_text()
        ))
    }
}

pub(super) fn source_error(err: SourceError) -> ApiError {
    match err {
        SourceError::InvalidNode(_) => ApiError::BadRequest(err.to_string()),
        SourceError::TooManySessions { .. } => ApiError::Unavailable {
            message: err.to_string(),
            retry_after_secs: RETRY_AFTER_SECS,
        },
        SourceError::BadUpstream { .. } | SourceError::Tls(_) => {
            ApiError::Internal(err.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn wait_is_parsed_and_capped() {
        let q = |v: &str| HashMap::from([("wait".to_string(), v.to_string())]);
        let max = Duration::from_secs(30);
        assert_eq!(
            requested_wait(&HashMap::new(), Duration::ZERO, max).unwrap(),
            Duration::ZERO
        );
        assert_eq!(
            requested_wait(&q("5s"), Duration::ZERO, max).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(requested_wait(&q("5m"), Duration::ZERO, max).unwrap(), max);
        assert!(requested_wait(&q("soon"), Duration::ZERO, max).is_err());
    }

    #[test]
    fn rewrite_policy_and_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("xds_cluster"));
        let d = Duration::from_secs(1);
        assert_eq!(
            rest_target(RewritePolicy::Auto, "envoy", &h, d)
                .unwrap()
                .cluster_name,
            "xds_cluster"
        );
        assert!(rest_target(RewritePolicy::Auto, "curl", &h, d).is_none());
        assert!(rest_target(RewritePolicy::Always, "curl", &h, d).is_some());
        assert!(rest_target(RewritePolicy::Never, "envoy", &h, d).is_none());
        assert!(rest_target(RewritePolicy::Always, "envoy", &HeaderMap::new(), d).is_none());
    }
}
