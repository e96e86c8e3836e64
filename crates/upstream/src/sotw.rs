//! The SotW feeder: one `StreamAggregatedResources` stream per session,
//! driven by [`super::stream`].
//!
//! The protocol sends the session's subscriptions (node on the first request
//! of each stream), decodes and renders every response off the async threads,
//! publishes what decoded into the session and ACKs it, NACKs with an
//! `error_detail` what did not (keeping the last good state), and forwards
//! suspected REST rejections as NACKs. On a new stream it resubscribes,
//! presenting the versions it holds.
//!
//! Grouping is per type, as the xDS transport protocol defines it: a
//! Listener or Cluster response is the type's complete state; a response of
//! any other type updates the resources it names and leaves the others as
//! they were (Istio sends only the added route configuration when an RDS
//! subscription grows, only the changed services on an incremental EDS
//! push). Such a resource leaves the session's state when its subscription
//! no longer wants it, or when its TTL runs out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::time::Instant;
use tracing::{debug, info};

use super::decode::{decode_all_off_thread, reported_errors, Decoded, Rejection};
use super::name_check::AskingAlone;
use super::outbound::Outbound;
use super::replies::Replies;
use super::stream::{nack_detail, Protocol};
use super::ttl::Expiries;
use super::wire::SotwResponse;
use super::UpstreamContext;
use crate::cache::{
    Coverage, IntoResourceSet, ReportedError, Resource, ResourceMap, ResourceSet, TypeState,
    NOT_FOUND,
};
use crate::log_escape::Escaped;
use crate::store::{Namespace, Publisher};
use crate::xds::dynamic_parameters::names_or_locators;
use crate::xds::ResourceType;

/// Entries kept per type and stream (see [`SentLog`]); past it the two
/// oldest unconfirmed entries merge. At least 3.
const SENT_LOG_MAX: usize = 64;

/// One entry of a [`SentLog`]: a subscription sent, or several sent one
/// after the other, merged to keep the log bounded.
#[derive(Debug, Clone, Default)]
struct Sent {
    /// What each of them asked for (their intersection): what a response
    /// answering any of them surely answers.
    every: Coverage,
    /// What any of them asked for (their union): what a response answering
    /// any of them may hold.
    any: Coverage,
    /// How many subscriptions it stands for.
    count: usize,
}

impl Sent {
    /// One entry standing for `self` and the `later` one sent after it.
    fn merge(self, later: Sent) -> Sent {
        Sent {
            every: intersection(self.every, &later.every),
            any: union(self.any, &later.any),
            count: self.count + later.count,
        }
    }
}

/// What both `a` and `b` ask for (possibly less when one is a wildcard with
/// names: those are dropped, which only under-claims).
fn intersection(mut a: Coverage, b: &Coverage) -> Coverage {
    a.wildcard &= b.wildcard;
    if !b.wildcard {
        a.names.retain(|n| b.names.contains(n));
    }
    a
}

/// What `a` or `b` asks for.
fn union(mut a: Coverage, b: &Coverage) -> Coverage {
    a.wildcard |= b.wildcard;
    a.names.extend(b.names.iter().cloned());
    a
}

/// Names to put in a SotW request: `*` plus the names when a wildcard
/// and names are both wanted; for a plain wildcard, `*` on a stream
/// that `named` resources of the type before (where an empty list
/// unsubscribes from everything: "once the client does explicitly
/// subscribe to a resource name ... clearing the list of subscribed
/// resources is interpreted as an unsubscription"), else the empty
/// list of the legacy wildcard, which every server takes.
fn request_names(coverage: &Coverage, named: bool) -> Vec<String> {
    let names: Vec<String> = coverage.names.iter().cloned().collect();
    match (coverage.wildcard, names.is_empty()) {
        (true, false) => std::iter::once("*".to_owned()).chain(names).collect(),
        (true, true) if named => vec!["*".to_owned()],
        _ => names,
    }
}

