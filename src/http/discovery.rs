//! `POST` and `GET /v3/discovery:<type>`: one REST discovery request,
//! answered by the source. A GET is turned into the equivalent POST body
//! (`?node=&cluster=&names=a,b&version=`, `If-None-Match` as the version;
//! its node from a profile and inline parts, `crate::profiles::query`)
//! and served by the same code: the same node JSON, the same request.
//!
//! Order of checks: query parameters, secrets gate, who is asking (401),
//! content type, body (time, size, JSON), type_url vs path, locators asking
//! for variants (501: not served), names and node size, whether the caller
//! may fetch this node (403); a `?watch` is handed to `watch` from here
//! (the same checks, then a stream); else wait and
//! presentation; then the source is polled (it waits, bounded, for the
//! upstream's first state) and answers 200 with the assembled body or 304,
//! holding a 304 as a long poll when the client asked to wait
//! (`long_poll`). With `?changes` a body is given in changes form, against
//! the history of answers served to the same node identity; every body
//! served is remembered there (`asked`, as for a watch). Nothing here
//! mutates a state except through its body memo, so a bad request cannot
//! poison what others are served.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::asked::{Answered, Asked, Booking};
use super::authorize::{authenticate, Caller};
use super::caching::{CacheHeaders, Cacheability};
use super::long_poll;
use super::make_before_break;
use super::present::{mark_opaque, mark_stale, version_from_if_none_match, Presentation};
use super::wait::requested_wait;
use super::watch;
use super::Gateway;
use crate::cache::{Answer, ClientAddr, Names, ParsedRequest};
use crate::config::{RestConfig, RestRewrite};
use crate::face::body::{check_json, read_body_chunks};
use crate::face::switch;
use crate::face::ApiError;
use crate::profiles::query::presented_node;
use crate::store::Polled;
use crate::tls::PeerIdentity;
use crate::xds::rewrite::RestTarget;
use crate::xds::{Endpoint, ResourceType};

/// Query parameters a POST accepts.
const POST_PARAMS: &[&str] = &[
    "wait",
    "fetch-timeout",
    "pretty",
    "format",
    "field-names",
    "watch",
    "changes",
];
/// Query parameters a GET accepts.
const GET_PARAMS: &[&str] = &[
    "wait",
    "fetch-timeout",
    "pretty",
    "format",
    "field-names",
    "node",
    "cluster",
    "profile",
    "metadata",
    "locality",
    "user_agent",
    "names",
    "version",
    "watch",
    "changes",
];

/// Who sent a request: the TLS client's identity, the client's address.
pub(super) type Sender = (Option<Arc<PeerIdentity>>, ClientAddr);

/// Serves one discovery request, a `POST` (`body`) or a `GET` (its query
/// stands for the body), and records its metrics.
pub(super) async fn handle(
    gateway: Arc<Gateway>,
    kind: ResourceType,
    headers: HeaderMap,
    (peer, remote): Sender,
    query: HashMap<String, String>,
    body: Option<Body>,
) -> Response {
    let started = Instant::now();
    let served = async {
        check_params(&query, body.as_ref().map_or(GET_PARAMS, |_| POST_PARAMS))?;
        check_secrets(&gateway, kind)?;
        let caller = authenticate(&gateway, &headers, peer.as_ref())?;
        // A GET's body is never taken for an Envoy's in the rejection
        // bookkeeping, whatever user agent its node (a profile's) says, and
        // never the same subscriber as a client POSTing its node
        // (`ParsedRequest::via_get`).
        let request = match body {
            Some(body) => {
                check_json(&headers)?;
                let config = &gateway.config;
                let chunks =
                    read_body_chunks(body, config.max_body_bytes, config.body_read_timeout).await?;
                // Not joined: see `ParsedRequests::parse_chunks`.
                gateway.parsed.parse_chunks(chunks)?
            }
            None => gateway
                .parsed
                .parse_get(get_body(&gateway, &query, &headers)?)?,
        };
        serve(&gateway, kind, &caller, remote, &headers, &query, request).await
    };
    finish(&gateway, Some(kind), started, served.await)
}

/// One discovery request once its caller is known: parsed, checked and
/// authorized for its node, then served as a watch or as a poll.
async fn serve(
    gateway: &Arc<Gateway>,
    kind: ResourceType,
    caller: &Caller,
    remote: ClientAddr,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    request: Arc<ParsedRequest>,
) -> Result<Response, ApiError> {
    let config = &gateway.config;
    check_type_url(kind, &request)?;
    check_locators(&request)?;
    check_size(config, &request)?;
    // Before the source: a refused node never gets an upstream session.
    caller.may_fetch(kind, request.node_id(), request.node_cluster())?;
    let asked = Asked {
        kind,
        caller,
        request: &request,
        target: rest_target(&config.rewrite, request.user_agent_name(), headers),
        remote,
        changes: switch(query, "changes")?,
        tenant: gateway.tenant(caller),
    };
    let cacheability = Cacheability {
        authenticated: gateway.auth.is_some(),
        secrets: kind == ResourceType::Secrets,
        changes: asked.changes,
        long_poll: false,
        host_selects: config.rewrite.applies_to(request.user_agent_name()),
    };
    if switch(query, "watch")? {
        let vary = cacheability.headers(config.cache_max_age).vary;
        return watch::open(gateway, asked, vary, headers, query).await;
    }
    poll(gateway, asked, cacheability, headers, query).await
}

