//! `POST` and `GET /v3/discovery:<type>`: one REST discovery request,
//! answered by the source. A GET is turned into the equivalent POST body
//! (`?node=&cluster=&names=a,b&version=`, `If-None-Match` as the version)
//! and served by the same code.
//!
//! Order of checks: query parameters, secrets gate, who is asking (401),
//! content type, body (time, size, JSON), type_url vs path, names and node
//! size, whether the caller may fetch this node (403); a `?watch` is handed
//! to `watch` from here (the same checks, then a stream); else wait and
//! presentation; then the source is polled (it
//! waits, bounded, for the upstream's first state) and answers 200 with the
//! assembled body or 304, holding a 304 as a long poll when the client asked
//! to wait (not while the gateway drains: then a new long poll is a 503 and
//! a held one is answered at once). With `?changes` a body is given in
//! changes form (`cache::Served::changes`, against the history of answers
//! served to the same node identity); every body served is remembered there. Nothing here mutates a state except through its body memo, so a
//! bad request cannot poison what others are served.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::authorize::{authenticate, Caller};
use super::body::{check_json, read_body};
use super::caching::{CacheHeaders, Cacheability};
use super::error::ApiError;
use super::present::{mark_stale, version_from_if_none_match, Presentation};
use super::query::switch;
use super::wait::requested_wait;
use super::watch::{self, Watched};
use super::Gateway;
use crate::cache::{Answer, AnsweredPoll, ClientAddr, Names, ParsedRequest};
use crate::config::{Config, RewritePolicy};
use crate::tls::PeerIdentity;
use crate::xds::rewrite::RestTarget;
use crate::xds::{Endpoint, ResourceType};

/// Query parameters a POST accepts.
const POST_PARAMS: &[&str] = &["wait", "pretty", "format", "watch", "changes"];
/// Query parameters a GET accepts.
const GET_PARAMS: &[&str] = &[
    "wait", "pretty", "format", "node", "cluster", "names", "version", "watch", "changes",
];

/// Who sent a request: the TLS client's identity, the client's address.
pub(super) type Sender = (Option<Arc<PeerIdentity>>, ClientAddr);

/// Serves one `POST` discovery request and records its metrics.
pub(super) async fn handle_post(
    gateway: Arc<Gateway>,
    kind: ResourceType,
    headers: HeaderMap,
    (peer, remote): Sender,
    query: HashMap<String, String>,
    body: Body,
) -> Response {
    let started = Instant::now();
    let served = async {
        check_params(&query, POST_PARAMS)?;
        check_secrets(&gateway, kind)?;
        let caller = authenticate(&gateway, &headers, peer.as_ref())?;
        check_json(&headers)?;
        let body = read_body(
            body,
            gateway.config.max_body_bytes,
            gateway.config.body_read_timeout,
        )
        .await?;
        serve(&gateway, kind, &caller, remote, &headers, &query, body).await
    };
    finish(&gateway, kind, started, served.await)
}

/// Serves `GET /v3/discovery:<type>?node=ID&cluster=C&names=a,b&version=V`.
pub(super) async fn handle_get(
    gateway: Arc<Gateway>,
    kind: ResourceType,
    headers: HeaderMap,
    (peer, remote): Sender,
    query: HashMap<String, String>,
) -> Response {
    let started = Instant::now();
    let served = async {
        check_params(&query, GET_PARAMS)?;
        check_secrets(&gateway, kind)?;
        let caller = authenticate(&gateway, &headers, peer.as_ref())?;
        let body = get_body(&query, &headers)?;
        serve(&gateway, kind, &caller, remote, &headers, &query, body).await
    };
    finish(&gateway, kind, started, served.await)
}