/// The subscriptions sent for one type on one stream, for telling which of
/// them a response answers.
///
/// SotW does not link a response to the request it answers: a response can
/// answer an older subscription than the one sent last (two clients of one
/// node adding names in quick succession), so labelling it with the latest
/// would let a waiting request take a response that never had its names.
/// A response answers the newest subscription the server has seen; it
/// proves the server saw subscription `i` when it holds a name that no
/// entry before `i` asked for (a server sends only names asked for), or
/// when it repeats the last version and is no TTL refresh (a server sends
/// an unchanged version only for a subscription change or a TTL refresh),
/// which then answers the subscription after the newest one proven seen.
/// The first response of the type answers the first entry at least:
/// nothing was asked before it.
///
/// No subscription sent is ever forgotten: dropping an unconfirmed one
/// would let the response to it prove a later one seen. When the log is
/// full the two oldest unconfirmed entries merge instead; a merged entry
/// proven seen is known seen only as far as its first subscription.
#[derive(Debug, Default)]
struct SentLog {
    /// Entries, oldest first; `[0]` is the newest known to have been seen
    /// by the server once `answered`, the rest are unconfirmed.
    subs: Vec<Sent>,
    answered: bool,
    last_version: Option<String>,
}

impl SentLog {
    fn push(&mut self, coverage: Coverage) {
        self.subs.push(Sent {
            every: coverage.clone(),
            any: coverage,
            count: 1,
        });
        if self.subs.len() > SENT_LOG_MAX {
            let first = usize::from(self.answered);
            let later = self.subs.remove(first + 1);
            let oldest = std::mem::take(&mut self.subs[first]);
            self.subs[first] = oldest.merge(later);
        }
    }

    /// What a response of `version` holding `names` surely answers, and
    /// records it: the names (and wildcard) wanted in every subscription from
    /// the newest one it proves seen to the latest. `refresh` says the
    /// response may be a TTL refresh (it carries TTLs or heartbeats), whose
    /// version proves nothing.
    fn answer<'a>(
        &mut self,
        version: &str,
        names: impl IntoIterator<Item = &'a str>,
        refresh: bool,
    ) -> Coverage {
        let repeat = !refresh && self.last_version.as_deref().is_none_or(|v| v == version);
        self.last_version = Some(version.to_owned());
        let seen = self.proven_seen(names, repeat);
        if seen >= self.subs.len() {
            return Coverage::default();
        }
        self.subs.drain(..seen);
        self.answered = true;
        self.covered()
    }

    /// Index of the newest entry a response holding `names` proves the
    /// server saw (`repeat`: it repeats the last version, see [`SentLog`]).
    /// The names are read only until the newest entry is proven: with one
    /// subscription known seen and none newer (a push), not at all.
    fn proven_seen<'a>(&self, names: impl IntoIterator<Item = &'a str>, repeat: bool) -> usize {
        // The subscription after the newest proven seen: the next entry,
        // unless that one is still inside a merged entry.
        let next = usize::from(self.answered && self.subs.first().is_some_and(|s| s.count == 1));
        let by_version = if repeat && next < self.subs.len() {
            next
        } else {
            0
        };
        let newest = self.subs.len().saturating_sub(1);
        let mut seen = by_version;
        let mut names = names.into_iter();
        while seen < newest {
            let Some(name) = names.next() else { break };
            // A response holding `name` answers the first entry that may have
            // asked for it, or a later one.
            let first = self.subs.iter().position(|sent| sent.any.wants(name));
            seen = seen.max(first.unwrap_or(0));
        }
        seen
    }

    /// What every entry asked for: what the server surely answered, whichever
    /// of them its response is for.
    fn covered(&self) -> Coverage {
        let mut entries = self.subs.iter();
        let Some(first) = entries.next() else {
            return Coverage::default();
        };
        entries.fold(first.every.clone(), |covered, later| {
            intersection(covered, &later.every)
        })
    }
}

/// What belongs to one stream.
#[derive(Debug, Default)]
struct StreamState {
    /// Subscription sent last per type.
    sent: BTreeMap<ResourceType, Coverage>,
    /// Every subscription sent per type, to label responses with.
    sent_log: BTreeMap<ResourceType, SentLog>,
    /// Nonce of the latest response per type on this stream. Nonces are per
    /// stream: a new stream starts with none, as Envoy's own client does (a
    /// strict server ignores a request carrying a nonce it never sent).
    nonces: BTreeMap<ResourceType, String>,
    node_sent: bool,
    /// Types whose requests named resources on this stream: a wildcard
    /// alone is `*` there, never the empty list (which unsubscribes).
    named: BTreeSet<ResourceType>,
}

/// The SotW protocol of one session.
pub struct Sotw {
    ctx: Arc<UpstreamContext>,
    session: Publisher,
    /// The names this session's upstream may send.
    namespace: Namespace,
    /// Version accepted last per type, across streams: what ACKs and a new
    /// stream present.
    acked: BTreeMap<ResourceType, String>,
    stream: StreamState,
    /// When resources sent with a TTL expire, across streams.
    expiries: Expiries,
    /// Types whose next response replaces the state whatever its grouping:
    /// the first from an upstream switched to, which knows nothing of what
    /// the last one sent.
    replace_next: BTreeSet<ResourceType>,
    /// What the replies sent upstream record.
    replies: Replies,
}