/// A poll: the source's answer now (a 304 held as a long poll when the
/// client asked to wait), booked, and presented as asked.
async fn poll(
    gateway: &Gateway,
    asked: Asked<'_>,
    mut cacheability: Cacheability,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let config = &gateway.config;
    let wait = requested_wait(query, config.default_wait, config.max_wait)?;
    cacheability.long_poll = !wait.is_zero();
    let cache_headers = cacheability.headers(config.cache_max_age);
    let proto_names = config
        .proto_field_names
        .iter()
        .any(|name| name == asked.kind.short_name());
    let mut presentation = Presentation::from_request(query, headers, proto_names)?;
    presentation.changes = asked.changes;
    let (kind, tenant) = (asked.kind, asked.tenant.as_ref());
    let names = asked.request.names();
    // The store: the state that answers, and how to wait for the next one.
    let mut polled = gateway.source.poll(kind, asked.request, tenant).await?;
    if asked.request.error_detail().is_some() {
        gateway.metrics.client_nack(kind);
    }
    // The cache: a body, or a 304 when the client holds what it would get.
    let answered = asked.answered();
    let (mut answer, mut held_back) = answer_now(gateway, &answered, &polled)?;
    if matches!(answer, Answer::NotModified { .. }) && !wait.is_zero() {
        // Held until the state changes; while a new version is held back
        // (make-before-break), until it is not or the wait runs out.
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let recheck = held_back.is_some().then_some(make_before_break::RECHECK);
            if left.is_zero()
                || !long_poll::hold(gateway, &asked, &mut polled, left, recheck).await?
            {
                break;
            }
            (answer, held_back) = answer_now(gateway, &answered, &polled)?;
            if held_back.is_none() || gateway.drain.is_draining() {
                break;
            }
        }
    }
    let opaque = polled.opaque_types(names);
    let body = matches!(answer, Answer::Body { .. });
    if let Answer::Body {
        json,
        version,
        cached,
    } = answer
    {
        let (json, _) = answered.body(gateway, &polled, json, &version, asked.changes, None)?;
        answer = Answer::Body {
            json,
            version,
            cached,
        };
    }
    // The client book, once: after the body is made, so it lists only
    // what went out, and a `?changes` body above was relative to what the
    // client held before.
    let booking = Booking {
        current: answer.version(),
        cached: held_back.as_deref().unwrap_or(answer.version()),
        body,
        opaque: !opaque.is_empty(),
        served: (body && gateway.make_before_break.on()).then(|| polled.resources()),
    };
    answered.book(gateway, Some(&polled), booking);
    let mut response = respond(gateway, kind, answer, presentation, &cache_headers)?;
    mark_stale(response.headers_mut(), polled.stale_since());
    if polled.holds_uncacheable(names) {
        // The upstream said proxies may not cache a resource in it.
        response.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-store"),
        );
    }
    if body {
        mark_opaque(response.headers_mut(), &opaque);
    }
    Ok(response)
}

