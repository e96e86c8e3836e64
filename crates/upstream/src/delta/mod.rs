//! The delta feeder: one incremental `DeltaAggregatedResources` stream per
//! session, driven by [`super::stream`].
//!
//! The task keeps, per type, every resource it was sent by name with the
//! upstream's per-resource version, subscribes and unsubscribes by diffing
//! the session's subscription against what the stream was last told, applies
//! each response (added/changed resources, `removed_resources`,
//! `removed_resource_names`, NOT_FOUND `resource_errors`, and the name-only
//! "does not exist" resources of the xDS spec) as a whole or NACKs it as a
//! whole, ACKs with the response nonce, and publishes to the session a
//! state-of-the-world [`TypeState`](crate::cache::TypeState) of everything
//! held. On a new stream it resubscribes with `initial_resource_versions` =
//! the versions held, so the upstream sends only what changed.
//!
//! # Versions
//!
//! A delta stream has no state-of-the-world version: the published one is a
//! digest of the (name, per-resource version) pairs held (`digest` in
//! `upstream/held.rs`), the same whichever order or stream they came by,
//! and another whenever a resource is added, changed or removed.
//!
//! # Coverage: which requests a state can answer
//!
//! A delta response does not say which subscription it answers, and the
//! upstream sends nothing for what the gateway already has, so a state
//! covers only what the upstream has *answered*:
//!
//! - an explicitly subscribed name is answered once the gateway received it,
//!   or was told it is gone or absent (`removed_resources`,
//!   `removed_resource_names`, a NOT_FOUND `resource_errors` entry, or a
//!   `Resource` with the name and no payload, as the xDS spec says a server
//!   signals a subscribed name that does not exist);
//! - the first response of a type on a stream answers the whole first
//!   subscription of the type on that stream (nothing else can precede it; a
//!   server answers a subscription with one response): its names it neither
//!   carries nor the gateway holds (and presented in
//!   `initial_resource_versions`) are absent, and a wildcard in it is
//!   answered;
//! - a wildcard added later is answered by a response carrying a resource
//!   never explicitly subscribed on the stream (only a wildcard brings
//!   those), unless the wildcard was dropped earlier on the same stream (an
//!   old response in flight could then carry one);
//! - liveness: a name or wildcard subscribed on a stream that has already
//!   answered the type, and still unanswered [`SETTLE`] later (servers such
//!   as go-control-plane send nothing for names that do not exist), is taken
//!   as answered with what the gateway has: the same assumption a waiting
//!   REST request falls back to after `--first-response-timeout`, made once
//!   per subscription instead of once per poll.
//!
//! Answers are kept across reconnects (the held resources are the last
//! known truth). Dropping interest forgets them: names no client wants any
//! more are unsubscribed, their resources and answers dropped, and the
//! narrower state published, so a client that asks again waits for a fresh
//! answer instead of getting a copy the upstream no longer keeps current.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use prost::Message as _;
use tokio::time::Instant;
use tracing::{debug, info, warn};

mod state;
#[cfg(test)]
mod tests;
mod update;

use self::state::{Tracked, Wire};
use self::update::{decode_update_off_thread, diff};
use super::name_check::AskingAlone;
use super::outbound::Outbound;
use super::replies::Replies;
use super::stream::{nack_detail, Protocol};
use super::ttl::Expiries;
use super::UpstreamContext;
use crate::cache::Coverage;
use crate::log_escape::Escaped;
// How long a subscription may stay unanswered on a stream that answers the
// type before it is taken as answered (see the module docs).
use crate::store::SETTLE;
use crate::store::{Namespace, Publisher};
use crate::xds::dynamic_parameters::names_or_locators;
use crate::xds::ResourceType;

const WILDCARD: &str = "*";

/// The delta protocol of one session.
pub struct Delta {
    ctx: Arc<UpstreamContext>,
    session: Publisher,
    /// The names this session's upstream may send.
    namespace: Namespace,
    /// Types whose held resources the next accepted response replaces
    /// whole (they came from another upstream, before a failover).
    replacing: BTreeSet<ResourceType>,
    /// What is known per type, across streams.
    tracked: BTreeMap<ResourceType, Tracked>,
    /// Per type, what this stream was told and is pending.
    wires: BTreeMap<ResourceType, Wire>,
    node_sent: bool,
    /// When resources sent with a TTL expire, across streams.
    expiries: Expiries,
    /// What the replies sent upstream record.
    replies: Replies,
}

impl AskingAlone for Delta {
    type Ask = Outbound<DeltaDiscoveryRequest>;
    type Answer = DeltaDiscoveryResponse;

    fn asking_only(
        kind: ResourceType,
        names: Vec<String>,
        parameters: &crate::xds::dynamic_parameters::Parameters,
        node: crate::store::NodeBytes,
    ) -> Outbound<DeltaDiscoveryRequest> {
        let (resource_names_subscribe, resource_locators_subscribe) =
            names_or_locators(names, parameters);
        let request = DeltaDiscoveryRequest {
            resource_names_subscribe,
            resource_locators_subscribe,
            type_url: kind.type_url().to_owned(),
            ..Default::default()
        };
        Outbound::new(request, Some(node))
    }
}