/// The poll itself: parse, authorize the node, ask the source, answer
/// (holding a 304 as a long poll when asked to wait), or open a watch.
async fn serve(
    gateway: &Arc<Gateway>,
    kind: ResourceType,
    caller: &Caller,
    remote: ClientAddr,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let config = &gateway.config;
    let request = gateway.parsed.parse(body)?;
    check_type_url(kind, &request)?;
    check_size(config, &request)?;
    // Before the source: a refused node never gets an upstream session.
    caller.may_fetch(kind, request.node_id(), request.node_cluster())?;
    let tenant = gateway.tenant(caller);
    let changes = switch(query, "changes")?;
    let mut cacheability = Cacheability {
        authenticated: gateway.auth.is_some(),
        secrets: kind == ResourceType::Secrets,
        changes,
        long_poll: false,
        host_selects: rewrites(config, request.user_agent_name()),
    };
    if watch::requested(query)? {
        let target = rest_target(config, request.user_agent_name(), headers);
        let watched = Watched {
            kind,
            caller,
            request: &request,
            target,
            remote,
            changes,
            tenant: tenant.as_ref(),
            vary: cacheability.headers(config.cache_max_age).vary,
        };
        return watch::open(gateway, watched, headers, query).await;
    }
    let wait = requested_wait(query, config.default_wait, config.max_wait)?;
    cacheability.long_poll = !wait.is_zero();
    let cache_headers = cacheability.headers(config.cache_max_age);
    let presentation = Presentation::from_request(query, headers)?;
    let target = rest_target(config, request.user_agent_name(), headers);
    let target = target.as_ref();
    let renderer = &gateway.renderer;

    let mut polled = gateway.source.poll(kind, &request, tenant.as_ref()).await?;
    let mut answer = polled.answer(renderer, &request, remote, target)?;
    if matches!(answer, Answer::NotModified { .. }) && !wait.is_zero() {
        let _slot = gateway.long_polls.admit(&gateway.drain, tenant.as_ref())?;
        let _held = gateway.metrics.long_poll_held();
        // At shutdown a held poll is answered now (304 unless the state
        // moved meanwhile), so the connection can close.
        // A reload of the auth policy that no longer allows this request
        // ends it with the new policy's answer.
        let revoked = caller.revoked(kind, request.node_id(), request.node_cluster());
        let changed = tokio::select! {
            changed = polled.next_change(wait) => changed,
            () = gateway.drain.started() => true,
            err = revoked => return Err(err.into()),
        };
        if changed {
            answer = polled.answer(renderer, &request, remote, target)?;
        }
    }
    gateway.clients.record(AnsweredPoll {
        request: &request,
        kind,
        remote: remote.ip(),
        current: answer.version(),
        body: matches!(answer, Answer::Body { .. }),
        standing: polled.standing(),
        rewritten_for: target.map(|t| t.cluster_name.as_str()),
    });
    if let Answer::Body {
        json,
        version,
        cached,
    } = answer
    {
        // Recalled before it is remembered: what the client held, not this.
        let since = changes
            .then(|| gateway.history.recall(&request, request.version_info()))
            .flatten();
        let served = || Arc::new(polled.served(&request, target));
        let json = match changes {
            true => served().changes(renderer, &version, since.as_deref())?,
            false => json,
        };
        gateway.history.remember(&request, &version, served);
        answer = Answer::Body {
            json,
            version,
            cached,
        };
    }
    let mut response = respond(gateway, kind, answer, presentation, &cache_headers)?;
    mark_stale(response.headers_mut(), polled.stale_since());
    Ok(response)
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

fn check_secrets(gateway: &Gateway, kind: ResourceType) -> Result<(), ApiError> {
    if kind == ResourceType::Secrets && !gateway.config.allow_secrets {
        return Err(ApiError::Forbidden(
            "serving secrets over HTTP is off; start the gateway with --allow-secrets to serve them".into(),
        ));
    }
    Ok(())
}

/// What one request may make the gateway hold: its names and its node.
fn check_size(config: &Config, request: &ParsedRequest) -> Result<(), ApiError> {
    if let Names::Named(names) = request.names() {
        if names.len() > config.max_names_per_request {
            return Err(ApiError::BadRequest(format!(
                "the request names {} resources; at most {} per request (--max-names-per-request)",
                names.len(),
                config.max_names_per_request
            )));
        }
    }
    if request.node_bytes() > config.max_node_bytes {
        return Err(ApiError::BadRequest(format!(
            "the request's node is {} bytes of JSON; at most {} (--max-node-bytes)",
            request.node_bytes(),
            config.max_node_bytes
        )));
    }
    Ok(())
}

/// The type comes from the path; a body that names another is a mistake.
fn check_type_url(kind: ResourceType, request: &ParsedRequest) -> Result<(), ApiError> {
    let type_url = request.type_url();
    if type_url.is_empty() || type_url == kind.type_url() {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "type_url {type_url:?} contradicts the path {} (which serves {})",
        Endpoint::Discovery(kind).path(),
        kind.type_url()
    )))
}

