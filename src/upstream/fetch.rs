//! Fetch mode as a [`Source`]: each poll answered by the type's unary
//! `Fetch*` RPC (go-control-plane, rust-control-plane), without sessions.
//!
//! - The upstream is asked with the upstream's part of the version the client
//!   presents. "Already up to date" (go-control-plane: gRPC UNKNOWN "skip
//!   fetch ...", rust-control-plane: ALREADY_EXISTS) answers from the state
//!   kept for that version; with none kept (a restart, another replica), the
//!   state is fetched in full once. Either way the cache's rule decides the
//!   304, so go-control-plane's "up to date" for a client whose names changed
//!   still gets it a body.
//! - Concurrent identical polls share one call, and answers are kept for
//!   `--fetch-cache-ttl`, so a burst of identical polls costs one call.
//!   Errors are never kept, nor an answer holding a resource the upstream
//!   marked `do_not_cache` (rendered for it alone, and answered as the
//!   stream modes answer one: no memo, no HTTP cache, no history).
//! - The latest state per (node identity, type, names) is kept while it is
//!   polled: an answer with the same version and content is answered *from*
//!   it, so what it served carries over from call to call. That is what
//!   makes a client presenting the version it was served get a 304 even from
//!   an upstream that always answers in full, and what rejection tracking
//!   needs.
//! - Long polls: nothing pushes in this mode, so a held poll re-fetches
//!   every TTL (at least [`REFETCH_MIN`]) until the version changes or the
//!   wait ends.
//! - Suspected rejections are logged and counted; there is no stream to
//!   NACK them on.
//! - An upstream failure (unreachable, a call past `--first-response-timeout`,
//!   an answer that does not decode or validate) is answered with the
//!   latest state kept for the poll's (identity, type, names), marked stale
//!   since the first failure (the stale header, as the stream modes do), so
//!   a REST client polling through a control plane's restart sees no
//!   failed poll; a poll with nothing kept gets the error (503).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use futures::future::BoxFuture;
use futures::FutureExt;
use moka::future::Cache;
use tonic::Code;
use tracing::{info, warn};

use super::decode::{decode_all_off_thread, Decoded};
use super::wire::SotwResponse;
use super::UpstreamContext;
use crate::cache::{upstream_version, Coverage, IdentityKey, Names, ParsedRequest, TypeState};
use crate::config::Config;
use crate::shares::Tenant;
use crate::store::decode_node;
use crate::store::Namespace;
use crate::store::SessionView;
use crate::store::{
    CallError, Feed, Inspect, PassThrough, PassedThrough, Source, SourceError, Status,
    StreamPlacement,
};
use crate::store::{PollChannel, Polled};
use crate::xds::dynamic_parameters::{names_or_locators, Parameters};
use crate::xds::{Endpoint, ResourceType};

/// How many decoded nodes (one per identity) are kept.
const NODE_MEMO_ENTRIES: u64 = 10_000;
/// How many distinct fetch answers are kept (each only for the TTL).
const ANSWER_MEMO_ENTRIES: u64 = 100_000;
/// How many latest states (per identity, type and names) are kept.
const LATEST_ENTRIES: u64 = 100_000;
/// A held long poll re-fetches at most this often.
pub(super) const REFETCH_MIN: Duration = Duration::from_millis(250);

/// The upstream's answer to one discovery fetch.
#[derive(Debug)]
enum FetchAnswer {
    UpToDate,
    State(Arc<TypeState>),
}

/// What a state is kept under between calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StateKey {
    identity: IdentityKey,
    kind: ResourceType,
    names: Names,
    /// The dynamic parameters the names go with (part of the identity).
    parameters: Arc<Parameters>,
}

/// What an answer is kept under for the TTL (and coalesced by).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AnswerKey {
    state: StateKey,
    version: String,
}

/// The fetch proxy.
#[derive(Debug)]
pub(crate) struct FetchSource {
    inner: Arc<Fetcher>,
}

