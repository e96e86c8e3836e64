//! Fetch mode as a [`Feeder`]: each session's states come from the type's
//! unary `Fetch*` RPC (go-control-plane, rust-control-plane), asked when a
//! poll reads the type ([`Command::Freshen`]) rather than pushed.
//!
//! - A session is the upstream's client, as a stream's is: it asks for the
//!   names its clients subscribe to, with its node, presenting the version
//!   it holds. "Already up to date" (go-control-plane: gRPC UNKNOWN "skip
//!   fetch ...", rust-control-plane: ALREADY_EXISTS) keeps that state.
//!   When the names changed since the state was fetched, it presents no
//!   version: go-control-plane judges "up to date" by the version alone.
//!   Either way the cache's rule decides a client's 304.
//! - The session's task makes one call at a time, and the polls that asked
//!   while it ran share it, whatever it brought (a failure too). What a
//!   call brought then stands for `--fetch-cache-ttl`: polls inside it read
//!   the state as it is, so a burst of polls costs one call. A failure does
//!   not stand, nor a state holding a resource the upstream marked
//!   `do_not_cache` (fetched again for each later poll).
//! - An answer with the same version and content as the state held is not
//!   published again: what the state served carries over from call to
//!   call, so a client presenting the version it was served gets a 304 even
//!   from an upstream that always answers in full.
//! - Long polls: a held poll asks for the type again every TTL (at least
//!   [`REFETCH_MIN`]) until the version changes or the wait ends.
//! - Suspected rejections are logged and counted; there is no stream to
//!   NACK them on.
//! - An upstream failure (unreachable, a call past `--first-response-timeout`,
//!   an answer that does not decode or validate) leaves the session's state
//!   in service, marked stale since the first failure (the stale header, as
//!   the stream modes do), so a REST client polling through a control
//!   plane's restart sees no failed poll; a poll with nothing to serve gets
//!   the error (503).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::Code;
use tracing::warn;

use super::decode::{decode_all_off_thread, Decoded};
use super::outbound::Outbound;
use super::wire::SotwResponse;
use super::UpstreamContext;
use crate::cache::{Coverage, TypeState};
use crate::config::Config;
use crate::log_escape::Escaped;
use crate::store::{
    CallError, Command, Feeder, Namespace, PassThrough, PassedThrough, Phase, Publisher,
    SourceError,
};
use crate::xds::dynamic_parameters::names_or_locators;
use crate::xds::{Endpoint, ResourceType};

/// A held long poll asks for its type again at most this often.
const REFETCH_MIN: Duration = Duration::from_millis(250);

/// Feeds sessions by the upstream's unary `Fetch*` calls.
#[derive(Debug)]
pub struct FetchFeeder {
    fetcher: Arc<Fetcher>,
}

#[derive(Debug)]
struct Fetcher {
    ctx: Arc<UpstreamContext>,
    /// The names the upstream may answer with.
    namespace: Namespace,
    /// How long what a fetch brought stands (`--fetch-cache-ttl`).
    ttl: Duration,
    refetch_every: Duration,
    call_timeout: Duration,
}

impl FetchFeeder {
    /// Fetches from `ctx`, which may answer with `namespace`'s names.
    pub fn new(ctx: Arc<UpstreamContext>, config: &Config, namespace: Namespace) -> FetchFeeder {
        let ttl = config.fetch_cache_ttl.max(Duration::from_millis(1));
        FetchFeeder {
            fetcher: Arc::new(Fetcher {
                ctx,
                namespace,
                ttl,
                refetch_every: ttl.max(REFETCH_MIN),
                call_timeout: config.first_response_timeout,
            }),
        }
    }
}

impl Feeder for FetchFeeder {
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        tokio::spawn(run(self.fetcher.clone(), session, commands))
    }

    fn freshened_every(&self) -> Option<Duration> {
        Some(self.fetcher.refetch_every)
    }

    fn is_ready(&self) -> bool {
        self.fetcher.ctx.has_answered()
    }

    fn describe(&self) -> String {
        format!("gRPC upstream {} (fetch)", self.fetcher.ctx.uri)
    }

    fn upstream_name(&self) -> Option<&str> {
        Some(&self.fetcher.ctx.name)
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.fetcher.ctx.pass_through(call).boxed()
    }
}