impl Protocol for Delta {
    type Request = Outbound<DeltaDiscoveryRequest>;
    type Response = DeltaDiscoveryResponse;
    const MODE: &'static str = "delta";
    const AGGREGATED_PATH: &'static str = super::connection::probe::DELTA_ADS;
    const DELTA: bool = true;

    fn new(ctx: Arc<UpstreamContext>, session: Publisher, namespace: Namespace) -> Delta {
        Delta {
            replies: Replies::new(Self::MODE, ctx.metrics.clone(), session.clone()),
            ctx,
            session,
            namespace,
            replacing: BTreeSet::new(),
            tracked: BTreeMap::new(),
            wires: BTreeMap::new(),
            node_sent: false,
            expiries: Expiries::default(),
        }
    }

    fn reset_stream(&mut self) {
        self.wires.clear();
        self.node_sent = false;
    }

    fn switch_upstream(&mut self) {
        self.replacing = self.tracked.keys().copied().collect();
    }

    /// Also forgets what nobody wants any more.
    fn subscribe(&mut self, kind: ResourceType) -> Option<Outbound<DeltaDiscoveryRequest>> {
        let want = self.session.subscription(kind).unwrap_or_default();
        let tracked = tracked(&mut self.tracked, &self.ctx, kind);
        let narrowed = tracked.narrow(kind, &want);
        self.expiries
            .retain(kind, |name| tracked.held.contains_key(name));
        if narrowed {
            self.publish(kind);
        }
        let wire = self.wires.entry(kind).or_default();
        let first = wire.sent.is_none();
        if first && want == Coverage::default() {
            // Nothing wanted and nothing said yet on this stream.
            return None;
        }
        let sent = wire.sent.clone().unwrap_or_default();
        let diff = diff(&sent, &want);
        if diff.is_empty() {
            return None;
        }
        wire.record(&sent, &want, Instant::now());
        // With parameters, every name goes as a locator carrying them.
        let parameters = self.session.node().parameters();
        let (subscribe, subscribe_locators) = names_or_locators(diff.subscribe, parameters);
        let (unsubscribe, unsubscribe_locators) = names_or_locators(diff.unsubscribe, parameters);
        let mut request = DeltaDiscoveryRequest {
            type_url: kind.type_url().to_owned(),
            resource_names_subscribe: subscribe,
            resource_locators_subscribe: subscribe_locators,
            resource_names_unsubscribe: unsubscribe,
            resource_locators_unsubscribe: unsubscribe_locators,
            ..Default::default()
        };
        if first && !self.replacing.contains(&kind) {
            request.initial_resource_versions = self
                .tracked
                .get(&kind)
                .map(Tracked::initial_versions)
                .unwrap_or_default();
        }
        debug!(
            %kind,
            subscribe = ?request.resource_names_subscribe,
            unsubscribe = ?request.resource_names_unsubscribe,
            locators = request.resource_locators_subscribe.len()
                + request.resource_locators_unsubscribe.len(),
            initial = request.initial_resource_versions.len(),
            "subscription"
        );
        Some(self.outbound(request))
    }

    fn nack(
        &mut self,
        kind: ResourceType,
        presented: String,
        message: String,
    ) -> Option<Outbound<DeltaDiscoveryRequest>> {
        let nonce = self.wires.get(&kind).map(|w| w.nonce.clone());
        let Some(nonce) = nonce.filter(|nonce| !nonce.is_empty()) else {
            // Nothing of the type arrived on this stream: there is no
            // response to NACK (and a first request without names would be
            // a legacy wildcard subscription).
            debug!(%kind, "no response to NACK on this stream");
            return None;
        };
        self.replies
            .nack(kind, &presented, &presented, &nonce, &message);
        Some(self.outbound(Delta::request(kind, nonce, Some(message))))
    }

    fn type_url(response: &DeltaDiscoveryResponse) -> &str {
        &response.type_url
    }