#[derive(Debug)]
struct Fetcher {
    ctx: Arc<UpstreamContext>,
    /// The names the upstream may answer with.
    namespace: Namespace,
    answers: Cache<AnswerKey, Arc<FetchAnswer>>,
    latest: moka::sync::Cache<StateKey, Arc<TypeState>>,
    nodes: moka::sync::Cache<IdentityKey, Arc<Node>>,
    refetch_every: Duration,
    call_timeout: Duration,
    /// Since when calls have been failing (cleared by the next success).
    failing_since: Mutex<Option<SystemTime>>,
}

impl FetchSource {
    /// Fetches from `ctx`, which may answer with `namespace`'s names.
    pub(crate) fn new(
        ctx: Arc<UpstreamContext>,
        config: &Config,
        namespace: Namespace,
    ) -> FetchSource {
        let ttl = config.fetch_cache_ttl.max(Duration::from_millis(1));
        let idle = config.idle_timeout.max(Duration::from_secs(1));
        FetchSource {
            inner: Arc::new(Fetcher {
                ctx,
                namespace,
                answers: Cache::builder()
                    .max_capacity(ANSWER_MEMO_ENTRIES)
                    .time_to_live(ttl)
                    .build(),
                latest: moka::sync::Cache::builder()
                    .max_capacity(LATEST_ENTRIES)
                    .time_to_idle(idle)
                    .build(),
                nodes: moka::sync::Cache::new(NODE_MEMO_ENTRIES),
                refetch_every: ttl.max(REFETCH_MIN),
                call_timeout: config.first_response_timeout,
                failing_since: Mutex::default(),
            }),
        }
    }
}

impl FetchSource {
    /// What it is, for `/readyz` and error messages.
    fn describe(&self) -> String {
        format!("gRPC upstream {} (fetch)", self.inner.ctx.uri)
    }
}

impl Source for FetchSource {
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        _tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>> {
        let fetcher = &self.inner;
        async move {
            if kind.delta_only() {
                let from = self.describe();
                return Err(SourceError::DeltaOnly { kind, from });
            }
            if request.node_id().is_empty() {
                return Err(SourceError::NoNodeId);
            }
            let identity = request.identity();
            let node = fetcher.node(identity, || {
                decode_node(&fetcher.ctx.intake, request.node_json())
            })?;
            let key = StateKey {
                identity: identity.clone(),
                kind,
                names: request.names().clone(),
                parameters: request.parameters().clone(),
            };
            let presented = upstream_version(request.version_info()).to_owned();
            let fetched = tokio::time::timeout(
                fetcher.call_timeout,
                fetcher.current(&key, &node, &presented),
            )
            .await
            .map_err(|_| SourceError::NoAnswer {
                from: "the upstream",
                kind,
                within: fetcher.call_timeout,
            })
            .and_then(|answer| answer.map_err(SourceError::from));
            let (current, stale_since) = match fetched {
                Ok(state) => {
                    fetcher.succeeded();
                    (state, None)
                }
                // The last good state, while the upstream fails.
                Err(err) => match fetcher.latest.get(&key) {
                    Some(latest) => (latest, Some(fetcher.failed(&err))),
                    None => return Err(err),
                },
            };
            let feed = FetchChannel {
                fetcher: fetcher.clone(),
                key,
                node,
                stale_since,
            };
            Ok(Polled::new(current, Box::new(feed)))
        }
        .boxed()
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.inner.ctx.pass_through(call).boxed()
    }
}

/// Sessionless: readiness only.
impl Inspect for FetchSource {
    fn status(&self) -> Status {
        Status {
            ready: self.inner.ctx.has_answered(),
            description: self.describe(),
            ..Status::default()
        }
    }

    fn states_of(&self, _node_id: &str) -> Vec<Arc<crate::cache::TypeState>> {
        Vec::new()
    }

    fn placements_of(&self, _node_id: &str) -> Vec<StreamPlacement> {
        Vec::new()
    }

    fn sessions(&self) -> Vec<SessionView> {
        Vec::new()
    }
}

/// Nothing runs between polls.
impl Feed for FetchSource {
    fn close(&self) {}
}