/// What the last fetch of a type brought.
#[derive(Debug)]
struct Fetched {
    /// When the call ended.
    ended: Instant,
    /// The subscription it asked for.
    asked: Coverage,
    outcome: Result<(), Failure>,
}

impl Fetched {
    /// Whether it answers a poll asking at `asked_at` for `asked` now: when
    /// the poll asked during the call (concurrent polls share it, failed or
    /// not, `do_not_cache` or not), or, for a state that may be kept,
    /// within `ttl` of it.
    fn answers(&self, asked_at: Instant, asked: &Coverage, keepable: bool, ttl: Duration) -> bool {
        self.asked == *asked
            && (asked_at <= self.ended
                || (self.outcome.is_ok()
                    && keepable
                    && Instant::now().saturating_duration_since(self.ended) < ttl))
    }
}

/// Why a fetch failed, kept to answer the polls that shared the call.
#[derive(Debug, Clone, thiserror::Error)]
enum Failure {
    /// No answer within the first-response timeout.
    #[error("no answer to the fetch within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Call(CallError),
}

impl Failure {
    fn to_error(&self, kind: ResourceType) -> SourceError {
        match self {
            Failure::Timeout(within) => SourceError::NoAnswer {
                from: "the upstream",
                kind,
                within: *within,
            },
            Failure::Call(err) => SourceError::Upstream(err.clone()),
        }
    }
}

/// The upstream's answer to one fetch.
#[derive(Debug)]
enum FetchAnswer {
    UpToDate,
    State(TypeState),
}

/// Feeds `session` until it closes: each [`Command::Freshen`] is answered
/// by what stands of the type's last fetch, or by a new one.
async fn run(
    fetcher: Arc<Fetcher>,
    session: Publisher,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut fetched: BTreeMap<ResourceType, Fetched> = BTreeMap::new();
    while let Some(command) = commands.recv().await {
        match command {
            // The next poll's freshen sees the names.
            Command::Resubscribe(_) => {}
            Command::Nack { kind, message, .. } => {
                warn!(%kind, message = %Escaped(&message), "suspected rejection (no stream to NACK it on: fetch mode)");
            }
            Command::Freshen { kind, reply } => {
                let Some(asked) = session.subscription(kind) else {
                    reply.send(Ok(()));
                    continue;
                };
                let keepable = session
                    .state(kind)
                    .is_none_or(|state| state.uncacheable.is_empty());
                let last = fetched.get(&kind);
                let outcome = match last {
                    Some(last) if last.answers(reply.asked_at(), &asked, keepable, fetcher.ttl) => {
                        last.outcome.clone()
                    }
                    _ => {
                        let same_names = last.is_some_and(|last| last.asked == asked);
                        let outcome = fetcher.freshen(&session, kind, &asked, same_names).await;
                        fetched.insert(
                            kind,
                            Fetched {
                                ended: Instant::now(),
                                asked,
                                outcome: outcome.clone(),
                            },
                        );
                        outcome
                    }
                };
                reply.send(outcome.map_err(|failure| failure.to_error(kind)));
            }
        }
    }
}

impl Fetcher {
    /// Fetches `asked` of `kind` for `session` and publishes what is new;
    /// a failure marks what the session serves stale.
    async fn freshen(
        &self,
        session: &Publisher,
        kind: ResourceType,
        asked: &Coverage,
        same_names: bool,
    ) -> Result<(), Failure> {
        let held = session.state(kind);
        // go-control-plane judges "up to date" by the version alone: with
        // other names, the version held says nothing of them.
        let presented = held.as_ref().filter(|_| same_names);
        let presented = presented
            .map(|state| state.version.clone())
            .unwrap_or_default();
        let answer = tokio::time::timeout(
            self.call_timeout,
            self.fetch(session, kind, asked, &presented, held.clone()),
        )
        .await;
        let failure = match answer {
            Err(_) => Failure::Timeout(self.call_timeout),
            Ok(Err(err)) => Failure::Call(err),
            Ok(Ok(answer)) => {
                session.upstream().phase(Phase::Open);
                session.upstream().fresh(None);
                match answer {
                    FetchAnswer::State(state) => {
                        if !held.is_some_and(|held| same_content(&held, &state)) {
                            session.publish(state);
                        }
                    }
                    FetchAnswer::UpToDate if held.is_none() || presented.is_empty() => {
                        // go-control-plane has version "" for a type missing
                        // from its snapshot, so a fetch presenting nothing is
                        // "up to date": there is nothing.
                        session.publish(TypeState::new(
                            kind,
                            String::new(),
                            String::new(),
                            BTreeMap::new(),
                            everything(),
                        ));
                    }
                    FetchAnswer::UpToDate => {}
                }
                return Ok(());
            }
        };
        let reason = failure.to_string();
        warn!(upstream = %self.ctx.uri, node = %Escaped(&session.node().id), %kind, reason = %Escaped(&reason), "fetch failed; polls get the state held, marked stale");
        session.upstream().phase(Phase::Connecting);
        session.stream_failed(None, reason);
        Err(failure)
    }