impl AskingAlone for Sotw {
    type Ask = Outbound<DiscoveryRequest>;
    type Answer = SotwResponse;

    fn asking_only(
        kind: ResourceType,
        names: Vec<String>,
        parameters: &crate::xds::dynamic_parameters::Parameters,
        node: crate::store::NodeBytes,
    ) -> Outbound<DiscoveryRequest> {
        let (resource_names, resource_locators) = names_or_locators(names, parameters);
        let request = DiscoveryRequest {
            resource_names,
            resource_locators,
            type_url: kind.type_url().to_owned(),
            ..Default::default()
        };
        Outbound::new(request, Some(node))
    }
}

impl Protocol for Sotw {
    type Request = Outbound<DiscoveryRequest>;
    type Response = SotwResponse;
    const MODE: &'static str = "sotw";
    const AGGREGATED_PATH: &'static str = super::connection::probe::SOTW_ADS;
    const DELTA: bool = false;

    fn new(ctx: Arc<UpstreamContext>, session: Publisher, namespace: Namespace) -> Sotw {
        Sotw {
            replies: Replies::new(Self::MODE, ctx.metrics.clone(), session.clone()),
            ctx,
            session,
            namespace,
            acked: BTreeMap::new(),
            stream: StreamState::default(),
            expiries: Expiries::default(),
            replace_next: BTreeSet::new(),
        }
    }

    fn reset_stream(&mut self) {
        self.stream = StreamState::default();
    }

    fn switch_upstream(&mut self) {
        self.acked.clear();
        self.replace_next = ResourceType::all().into_iter().collect();
    }

    fn subscribe(&mut self, kind: ResourceType) -> Option<Outbound<DiscoveryRequest>> {
        match self.session.subscription(kind) {
            None => {
                self.stream.sent.remove(&kind)?;
                if !self.stream.named.contains(&kind) {
                    // Only the legacy wildcard (the empty list) was sent: in
                    // SotW nothing withdraws it, so what still arrives is taken.
                    debug!(%kind, "interest dropped; a legacy wildcard stays subscribed");
                    return None;
                }
                // Nobody wants the type any more: after names, the empty list
                // unsubscribes (a returning client subscribes again).
                debug!(%kind, "interest dropped: unsubscribing");
            }
            Some(coverage) if self.stream.sent.get(&kind) == Some(&coverage) => return None,
            Some(coverage) => {
                self.drop_unwanted(kind, &coverage);
                self.stream.sent.insert(kind, coverage.clone());
                self.stream.sent_log.entry(kind).or_default().push(coverage);
            }
        }
        let version = self.acked.get(&kind).cloned().unwrap_or_default();
        let nonce = self.stream.nonces.get(&kind).cloned().unwrap_or_default();
        Some(self.request(kind, version, nonce, None))
    }

    fn nack(
        &mut self,
        kind: ResourceType,
        presented: String,
        message: String,
    ) -> Option<Outbound<DiscoveryRequest>> {
        let Some(nonce) = self.stream.nonces.get(&kind).cloned() else {
            // Nothing of the type arrived on this stream: no response to NACK.
            debug!(%kind, "no response to NACK on this stream");
            return None;
        };
        self.replies
            .nack(kind, &presented, &presented, &nonce, &message);
        Some(self.request(kind, presented, nonce, Some(message)))
    }

    fn type_url(response: &SotwResponse) -> &str {
        &response.type_url
    }