impl Fetcher {
    /// A call succeeded: the upstream answers again.
    fn succeeded(&self) {
        let mut since = crate::sync::lock(&self.failing_since);
        if since.take().is_some() {
            info!(upstream = %self.ctx.uri, "fetch: the upstream answers again");
        }
    }

    /// A call failed with `err`: since when calls have been failing.
    fn failed(&self, err: &SourceError) -> SystemTime {
        let mut since = crate::sync::lock(&self.failing_since);
        *since.get_or_insert_with(|| {
            warn!(upstream = %self.ctx.uri, %err, "fetch: the upstream fails; polls get the last good state, marked stale");
            SystemTime::now()
        })
    }

    /// The node of `identity`, decoded from `node()` the first time.
    fn node(
        &self,
        identity: &IdentityKey,
        node: impl FnOnce() -> Result<Node, SourceError>,
    ) -> Result<Arc<Node>, SourceError> {
        if let Some(hit) = self.nodes.get(identity) {
            return Ok(hit);
        }
        let node = Arc::new(node()?);
        self.nodes.insert(identity.clone(), node.clone());
        Ok(node)
    }

    /// The state that answers a poll of `key` whose client holds upstream
    /// version `presented`.
    async fn current(
        &self,
        key: &StateKey,
        node: &Arc<Node>,
        presented: &str,
    ) -> Result<Arc<TypeState>, CallError> {
        if let FetchAnswer::State(state) = &*self.fetch(key, node, presented).await? {
            // A memoised answer can be older than what a later call for the
            // same key brought (another client presented another version):
            // every call that brings a state leaves it as the latest, so the
            // latest is never older, and a version never goes back.
            return Ok(self.latest.get(key).unwrap_or_else(|| state.clone()));
        }
        if let Some(latest) = self.latest.get(key).filter(|l| l.version == presented) {
            return Ok(latest);
        }
        if !presented.is_empty() {
            // Up to date, but nothing kept to show for it: ask in full.
            if let FetchAnswer::State(state) = &*self.fetch(key, node, "").await? {
                return Ok(state.clone());
            }
        }
        // go-control-plane has version "" for a type missing from its
        // snapshot, so a poll presenting nothing is "up to date": there is
        // nothing.
        let empty = Arc::new(TypeState::new(
            key.kind,
            String::new(),
            String::new(),
            BTreeMap::new(),
            Coverage::default(),
        ));
        self.latest.insert(key.clone(), empty.clone());
        Ok(empty)
    }

    /// Fetches `key` presenting `version`; coalesced with identical
    /// concurrent requests and memoised for the TTL.
    async fn fetch(
        &self,
        key: &StateKey,
        node: &Arc<Node>,
        version: &str,
    ) -> Result<Arc<FetchAnswer>, CallError> {
        let answer_key = AnswerKey {
            state: key.clone(),
            version: version.to_owned(),
        };
        // Built only on a memo miss: the node (hundreds of extensions) is
        // not copied for the polls a memoised answer serves.
        let call = async {
            let mut names: Vec<String> = match &key.names {
                Names::Wildcard => Vec::new(),
                Names::Named(set) => set.iter().cloned().collect(),
            };
            if names.is_empty() && !key.parameters.is_empty() {
                // The wildcard, with parameters, is the locator "*".
                names.push("*".to_owned());
            }
            let (names, resource_locators) = names_or_locators(names, &key.parameters);
            let request = DiscoveryRequest {
                version_info: version.to_owned(),
                node: Some((**node).clone()),
                resource_names: names,
                resource_locators,
                type_url: key.kind.type_url().to_owned(),
                ..Default::default()
            };
            self.call(key, request).await
        };
        let answer = self
            .answers
            .try_get_with(answer_key.clone(), call)
            .await
            .map_err(|e| (*e).clone())?;
        if matches!(&*answer, FetchAnswer::State(state) if !state.uncacheable.is_empty()) {
            // The upstream said proxies may not cache a resource in it: the
            // polls that shared the call have it, no later one does.
            self.answers.invalidate(&answer_key).await;
        }
        Ok(answer)
    }