/// The DiscoveryRequest JSON a GET stands for.
fn get_body(query: &HashMap<String, String>, headers: &HeaderMap) -> Result<Bytes, ApiError> {
    let names: Vec<&str> = query
        .get("names")
        .map(|n| {
            n.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default();
    // A malformed If-None-Match is a 400 even when `version` wins over it.
    let tagged = version_from_if_none_match(headers)?;
    let version = match query.get("version") {
        Some(version) => version.clone(),
        None => tagged.unwrap_or_default(),
    };
    let body = serde_json::json!({
        "version_info": version,
        "resource_names": names,
        "node": {
            "id": query.get("node").map_or("", String::as_str),
            "cluster": query.get("cluster").map_or("", String::as_str),
        },
    });
    Ok(Bytes::from(body.to_string()))
}

fn finish(
    gateway: &Gateway,
    kind: ResourceType,
    started: Instant,
    served: Result<Response, ApiError>,
) -> Response {
    let response = served.unwrap_or_else(IntoResponse::into_response);
    gateway.metrics.request(
        Some(kind),
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// The HTTP answer for `answer`, counted as a cache hit or miss, with
/// `cache_headers` on the 200 and the 304 alike. A 304 renders nothing: it
/// is built from the version alone, so a fleet of clients (or one edge
/// cache per client request) revalidating costs no rendering.
fn respond(
    gateway: &Gateway,
    kind: ResourceType,
    answer: Answer,
    presentation: Presentation,
    cache_headers: &CacheHeaders,
) -> Result<Response, ApiError> {
    let mut response = match answer {
        Answer::NotModified { version } => {
            gateway.metrics.cache_hit(kind);
            Presentation::not_modified(&version)
        }
        Answer::Body {
            json,
            version,
            cached,
        } => {
            if cached {
                gateway.metrics.cache_hit(kind);
            } else {
                gateway.metrics.cache_miss(kind);
            }
            presentation.ok(json, &version)?
        }
    };
    cache_headers.apply(&mut response);
    Ok(response)
}

/// Where rewritten config sources point, if this client gets them rewritten.
/// Envoy sets `Host` to its xDS cluster name.
fn rest_target(config: &Config, user_agent: &str, headers: &HeaderMap) -> Option<RestTarget> {
    let rewrite = rewrites(config, user_agent);
    let host = headers.get(header::HOST)?.to_str().ok()?;
    (rewrite && !host.is_empty()).then(|| RestTarget {
        cluster_name: host.to_owned(),
        refresh_delay: config.refresh_delay,
        request_timeout: config.request_timeout,
    })
}

/// Whether config sources are rewritten for a client with `user_agent`,
/// so that its `Host` selects the body (a GET carries no user agent).
fn rewrites(config: &Config, user_agent: &str) -> bool {
    match config.rewrite_config_sources {
        RewritePolicy::Always => true,
        RewritePolicy::Never => false,
        RewritePolicy::Auto => user_agent == "envoy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn rewrite_policy_and_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("xds_cluster"));
        let policy = |rewrite_config_sources| Config {
            rewrite_config_sources,
            ..Config::default()
        };
        let auto = policy(RewritePolicy::Auto);
        let target = rest_target(&auto, "envoy", &h).unwrap();
        assert_eq!(target.cluster_name, "xds_cluster");
        assert_eq!(target.request_timeout, auto.request_timeout);
        assert!(rest_target(&auto, "curl", &h).is_none());
        assert!(rest_target(&policy(RewritePolicy::Always), "curl", &h).is_some());
        assert!(rest_target(&policy(RewritePolicy::Never), "envoy", &h).is_none());
        assert!(rest_target(&policy(RewritePolicy::Always), "envoy", &HeaderMap::new()).is_none());
        // Host is in Vary exactly where it may select the rewrite target.
        assert!(rewrites(&auto, "envoy") && !rewrites(&auto, ""));
        assert!(rewrites(&policy(RewritePolicy::Always), ""));
        assert!(!rewrites(&policy(RewritePolicy::Never), "envoy"));
    }
}