    /// One `Fetch*` call for `asked` of `kind` with `session`'s node,
    /// presenting `version`; the answer decoded against `held`.
    async fn fetch(
        &self,
        session: &Publisher,
        kind: ResourceType,
        asked: &Coverage,
        version: &str,
        held: Option<Arc<TypeState>>,
    ) -> Result<FetchAnswer, CallError> {
        let parameters = session.node().parameters().clone();
        // A wildcard asks for everything, the names wanted beside it too:
        // none is sent with it (a SotW stream's `request_names` writes the stream
        // form, `*` and the names, which a `Fetch*` need not take).
        let mut names: Vec<String> = asked
            .names
            .iter()
            .filter(|_| !asked.wildcard)
            .cloned()
            .collect();
        if names.is_empty() && !parameters.is_empty() {
            // The wildcard, with parameters, is the locator "*".
            names.push("*".to_owned());
        }
        let (resource_names, resource_locators) = names_or_locators(names, &parameters);
        let request = DiscoveryRequest {
            version_info: version.to_owned(),
            resource_names,
            resource_locators,
            type_url: kind.type_url().to_owned(),
            ..Default::default()
        };
        let request = Outbound::new(request, Some(session.node().bytes()));
        let mut response: SotwResponse =
            match self.ctx.unary(Endpoint::Discovery(kind), request).await {
                Ok(response) => response,
                Err(CallError::Upstream { code, message, .. }) if is_up_to_date(code, &message) => {
                    self.ctx.mark_answered();
                    return Ok(FetchAnswer::UpToDate);
                }
                Err(err) => return Err(err),
            };
        self.ctx.mark_answered();
        let version = std::mem::take(&mut response.version_info);
        let nonce = std::mem::take(&mut response.nonce);
        let (resources, uncacheable) =
            decode_all_off_thread(&self.ctx.intake, kind, response, held, parameters)
                .await
                .and_then(Decoded::standalone)
                .map(|(set, uncacheable)| (self.ctx.rendered_now(set), uncacheable))
                .and_then(|(resources, uncacheable)| {
                    let foreign = self.namespace.first_foreign(resources.keys());
                    foreign.map_or(Ok((resources, uncacheable)), |foreign| Err(foreign.into()))
                })
                .map_err(|e| {
                    if e.breaks_rules() {
                        self.ctx.metrics.invalid_resource(kind);
                    }
                    CallError::BadAnswer(e.to_string())
                })?;
        let state = TypeState::new(kind, version, nonce, resources, everything());
        Ok(FetchAnswer::State(match uncacheable.is_empty() {
            true => state,
            false => state.with_uncacheable(Arc::new(uncacheable)),
        }))
    }
}

/// A fetch's answer holds every name asked that exists.
fn everything() -> Coverage {
    Coverage {
        wildcard: true,
        names: Default::default(),
    }
}

/// Whether `fetched` holds what `held` does: the version, the resources
/// (by digest) and the ones not to be cached.
fn same_content(held: &TypeState, fetched: &TypeState) -> bool {
    held.version == fetched.version
        && held.uncacheable == fetched.uncacheable
        && held.resources.len() == fetched.resources.len()
        && held
            .resources
            .iter()
            .zip(fetched.resources.iter())
            .all(|((n1, r1), (n2, r2))| n1 == n2 && r1.digest == r2.digest)
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