/// `polled`'s answer to `answered` now, and the version the cache answered
/// when make-before-break holds it back (the answer is then a 304).
fn answer_now(
    gateway: &Gateway,
    answered: &Answered<'_>,
    polled: &Polled,
) -> Result<(Answer, Option<String>), ApiError> {
    let answer = answered.answer(gateway, polled)?;
    let rule = &gateway.make_before_break;
    Ok(
        match rule.instead(
            &gateway.clients,
            &gateway.metrics,
            answered,
            polled,
            &answer,
        ) {
            Some(not_modified) => (not_modified, Some(answer.version().to_owned())),
            None => (answer, None),
        },
    )
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

/// The longest node id or cluster a request may present: both key sessions and
/// the history and are written in every log line and history line about the
/// node, so one client could fill the log, the history files and the status
/// page with a few huge ids.
pub(crate) const MAX_NODE_ID_BYTES: usize = 512;
/// The longest resource name, user agent name or presented version: they
/// reach logs and history lines too.
pub(crate) const MAX_CLIENT_STRING_BYTES: usize = 2048;

/// What one request may make the gateway hold: its names and its node.
fn check_size(config: &RestConfig, request: &ParsedRequest) -> Result<(), ApiError> {
    if let Names::Named(names) = request.names() {
        if names.len() > config.max_names_per_request {
            return Err(ApiError::BadRequest(format!(
                "the request names {} resources; at most {} per request (--max-names-per-request)",
                names.len(),
                config.max_names_per_request
            )));
        }
        if let Some(long) = names.iter().find(|n| n.len() > MAX_CLIENT_STRING_BYTES) {
            return Err(ApiError::BadRequest(format!(
                "a resource name is {} bytes; at most {MAX_CLIENT_STRING_BYTES}",
                long.len()
            )));
        }
    }
    for (what, value, limit) in [
        ("node id", request.node_id(), MAX_NODE_ID_BYTES),
        ("node cluster", request.node_cluster(), MAX_NODE_ID_BYTES),
        (
            "node user agent name",
            request.user_agent_name(),
            MAX_CLIENT_STRING_BYTES,
        ),
        (
            "version_info",
            request.version_info(),
            MAX_CLIENT_STRING_BYTES,
        ),
    ] {
        if value.len() > limit {
            // Never echoed: it may be the megabyte it is refused for.
            return Err(ApiError::BadRequest(format!(
                "the request's {what} is {} bytes; at most {limit}",
                value.len()
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

/// A request whose names go with more than one set of dynamic parameters
/// (xDS TP2 `resource_locators`) is the gateway's own limit: 501, not the
/// client's mistake. Its sessions subscribe with one set each (TP2 expects
/// a client to send the same set with every name).
fn check_locators(request: &ParsedRequest) -> Result<(), ApiError> {
    if !request.mixes_parameters() {
        return Ok(());
    }
    Err(ApiError::NotImplemented(
        "the request's names go with more than one set of dynamic parameters (resource_names \
         beside resource_locators with dynamic_parameters, or locators with different ones); \
         the gateway serves one set per request: send every name as a locator with the same \
         dynamic_parameters"
            .into(),
    ))
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

/// The DiscoveryRequest JSON a GET stands for, held to `--max-body-bytes`
/// as the POST of it is (a profile's node and `?metadata=` can make it
/// larger than its query; a GET has no 413, so it is a 400).
fn get_body(
    gateway: &Gateway,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Bytes, ApiError> {
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
    let version = query.get("version").cloned().or(tagged).unwrap_or_default();
    let node = presented_node(query, &gateway.profiles, gateway.assembler.codec())?;
    let body = serde_json::json!({
        "version_info": version,
        "resource_names": names,
        "node": node,
    })
    .to_string();
    let limit = gateway.config.max_body_bytes;
    if body.len() > limit {
        return Err(ApiError::BadRequest(format!(
            "the query makes a DiscoveryRequest of {} bytes of JSON; at most {limit} \
             (--max-body-bytes, as for the POST of it)",
            body.len()
        )));
    }
    Ok(Bytes::from(body))
}

/// `served`'s response, counted (`kind`: `None` for a pass-through).
pub(super) fn finish(
    gateway: &Gateway,
    kind: Option<ResourceType>,
    started: Instant,
    served: Result<Response, ApiError>,
) -> Response {
    let response = served.unwrap_or_else(IntoResponse::into_response);
    gateway.metrics.request(
        kind,
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
            presentation.ok(
                json,
                &version,
                &gateway.renditions,
                gateway.assembler.codec(),
            )?
        }
    };
    cache_headers.apply(&mut response);
    Ok(response)
}

/// Where rewritten config sources point, if this client gets them rewritten.
/// Envoy sets `Host` to its xDS cluster name.
/// Where a rewrite applies (see [`RestRewrite::applies_to`]), `Host` then
/// selects the body, which is why it is in `Vary` exactly there.
fn rest_target(rewrite: &RestRewrite, user_agent: &str, headers: &HeaderMap) -> Option<RestTarget> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    (rewrite.applies_to(user_agent) && !host.is_empty()).then(|| RestTarget {
        cluster_name: host.to_owned(),
        refresh_delay: rewrite.refresh_delay,
        request_timeout: rewrite.request_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, RewritePolicy};
    use axum::http::HeaderValue;

    #[test]
    fn rewrite_policy_and_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("xds_cluster"));
        let policy = |policy| RestRewrite {
            policy,
            ..Config::default().rest_rewrite()
        };
        let auto = policy(RewritePolicy::Auto);
        let target = rest_target(&auto, "envoy", &h).unwrap();
        assert_eq!(target.cluster_name, "xds_cluster");
        assert_eq!(target.request_timeout, auto.request_timeout);
        assert!(rest_target(&auto, "curl", &h).is_none());
        assert!(rest_target(&policy(RewritePolicy::Always), "curl", &h).is_some());
        assert!(rest_target(&policy(RewritePolicy::Never), "envoy", &h).is_none());
        assert!(rest_target(&policy(RewritePolicy::Always), "envoy", &HeaderMap::new()).is_none());
    }
}