    fn refuse_unasked(
        response: &DeltaDiscoveryResponse,
        message: String,
    ) -> Outbound<DeltaDiscoveryRequest> {
        let request = DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: Some(nack_detail(message)),
            ..Default::default()
        };
        Outbound::new(request, None)
    }

    /// Decodes a response; applies, publishes and ACKs it, or NACKs it whole.
    async fn response(
        &mut self,
        kind: ResourceType,
        response: DeltaDiscoveryResponse,
    ) -> Option<Outbound<DeltaDiscoveryRequest>> {
        if self.wires.get(&kind).is_none_or(|w| w.sent.is_none()) {
            // Never subscribed on this stream: nothing to ACK (a first
            // request without names would subscribe to the wildcard).
            warn!(%kind, "unsolicited response ignored");
            return None;
        }
        self.ctx.intake.note_answer(response.encoded_len());
        let nonce = response.nonce.clone();
        let system_version = response.system_version_info.clone();
        let decoded = decode_update_off_thread(
            &self.ctx.intake,
            kind,
            response,
            self.session.node().parameters().clone(),
        )
        .await
        .and_then(|update| {
            let names = update.added.iter().map(|(name, _)| name);
            let names = names.chain(update.name_only.iter().map(|(name, _)| name));
            let foreign = self.namespace.first_foreign(names);
            foreign.map_or(Ok(update), |foreign| Err(foreign.into()))
        });
        let wire = self.wires.entry(kind).or_default();
        wire.nonce = nonce.clone();
        let error = match decoded {
            Ok(mut update) => {
                debug!(
                    %kind,
                    system_version = %Escaped(&system_version),
                    added = update.added.len(),
                    name_only = update.name_only.len(),
                    removed = update.removed.len(),
                    "accepted"
                );
                let ttls = std::mem::take(&mut update.ttls);
                // A delta answer carries only what changed: every resource
                // in it is decoded, none is reused.
                self.ctx
                    .metrics
                    .resources_taken(kind, update.added.len(), 0);
                let now = Instant::now();
                let tracked = tracked(&mut self.tracked, &self.ctx, kind);
                if self.replacing.remove(&kind) {
                    *tracked = Tracked::new(self.ctx.held_sets.clone());
                }
                tracked.apply(kind, wire, update, now);
                for (name, ttl) in ttls {
                    self.expiries.arrived(kind, &name, ttl, now);
                }
                self.expiries
                    .retain(kind, |name| tracked.held.contains_key(name));
                self.publish(kind);
                self.replies.ack(kind, &system_version);
                None
            }
            Err(reason) => {
                let version = &system_version;
                Some(self.replies.refuse(kind, &reason, version, version, &nonce))
            }
        };
        Some(self.outbound(Delta::request(kind, nonce, error)))
    }

    fn next_timer(&self) -> Option<Instant> {
        self.wires.values().filter_map(Wire::next_settle).min()
    }

    /// Settles due subscriptions (see [`SETTLE`]) and publishes what changed.
    fn timer(&mut self, now: Instant) {
        let mut changed = Vec::new();
        for (kind, wire) in &mut self.wires {
            if tracked(&mut self.tracked, &self.ctx, *kind).settle(wire, now) {
                changed.push(*kind);
            }
        }
        for kind in changed {
            debug!(%kind, "unanswered subscription settled");
            self.publish(kind);
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.expiries.next()
    }

    fn expire(&mut self, now: Instant) {
        for (kind, names) in self.expiries.expire(now) {
            info!(%kind, ?names, "TTL ran out without a refresh: no longer served");
            self.ctx.metrics.ttl_expired(kind, names.len());
            tracked(&mut self.tracked, &self.ctx, kind).forget(kind, &names);
            self.publish(kind);
        }
    }

    fn refresh(&mut self) {
        let kinds: Vec<ResourceType> = self.tracked.keys().copied().collect();
        for kind in kinds {
            self.publish(kind);
        }
    }
}

impl Delta {
    /// A request of `kind` ACKing or NACKing `nonce`.
    fn request(kind: ResourceType, nonce: String, error: Option<String>) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: kind.type_url().to_owned(),
            response_nonce: nonce,
            error_detail: error.map(nack_detail),
            ..Default::default()
        }
    }

    /// `request` as this stream sends it: with the session's node when the
    /// node goes on it (every request, or with `node_first_only` the first).
    fn outbound(&mut self, request: DeltaDiscoveryRequest) -> Outbound<DeltaDiscoveryRequest> {
        let with_node = !self.node_sent || !self.ctx.node_first_only;
        let node = with_node.then(|| self.session.node().bytes());
        self.node_sent = true;
        Outbound::new(request, node)
    }

    /// Publishes the held state of `kind` if its version, its coverage or
    /// the descriptor pool changed
    /// (never before the first accepted response: no state is not the same
    /// as an empty one).
    fn publish(&mut self, kind: ResourceType) {
        let tracked = tracked(&mut self.tracked, &self.ctx, kind);
        let answered_here = self
            .wires
            .get(&kind)
            .is_some_and(|w| w.answered_at.is_some());
        if tracked.published.is_none() && !answered_here {
            return;
        }
        let generation = self.ctx.intake.codec().descriptors().generation();
        let state = tracked.state(kind, |set| self.ctx.rendered_now(set));
        let key = (state.version.clone(), state.coverage.clone(), generation);
        if tracked.published.as_ref() == Some(&key) {
            return;
        }
        tracked.published = Some(key);
        self.session.publish(state);
    }
}

/// What `tracked` knows of `kind`; nothing yet, with the upstream's held
/// sets, if it is new.
fn tracked<'a>(
    tracked: &'a mut BTreeMap<ResourceType, Tracked>,
    ctx: &UpstreamContext,
    kind: ResourceType,
) -> &'a mut Tracked {
    tracked
        .entry(kind)
        .or_insert_with(|| Tracked::new(ctx.held_sets.clone()))
}