    fn refuse_unasked(response: &SotwResponse, message: String) -> Outbound<DiscoveryRequest> {
        let request = DiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: Some(nack_detail(message)),
            ..Default::default()
        };
        Outbound::new(request, None)
    }

    /// Decodes a response; publishes and ACKs it, or NACKs it whole.
    async fn response(
        &mut self,
        kind: ResourceType,
        response: SotwResponse,
    ) -> Option<Outbound<DiscoveryRequest>> {
        self.ctx.intake.note_answer(response.frame_len());
        let version = response.version_info.clone();
        let nonce = response.nonce.clone();
        self.stream.nonces.insert(kind, nonce.clone());
        let reported = reported_errors(&response.resource_errors);
        let previous = self.session.state(kind);
        let held_errors = previous.as_ref().map(|p| p.errors.clone());
        let held_uncacheable = previous.as_ref().map(|p| p.uncacheable.clone());
        let parameters = self.session.node().parameters().clone();
        let decoded =
            decode_all_off_thread(&self.ctx.intake, kind, response, previous, parameters).await;
        if let Ok(d) = &decoded {
            self.ctx.metrics.resources_taken(kind, d.decoded, d.reused);
        }
        // A TTL refresh may repeat the version without a subscription change.
        let refresh = decoded
            .as_ref()
            .is_ok_and(|d| !d.heartbeats.is_empty() || !d.ttls.is_empty());
        let owned = |d: Decoded| match self.namespace.first_foreign(d.resources.keys()) {
            Some(foreign) => Err(Rejection::from(foreign)),
            None => Ok(d),
        };
        match decoded
            .and_then(owned)
            .and_then(|d| self.heartbeats(kind, &version, d))
        {
            Ok(Decoded {
                resources: answer,
                ttls,
                mut uncacheable,
                ..
            }) => {
                let resources = self.state_after(kind, &answer);
                // NOT_FOUND removes what a response grouped by resource
                // leaves held (one holding the whole state has left it out).
                let resources = without_not_found(resources, &answer, &reported);
                let resources = self.ctx.rendered_now(resources);
                if !ttls.is_empty() || self.expiries.tracks(kind) {
                    let now = Instant::now();
                    for name in answer.keys() {
                        self.expiries
                            .arrived(kind, name, ttls.get(name).copied(), now);
                    }
                    self.expiries
                        .retain(kind, |name| resources.contains_key(name));
                }
                debug!(%kind, version = %Escaped(&version), count = answer.len(), held = resources.len(), "accepted");
                let names = answer.keys().map(String::as_str);
                let coverage = match self.stream.sent.get(&kind) {
                    Some(_) => self
                        .stream
                        .sent_log
                        .entry(kind)
                        .or_default()
                        .answer(&version, names, refresh),
                    // Nobody wants the type any more: it answers nobody.
                    None => Coverage::default(),
                };
                // `do_not_cache`: as this response says for what it carries,
                // as the held state says for what it left held.
                let held = held_uncacheable.iter().flat_map(|held| held.iter());
                let kept = held.filter(|n| !answer.contains_key(*n) && resources.contains_key(*n));
                uncacheable.extend(kept.cloned());
                let mut state =
                    TypeState::new(kind, version.clone(), nonce.clone(), resources, coverage);
                if !uncacheable.is_empty() {
                    state = state.with_uncacheable(Arc::new(uncacheable));
                }
                let held_errors = held_errors.unwrap_or_default();
                self.session
                    .publish(if held_errors.is_empty() && reported.is_empty() {
                        state
                    } else {
                        let carried = answer.keys().map(String::as_str);
                        state.with_errors(Arc::new(held_errors.after(carried, [], reported)))
                    });
                self.acked.insert(kind, version.clone());
                self.replies.ack(kind, &version);
                Some(self.request(kind, version, nonce, None))
            }
            Err(reason) => {
                let previous = self.acked.get(&kind).cloned().unwrap_or_default();
                let detail = self
                    .replies
                    .refuse(kind, &reason, &version, &previous, &nonce);
                Some(self.request(kind, previous, nonce, Some(detail)))
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.expiries.next()
    }

    fn expire(&mut self, now: Instant) {
        for (kind, names) in self.expiries.expire(now) {
            let Some(state) = self.session.state(kind) else {
                continue;
            };
            info!(%kind, ?names, "TTL ran out without a refresh: no longer served");
            self.ctx.metrics.ttl_expired(kind, names.len());
            let resources = kept(&state.resources, |name, _| !names.contains(name));
            self.session.publish(state.with_resources(resources));
        }
    }

    fn refresh(&mut self) {
        let held = ResourceType::all()
            .into_iter()
            .filter_map(|k| self.session.state(k));
        for state in held {
            let resources = self.ctx.rendered_now(Arc::clone(&state.resources));
            if Arc::ptr_eq(&resources, &state.resources) {
                continue;
            }
            info!(kind = %state.kind, "rendered again with descriptors learned since");
            self.session.publish(state.with_resources(resources));
        }
    }
}

impl Sotw {
    /// The resources of `kind` the session holds once `answer` is taken: the
    /// answer alone for a type whose responses are its complete state (or
    /// the first answer of an upstream switched to); else the answer, and
    /// every resource held before that it does not name and that this
    /// stream's subscription still wants.
    fn state_after(&mut self, kind: ResourceType, answer: &Arc<ResourceSet>) -> Arc<ResourceSet> {
        let replace = self.replace_next.remove(&kind);
        if kind.sotw_complete_state() || replace {
            return Arc::clone(answer);
        }
        let (Some(held), Some(wanted)) = (self.session.state(kind), self.stream.sent.get(&kind))
        else {
            return Arc::clone(answer);
        };
        let mut kept = held
            .resources
            .iter()
            .filter(|(name, resource)| {
                !answer.contains_key(*name) && wanted.wants_resource(resource)
            })
            .peekable();
        if kept.peek().is_none() {
            // Nothing else held: the answer's set, shared with every session
            // that decoded the same answer, is the state as it is.
            return Arc::clone(answer);
        }
        let mut resources: ResourceMap = answer.map().clone();
        resources.extend(kept.map(|(name, resource)| (name.clone(), Arc::clone(resource))));
        resources.into_set()
    }

    /// Drops from the state of `kind` what the subscription `wanted`, about
    /// to be sent, no longer asks for, where the upstream would never say
    /// so itself: a SotW server tells no removal of a type other than
    /// Listener and Cluster, and need not answer a subscription that only
    /// shrank.
    fn drop_unwanted(&mut self, kind: ResourceType, wanted: &Coverage) {
        if kind.sotw_complete_state() {
            return;
        }
        let Some(state) = self.session.state(kind) else {
            return;
        };
        if state.resources.values().all(|r| wanted.wants_resource(r)) {
            return;
        }
        let resources = kept(&state.resources, |_, r| wanted.wants_resource(r));
        debug!(%kind, dropped = state.resources.len() - resources.len(), "no longer subscribed");
        self.expiries
            .retain(kind, |name| resources.contains_key(name));
        self.session.publish(
            TypeState::new(
                kind,
                state.version.clone(),
                state.nonce.clone(),
                resources,
                intersection(state.coverage.clone(), wanted),
            )
            .with_errors(state.errors.clone())
            .with_uncacheable(state.uncacheable.clone()),
        );
    }

    /// Takes the heartbeats of a decoded response: a wrapper without a
    /// resource repeats the version last accepted and keeps the resource
    /// held under its name (one that expired stays gone, as in Envoy); in a
    /// response of a new version it is an error.
    fn heartbeats(
        &self,
        kind: ResourceType,
        version: &str,
        mut decoded: Decoded,
    ) -> Result<Decoded, Rejection> {
        let Some(name) = decoded.heartbeats.first() else {
            return Ok(decoded);
        };
        if self.acked.get(&kind).map(String::as_str) != Some(version) {
            return Err(Rejection::NotAHeartbeat(name.clone()));
        }
        let held = self.session.state(kind);
        let mut resources: ResourceMap = decoded.resources.map().clone();
        for name in std::mem::take(&mut decoded.heartbeats) {
            match held.as_ref().and_then(|state| state.resources.get(&name)) {
                Some(resource) => {
                    resources.insert(name, Arc::clone(resource));
                }
                None => {
                    debug!(%kind, name = %Escaped(&name), "heartbeat for a resource not held: ignored");
                    decoded.ttls.remove(&name);
                }
            }
        }
        decoded.resources = resources.into_set();
        Ok(decoded)
    }

    fn request(
        &mut self,
        kind: ResourceType,
        version: String,
        nonce: String,
        error: Option<String>,
    ) -> Outbound<DiscoveryRequest> {
        let parameters = self.session.node().parameters();
        // With parameters, every name goes as a locator, the wildcard as "*".
        let named = self.stream.named.contains(&kind) || !parameters.is_empty();
        let names = self
            .stream
            .sent
            .get(&kind)
            .map(|coverage| request_names(coverage, named))
            .unwrap_or_default();
        if names.iter().any(|name| name != "*") {
            self.stream.named.insert(kind);
        }
        let (names, resource_locators) = names_or_locators(names, parameters);
        let with_node = !self.stream.node_sent || !self.ctx.node_first_only;
        let node = with_node.then(|| self.session.node().bytes());
        self.stream.node_sent = true;
        let request = DiscoveryRequest {
            version_info: version,
            resource_names: names,
            resource_locators,
            type_url: kind.type_url().to_owned(),
            response_nonce: nonce,
            error_detail: error.map(nack_detail),
            ..Default::default()
        };
        Outbound::new(request, node)
    }
}

/// `resources` less the names `reported` NOT_FOUND that `answer` does not
/// carry.
fn without_not_found(
    resources: Arc<ResourceSet>,
    answer: &ResourceSet,
    reported: &[(String, ReportedError)],
) -> Arc<ResourceSet> {
    let gone: BTreeSet<&str> = reported
        .iter()
        .filter(|(name, e)| e.code == NOT_FOUND && !answer.contains_key(name))
        .map(|(name, _)| name.as_str())
        .collect();
    if !gone.iter().any(|name| resources.contains_key(*name)) {
        return resources;
    }
    kept(&resources, |name, _| !gone.contains(name.as_str())).into_set()
}

/// The resources of `set` that `keep` keeps.
fn kept(set: &ResourceMap, keep: impl Fn(&String, &Resource) -> bool) -> ResourceMap {
    let kept = set.iter().filter(|(name, resource)| keep(name, resource));
    kept.map(|(name, resource)| (name.clone(), Arc::clone(resource)))
        .collect()
}

#[cfg(test)]
mod grouping_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A SotW request's names: the names; `*` and the names for a wildcard
    /// with names; for a plain wildcard, the legacy empty list on a stream
    /// that never named a resource of the type, `*` on one that did.
    #[test]
    fn request_names_follow_the_wildcard_rules() {
        let names = Coverage {
            wildcard: false,
            names: ["a".to_owned(), "b".to_owned()].into(),
        };
        assert_eq!(request_names(&names, false), ["a", "b"]);
        let both = Coverage {
            wildcard: true,
            ..names.clone()
        };
        assert_eq!(request_names(&both, false), ["*", "a", "b"]);
        let wildcard = Coverage {
            wildcard: true,
            ..Coverage::default()
        };
        assert!(request_names(&wildcard, false).is_empty(), "legacy");
        assert_eq!(request_names(&wildcard, true), ["*"], "after names");
    }

    /// After a failover (or back), the next upstream is told of no version
    /// the last one issued: a server taking it for its own would answer
    /// nothing, and the primary's state would be served from the backup.
    #[tokio::test]
    async fn a_new_upstream_is_told_no_version_of_the_last_one() {
        let kind = ResourceType::Clusters;
        let (session, _commands) = Publisher::new(crate::store::SessionNode::default());
        session
            .subscribe(kind, &crate::cache::Names::Wildcard, 10)
            .unwrap();
        let namespace = Namespace::new(BTreeMap::new(), "test", "test");
        let mut sotw = Sotw::new(
            super::super::connection::unused_context(),
            session,
            namespace,
        );
        sotw.acked.insert(kind, "p1".into());
        sotw.reset_stream();
        assert_eq!(
            sotw.subscribe(kind).unwrap().request().version_info,
            "p1",
            "a reconnect resumes"
        );
        sotw.switch_upstream();
        sotw.reset_stream();
        assert_eq!(
            sotw.subscribe(kind).unwrap().request().version_info,
            "",
            "a switch starts over"
        );
    }

    fn cov(wildcard: bool, names: &[&str]) -> Coverage {
        Coverage {
            wildcard,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
        names.iter().copied().collect()
    }

    /// One subscription known seen and none newer: a push proves nothing
    /// more, so its names are not read at all.
    #[test]
    fn a_push_after_the_newest_subscription_reads_no_name() {
        let mut log = SentLog::default();
        log.push(cov(true, &[]));
        assert_eq!(log.answer("1", set(&["a"]), false), cov(true, &[]));
        let unread = std::iter::from_fn(|| panic!("a name was read"));
        assert_eq!(log.answer("2", unread, false), cov(true, &[]));
    }

    #[test]
    fn responses_cover_only_subscriptions_they_prove_seen() {
        let mut log = SentLog::default();
        log.push(cov(false, &["a"]));
        log.push(cov(false, &["a", "b"]));
        // The first response answers the first subscription, not the second.
        assert_eq!(log.answer("1", set(&["a"]), false), cov(false, &["a"]));
        // Holding "b" proves the second was seen.
        assert_eq!(
            log.answer("1", set(&["a", "b"]), false),
            cov(false, &["a", "b"])
        );
        // A name that does not exist upstream: the same version answers it.
        log.push(cov(false, &["a", "b", "zz"]));
        assert_eq!(
            log.answer("1", set(&["a", "b"]), false),
            cov(false, &["a", "b", "zz"])
        );
        // A new version without new names may be a push: proves nothing new.
        log.push(cov(false, &["a", "b", "c", "zz"]));
        assert_eq!(
            log.answer("2", set(&["a", "b"]), false),
            cov(false, &["a", "b", "zz"])
        );
        assert_eq!(
            log.answer("2", set(&["a", "b"]), false),
            cov(false, &["a", "b", "c", "zz"])
        );
        // Wildcard.
        let mut log = SentLog::default();
        log.push(cov(false, &["a"]));
        log.push(cov(true, &["a"]));
        assert_eq!(log.answer("1", set(&["a"]), false), cov(false, &["a"]));
        assert_eq!(log.answer("2", set(&["a", "x"]), false), cov(true, &["a"]));
    }

    /// `cluster-0` .. `cluster-{n-1}`.
    fn clusters(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cluster-{i}")).collect()
    }

    fn named(names: &[String]) -> Coverage {
        Coverage {
            wildcard: false,
            names: names.iter().cloned().collect(),
        }
    }

    /// A burst of growing subscriptions (one per REST poll of a new name)
    /// sent before the server answers any, longer than the log: a server
    /// answering each in turn must never be labelled with names its
    /// response was not for. (Seen in tests/subscriptions.rs without
    /// coalescing: 66 subscriptions forgot the first two, and the response
    /// to the first, holding only `cluster-0`, was taken to answer the
    /// third: a poll for `cluster-1` got no resources.)
    #[test]
    fn a_burst_longer_than_the_log_labels_each_response_with_its_own_names() {
        let burst = SENT_LOG_MAX + 6;
        let names = clusters(burst);
        let mut log = SentLog::default();
        for n in 1..=burst {
            log.push(named(&names[..n]));
        }
        let mut covered = Coverage::default();
        for n in 1..=burst {
            let got: BTreeSet<&str> = names[..n].iter().map(String::as_str).collect();
            covered = log.answer("e1", got.iter().copied(), false);
            assert!(
                covered.names.iter().all(|c| got.contains(c.as_str())) && !covered.wildcard,
                "response {n} (holding {n} names) taken to cover {}",
                covered.names.len()
            );
        }
        // The response to the last one covers every name.
        assert_eq!(covered, named(&names));
    }

    /// A name asked for again (dropped by the idle prune, then polled
    /// again) proves nothing about which subscription a response answers:
    /// the subscription the server last saw may want it too.
    #[test]
    fn a_name_wanted_before_proves_no_later_subscription_seen() {
        let mut log = SentLog::default();
        log.push(cov(false, &["a", "b"]));
        assert_eq!(
            log.answer("1", set(&["a", "b"]), false),
            cov(false, &["a", "b"])
        );
        log.push(cov(false, &["b"]));
        log.push(cov(false, &["a", "b", "c"]));
        // A push of a new version for the first subscription: "c" exists
        // but the server has not seen it asked for yet.
        let covered = log.answer("2", set(&["a", "b"]), false);
        assert!(!covered.wants("c"), "{covered:?}");
    }

    /// A TTL refresh repeats the version for the subscription the server
    /// already answered: it proves no newer one seen.
    #[test]
    fn a_ttl_refresh_proves_no_new_subscription_seen() {
        let mut log = SentLog::default();
        log.push(cov(false, &["a"]));
        assert_eq!(log.answer("1", set(&["a"]), false), cov(false, &["a"]));
        // "x" exists; the refresh of "a" was sent before the server saw it.
        log.push(cov(false, &["a", "x"]));
        assert_eq!(log.answer("1", set(&["a"]), true), cov(false, &["a"]));
        // The answer to the new subscription holds "x".
        assert_eq!(
            log.answer("1", set(&["a", "x"]), false),
            cov(false, &["a", "x"])
        );
    }
}

/// [`SentLog`] against a model of a SotW server and the stream between
/// them: whatever the interleaving, a response is never taken to cover a
/// name the subscription it answered did not ask for.
#[cfg(test)]
mod model {
    use std::collections::{BTreeSet, VecDeque};

    use proptest::prelude::*;

    use super::*;

    /// The names asked for; `e` does not exist upstream.
    const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
    /// A burst adds `n0`, `n1`, ... one at a time (all exist).
    const BURST_MAX: usize = 80;

    /// Every name that exists upstream.
    fn existing() -> Vec<String> {
        let burst = (0..BURST_MAX).map(|i| format!("n{i}"));
        NAMES
            .iter()
            .map(|n| (*n).to_owned())
            .filter(|n| n != "e")
            .chain(burst)
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// The gateway sends a subscription (unless it is the one sent last).
        Subscribe(Coverage),
        /// Many at once, past [`SENT_LOG_MAX`]: `base` and one more burst
        /// name each time (REST clients polling new names).
        Burst { base: Coverage, len: usize },
        /// The server reads up to `count` requests: ignoring them (a strict
        /// server and a stale nonce), answering each change (`batch` off) or
        /// only the last one (`batch`, skipping intermediate ones).
        Serve {
            count: usize,
            batch: bool,
            ignore: bool,
        },
        /// The server's snapshot gets a new version.
        Push,
        /// The server refreshes TTLs at the same version.
        Refresh,
        /// The gateway takes up to this many responses (and ACKs each).
        Deliver(usize),
    }

    /// A response: version, the subscription it answers, whether a refresh.
    type Response = (u32, Coverage, bool);

    #[derive(Debug, Default)]
    struct World {
        log: SentLog,
        last_sent: Option<Coverage>,
        to_server: VecDeque<Coverage>,
        /// The subscription the server holds, and the one it answered last.
        view: Option<Coverage>,
        answered: Option<Coverage>,
        version: u32,
        to_gateway: VecDeque<Response>,
    }

    impl World {
        fn run(&mut self, op: Op) -> Result<(), TestCaseError> {
            match op {
                Op::Subscribe(coverage) => self.subscribe(coverage),
                Op::Burst { base, len } => {
                    for i in 0..len {
                        let mut coverage = base.clone();
                        coverage.names.extend((0..=i).map(|j| format!("n{j}")));
                        self.subscribe(coverage);
                    }
                }
                Op::Serve {
                    count,
                    batch,
                    ignore,
                } => self.serve(count, batch, ignore),
                Op::Push => {
                    self.version += 1;
                    self.respond(false);
                }
                Op::Refresh => self.respond(true),
                Op::Deliver(count) => {
                    for _ in 0..count {
                        self.deliver()?;
                    }
                }
            }
            Ok(())
        }

        fn subscribe(&mut self, coverage: Coverage) {
            if self.last_sent.as_ref() == Some(&coverage) {
                return;
            }
            self.log.push(coverage.clone());
            self.last_sent = Some(coverage.clone());
            self.to_server.push_back(coverage);
        }

        fn serve(&mut self, count: usize, batch: bool, ignore: bool) {
            for _ in 0..count {
                let Some(request) = self.to_server.pop_front() else {
                    break;
                };
                if ignore || self.view.as_ref() == Some(&request) {
                    continue;
                }
                self.view = Some(request);
                if !batch {
                    self.respond(false);
                }
            }
            if batch && self.view != self.answered {
                self.respond(false);
            }
        }

        fn respond(&mut self, refresh: bool) {
            if let Some(view) = self.view.clone() {
                self.answered = Some(view.clone());
                self.to_gateway.push_back((self.version, view, refresh));
            }
        }

        /// Takes the next response; checks what it is taken to cover.
        fn deliver(&mut self) -> Result<(), TestCaseError> {
            let Some((version, view, refresh)) = self.to_gateway.pop_front() else {
                return Ok(());
            };
            let existing = existing();
            let names: BTreeSet<&str> = existing
                .iter()
                .map(String::as_str)
                .filter(|n| view.wants(n))
                .collect();
            let covered = self
                .log
                .answer(&version.to_string(), names.iter().copied(), refresh);
            prop_assert!(
                !covered.wildcard || view.wildcard,
                "{covered:?} for {view:?}"
            );
            for name in &covered.names {
                prop_assert!(view.wants(name), "{covered:?} for {view:?}");
            }
            // The ACK carries the subscription sent last.
            self.to_server.extend(self.last_sent.clone());
            Ok(())
        }
    }

    fn coverage() -> impl Strategy<Value = Coverage> {
        (prop::bool::weighted(0.1), 1u8..32).prop_map(|(wildcard, bits)| Coverage {
            wildcard,
            names: NAMES
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, n)| (*n).to_owned())
                .collect(),
        })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => coverage().prop_map(Op::Subscribe),
            1 => (coverage(), SENT_LOG_MAX - 4..BURST_MAX)
                .prop_map(|(base, len)| Op::Burst { base, len }),
            4 => (1usize..4, any::<bool>(), prop::bool::weighted(0.2))
                .prop_map(|(count, batch, ignore)| Op::Serve { count, batch, ignore }),
            1 => Just(Op::Push),
            1 => Just(Op::Refresh),
            4 => (1usize..4).prop_map(Op::Deliver),
        ]
    }

    proptest! {
        #![proptest_config(xds_gateway_base::testing::proptest_config(128))]

        #[test]
        fn responses_never_cover_names_their_subscription_did_not_ask_for(
            ops in prop::collection::vec(op(), 1..150)
        ) {
            let mut world = World::default();
            for op in ops {
                world.run(op)?;
            }
        }
    }
}