    async fn call(
        &self,
        key: &StateKey,
        request: DiscoveryRequest,
    ) -> Result<Arc<FetchAnswer>, CallError> {
        let kind = key.kind;
        let mut response: SotwResponse =
            match self.ctx.unary(Endpoint::Discovery(kind), request).await {
                Ok(response) => response,
                Err(CallError::Upstream { code, message, .. }) if is_up_to_date(code, &message) => {
                    self.ctx.mark_answered();
                    return Ok(Arc::new(FetchAnswer::UpToDate));
                }
                Err(err) => return Err(err),
            };
        self.ctx.mark_answered();
        let version = std::mem::take(&mut response.version_info);
        let nonce = std::mem::take(&mut response.nonce);
        let (resources, uncacheable) = decode_all_off_thread(
            &self.ctx.intake,
            kind,
            response,
            None,
            key.parameters.clone(),
        )
        .await
        .and_then(Decoded::standalone)
        .map(|(set, uncacheable)| (self.ctx.rendered_now(set), uncacheable))
        .and_then(
            |(resources, uncacheable)| match self.namespace.first_foreign(resources.keys()) {
                Some(foreign) => Err(foreign.into()),
                None => Ok((resources, uncacheable)),
            },
        )
        .map_err(|e| {
            if e.breaks_rules() {
                self.ctx.metrics.invalid_resource(kind);
            }
            CallError::BadAnswer(e.to_string())
        })?;
        if let Some(latest) = self.latest.get(key) {
            let same = latest.version == version
                && *latest.uncacheable == uncacheable
                && latest.resources.len() == resources.len()
                && latest
                    .resources
                    .iter()
                    .zip(resources.iter())
                    .all(|((n1, r1), (n2, r2))| n1 == n2 && r1.digest == r2.digest);
            if same {
                return Ok(Arc::new(FetchAnswer::State(latest)));
            }
        }
        let coverage = Coverage {
            wildcard: true,
            names: Default::default(),
        };
        let state = TypeState::new(kind, version, nonce, resources, coverage);
        let state = Arc::new(match uncacheable.is_empty() {
            true => state,
            false => state.with_uncacheable(Arc::new(uncacheable)),
        });
        self.latest.insert(key.clone(), state.clone());
        Ok(Arc::new(FetchAnswer::State(state)))
    }
}

/// A poll answered by a fetch: long polls re-fetch, rejections are counted.
struct FetchChannel {
    fetcher: Arc<Fetcher>,
    key: StateKey,
    node: Arc<Node>,
    /// Set when the poll was answered with the last good state.
    stale_since: Option<SystemTime>,
}

impl PollChannel for FetchChannel {
    fn next_change<'a>(
        &'a mut self,
        seen: &'a Arc<TypeState>,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Arc<TypeState>>> {
        async move {
            let deadline = tokio::time::Instant::now() + wait;
            let fetcher = &self.fetcher;
            loop {
                let next = (tokio::time::Instant::now() + fetcher.refetch_every).min(deadline);
                tokio::time::sleep_until(next).await;
                if next >= deadline {
                    return None;
                }
                match fetcher.fetch(&self.key, &self.node, &seen.version).await {
                    Ok(answer) => match &*answer {
                        FetchAnswer::State(state) if state.version != seen.version => {
                            return Some(state.clone())
                        }
                        _ => {}
                    },
                    // Answer the poll with what it has; the next poll will
                    // see the failure.
                    Err(_) => return None,
                }
            }
        }
        .boxed()
    }

    fn stale_since(&self) -> Option<SystemTime> {
        self.stale_since
    }
}

/// go-control-plane: UNKNOWN "skip fetch: version up to date";
/// rust-control-plane: ALREADY_EXISTS.
fn is_up_to_date(code: Code, message: &str) -> bool {
    code == Code::AlreadyExists || (code == Code::Unknown && message.starts_with("skip fetch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_date_in_both_styles() {
        assert!(is_up_to_date(
            Code::Unknown,
            "skip fetch: version up to date"
        ));
        assert!(is_up_to_date(Code::AlreadyExists, "anything"));
        assert!(!is_up_to_date(Code::Unknown, "boom"));
        assert!(!is_up_to_date(Code::Unavailable, "skip fetch"));
    }
}
