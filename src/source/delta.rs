//! The upstream side of one session in delta mode: an incremental
//! `DeltaAggregatedResources` stream to the control plane.
//!
//! The task keeps, per type, every resource it was sent by name with the
//! upstream's per-resource version, subscribes and unsubscribes by diffing
//! the session's subscription against what the stream was last told, applies
//! each response (added/changed resources, `removed_resources`,
//! `removed_resource_names`, NOT_FOUND `resource_errors`, and the name-only
//! "does not exist" resources of the xDS spec) as a whole or NACKs it as a
//! whole, ACKs with the response nonce, and publishes to the session a
//! state-of-the-world [`TypeState`] of everything held. When the stream breaks
//! it reconnects with jittered exponential backoff and resubscribes with
//! `initial_resource_versions` = the versions held, so the upstream sends only
//! what changed; the session keeps serving its last state meanwhile.
//!
//! # Versions
//!
//! A delta stream has no state-of-the-world version, so the published
//! version is a digest of the sorted (name, per-resource version) pairs held:
//! the first 16 hex digits of their SHA-256 (see [`digest`]). It is the same
//! for the same upstream resources whichever order or stream they came by,
//! and it changes whenever a resource is added, changed or removed. A
//! resource the upstream sent without a version is digested by its content.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status;
use rand::Rng;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info, warn, Instrument};

use super::decode::decode_one;
use super::session::{Command, Session};
use super::UpstreamContext;
use crate::cache::{Coverage, Renderer, Resource, TypeState};
use crate::xds::ResourceType;

/// First reconnect delay; doubles per failure up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Each delay is scaled by a random factor in [1 - JITTER, 1 + JITTER].
const BACKOFF_JITTER: f64 = 0.5;
/// Requests queued toward one stream before the sender waits.
const OUTBOUND_QUEUE: usize = 64;
/// gRPC code INVALID_ARGUMENT, used in NACK `error_detail`s.
const INVALID_ARGUMENT: i32 = 3;
/// gRPC code NOT_FOUND in a `resource_errors` entry: the resource is gone.
const NOT_FOUND: i32 = 5;
/// How long a subscription may stay unanswered on a stream that answers the
/// type before it is taken as answered (see the module docs).
pub const SETTLE: Duration = Duration::from_secs(2);
/// The wildcard subscription name.
const WILDCARD: &str = "*";
/// Hex digits of SHA-256 in a published version.
const VERSION_HEX_DIGITS: usize = 16;

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("upstream stream failed: {0}")]
    Status(#[from] tonic::Status),
    #[error("upstream closed the stream")]
    Closed,
}

/// Runs the session's upstream delta stream until the session closes.
pub async fn run(
    ctx: Arc<UpstreamContext>,
    session: Arc<Session>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let span = tracing::info_span!(
        "upstream",
        mode = "delta",
        node = %session.node.id,
        cluster = %session.node.cluster
    );
    async move {
        let mut tracked: BTreeMap<ResourceType, Tracked> = BTreeMap::new();
        let mut failures = 0u32;
        loop {
            let mut stream = Stream::new(&ctx, &session, &mut tracked);
            let result = stream.run(&mut commands).await;
            let answered = stream.answered;
            match result {
                Ok(()) => return,
                Err(err) => {
                    failures = if answered {
                        1
                    } else {
                        failures.saturating_add(1)
                    };
                    let delay = backoff(failures);
                    warn!(error = %err, retry_in = ?delay, "upstream delta stream ended");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// Jittered exponential backoff for the `failures`-th consecutive failure.
fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let capped = exp.min(BACKOFF_MAX);
    let factor = rand::rng().random_range((1.0 - BACKOFF_JITTER)..=(1.0 + BACKOFF_JITTER));
    capped.mul_f64(factor)
}

/// One resource held: the upstream's per-resource version and the resource.
#[derive(Debug, Clone)]
struct Held {
    version: String,
    resource: Arc<Resource>,
}

/// The published version of `held`: SHA-256 over the sorted (name,
/// version) pairs, first [`VERSION_HEX_DIGITS`] hex digits. A resource with
/// an empty upstream version is digested by its content instead.
fn digest<'a>(held: impl IntoIterator<Item = (&'a String, &'a Held)>) -> String {
    let mut pairs: Vec<(&str, String)> = held
        .into_iter()
        .map(|(name, h)| {
            let version = if h.version.is_empty() {
                format!("sha256:{}", hex::encode(h.resource.digest))
            } else {
                format!("v:{}", h.version)
            };
            (name.as_str(), version)
        })
        .collect();
    pairs.sort();
    let mut hasher = Sha256::new();
    for (name, version) in &pairs {
        // Length-prefixed, so no (name, version) split is ambiguous.
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
        hasher.update((version.len() as u64).to_be_bytes());
        hasher.update(version.as_bytes());
    }
    let mut hex = hex::encode(hasher.finalize());
    hex.truncate(VERSION_HEX_DIGITS);
    hex
}

/// What to send to move the upstream from subscription `sent` to `want`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Diff {
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
}

impl Diff {
    fn is_empty(&self) -> bool {
        self.subscribe.is_empty() && self.unsubscribe.is_empty()
    }
}

/// The subscribe/unsubscribe lists taking `sent` to `want` (`"*"` first,
/// then names in order). No interest at all is an empty `want`: everything
/// is unsubscribed.
fn diff(sent: &Coverage, want: &Coverage) -> Diff {
    let mut out = Diff::default();
    if want.wildcard && !sent.wildcard {
        out.subscribe.push(WILDCARD.to_owned());
    }
    if sent.wildcard && !want.wildcard {
        out.unsubscribe.push(WILDCARD.to_owned());
    }
    out.subscribe
        .extend(want.names.difference(&sent.names).cloned());
    out.unsubscribe
        .extend(sent.names.difference(&want.names).cloned());
    out
}

/// A decoded response, validated as a whole (nothing applied yet).
#[derive(Debug, Default)]
struct Update {
    /// Added or changed resources, by name.
    added: Vec<(String, Held)>,
    /// Names sent without a payload, with their version: a TTL heartbeat if
    /// the gateway holds that version, else "does not exist".
    name_only: Vec<(String, String)>,
    /// Names the upstream says are gone (removed, or NOT_FOUND).
    removed: Vec<String>,
}

impl Update {
    fn names(&self) -> impl Iterator<Item = &str> {
        self.added
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(self.name_only.iter().map(|(n, _)| n.as_str()))
    }
}

/// Decodes and checks every part of `response`; the first problem rejects
/// it all (as Envoy does).
fn decode_update(
    renderer: &Renderer,
    kind: ResourceType,
    response: DeltaDiscoveryResponse,
) -> Result<Update, String> {
    let mut update = Update::default();
    let mut seen = BTreeSet::new();
    for (index, resource) in response.resources.into_iter().enumerate() {
        let wrapper_name = if resource.name.is_empty() {
            resource
                .resource_name
                .as_ref()
                .map(|n| n.name.clone())
                .unwrap_or_default()
        } else {
            resource.name.clone()
        };
        match resource.resource {
            Some(any) => {
                let decoded = decode_one(renderer, kind, any)
                    .map_err(|e| format!("resource {index} ({wrapper_name:?}): {e}"))?;
                if !wrapper_name.is_empty() && wrapper_name != decoded.name {
                    return Err(format!(
                        "resource {index} is named {wrapper_name:?} but carries {:?}",
                        decoded.name
                    ));
                }
                let name = decoded.name.clone();
                if !seen.insert(name.clone()) {
                    return Err(format!("resource {name:?} appears twice in one response"));
                }
                update.added.push((
                    name,
                    Held {
                        version: resource.version,
                        resource: decoded,
                    },
                ));
            }
            None => {
                if wrapper_name.is_empty() {
                    return Err(format!("resource {index} has neither a name nor a payload"));
                }
                if !seen.insert(wrapper_name.clone()) {
                    return Err(format!(
                        "resource {wrapper_name:?} appears twice in one response"
                    ));
                }
                update.name_only.push((wrapper_name, resource.version));
            }
        }
    }
    let not_found = response
        .resource_errors
        .into_iter()
        .filter(|e| e.error_detail.as_ref().is_some_and(|s| s.code == NOT_FOUND))
        .filter_map(|e| e.resource_name.map(|n| n.name));
    let removed: BTreeSet<String> = response
        .removed_resources
        .into_iter()
        .chain(response.removed_resource_names.into_iter().map(|n| n.name))
        .chain(not_found)
        .filter(|n| !n.is_empty())
        .collect();
    if let Some(both) = removed.iter().find(|n| seen.contains(*n)) {
        return Err(format!(
            "resource {both:?} is both updated and removed in one response"
        ));
    }
    update.removed = removed.into_iter().collect();
    Ok(update)
}

/// [`decode_update`] on a blocking thread (big responses take a while).
async fn decode_update_off_thread(
    renderer: &Renderer,
    kind: ResourceType,
    response: DeltaDiscoveryResponse,
) -> Result<Update, String> {
    let renderer = renderer.clone();
    tokio::task::spawn_blocking(move || decode_update(&renderer, kind, response))
        .await
        .unwrap_or_else(|e| Err(format!("decoder task failed: {e}")))
}

/// What the gateway knows of one type, across streams.
#[derive(Debug, Default)]
struct Tracked {
    held: BTreeMap<String, Held>,
    /// Explicitly subscribed names the upstream has answered (held or absent).
    answered: BTreeSet<String>,
    wildcard_answered: bool,
    /// (version, coverage) last published, so unchanged states are not republished.
    published: Option<(String, Coverage)>,
}

impl Tracked {
    fn coverage(&self) -> Coverage {
        Coverage {
            wildcard: self.wildcard_answered,
            names: self.answered.clone(),
        }
    }

    /// Forgets what `want` no longer asks for; true if anything was dropped.
    fn narrow(&mut self, want: &Coverage) -> bool {
        let before = (self.held.len(), self.answered.len(), self.wildcard_answered);
        if !want.wildcard {
            self.wildcard_answered = false;
            self.held.retain(|name, _| want.names.contains(name));
        }
        self.answered.retain(|name| want.names.contains(name));
        before != (self.held.len(), self.answered.len(), self.wildcard_answered)
    }

    /// The versions to present on a new stream.
    fn initial_versions(&self) -> HashMap<String, String> {
        self.held
            .iter()
            .map(|(name, h)| (name.clone(), h.version.clone()))
            .collect()
    }

    /// Applies an accepted `update` that arrived on a stream whose state for
    /// the type is `wire`, at `now`.
    fn apply(&mut self, wire: &mut Wire, update: Update, now: Instant) {
        let sent = wire.sent.clone().unwrap_or_default();
        let explicit = |name: &str| sent.names.contains(name);
        let first = wire.answered_at.is_none();
        if first {
            wire.answered_at = Some(now);
        }
        if sent.wildcard && !wire.wildcard_dropped {
            let proves = (first && wire.first.wildcard)
                || update.names().any(|name| !wire.ever_named.contains(name));
            if proves {
                self.wildcard_answered = true;
                wire.pending_wildcard = None;
            }
        }
        let answered = |tracked: &mut Tracked, wire: &mut Wire, name: &str| {
            if explicit(name) {
                tracked.answered.insert(name.to_owned());
                wire.pending.remove(name);
            }
        };
        if first {
            // The first response answers the stream's first subscription.
            let names: Vec<String> = wire.first.names.iter().cloned().collect();
            for name in &names {
                answered(self, wire, name);
            }
        }
        for (name, held) in update.added {
            if !(sent.wildcard || explicit(&name)) {
                debug!(%name, "resource nobody subscribed to: ignored");
                continue;
            }
            answered(self, wire, &name);
            self.held.insert(name, held);
        }
        for (name, version) in update.name_only {
            let heartbeat = self
                .held
                .get(&name)
                .is_some_and(|h| h.version == version && !version.is_empty());
            if !heartbeat {
                self.held.remove(&name);
            }
            answered(self, wire, &name);
        }
        for name in update.removed {
            self.held.remove(&name);
            answered(self, wire, &name);
        }
    }

    /// Takes what `wire` has waited [`SETTLE`] for as answered; true if any.
    fn settle(&mut self, wire: &mut Wire, now: Instant) -> bool {
        let Some(base) = wire.answered_at else {
            return false;
        };
        let due = |since: Instant| since.max(base) + SETTLE <= now;
        let names: Vec<String> = wire
            .pending
            .iter()
            .filter(|(_, since)| due(**since))
            .map(|(name, _)| name.clone())
            .collect();
        let mut changed = false;
        for name in names {
            wire.pending.remove(&name);
            changed |= self.answered.insert(name);
        }
        if wire.pending_wildcard.is_some_and(due) {
            wire.pending_wildcard = None;
            changed |= !self.wildcard_answered;
            self.wildcard_answered = true;
        }
        changed
    }

    fn state(&self, kind: ResourceType) -> TypeState {
        let resources = self
            .held
            .iter()
            .map(|(name, h)| (name.clone(), h.resource.clone()))
            .collect();
        TypeState::new(
            kind,
            digest(&self.held),
            String::new(),
            resources,
            self.coverage(),
        )
    }
}

/// One type on one stream.
#[derive(Debug, Default)]
struct Wire {
    /// What the upstream was told this stream subscribes to; `None` until
    /// the first request of the type on the stream.
    sent: Option<Coverage>,
    /// The first subscription of the type on the stream.
    first: Coverage,
    /// Nonce of the latest response of the type (what ACKs/NACKs carry).
    nonce: String,
    /// When the first accepted response of the type arrived on the stream.
    answered_at: Option<Instant>,
    /// Every name explicitly subscribed on the stream.
    ever_named: BTreeSet<String>,
    /// Whether `*` was unsubscribed on the stream.
    wildcard_dropped: bool,
    /// Unanswered subscribed names, with when they were subscribed.
    pending: BTreeMap<String, Instant>,
    pending_wildcard: Option<Instant>,
}

impl Wire {
    /// Records that `want` replaces `sent` on the stream at `now`.
    fn record(&mut self, sent: &Coverage, want: &Coverage, now: Instant) {
        if self.sent.is_none() {
            self.first = want.clone();
        }
        for name in want.names.difference(&sent.names) {
            self.pending.insert(name.clone(), now);
        }
        for name in sent.names.difference(&want.names) {
            self.pending.remove(name);
        }
        self.ever_named.extend(want.names.iter().cloned());
        match (sent.wildcard, want.wildcard) {
            (false, true) => self.pending_wildcard = Some(now),
            (true, false) => {
                self.pending_wildcard = None;
                self.wildcard_dropped = true;
            }
            _ => {}
        }
        self.sent = Some(want.clone());
    }

    /// When the next pending subscription settles, if the stream answers the type.
    fn next_settle(&self) -> Option<Instant> {
        let base = self.answered_at?;
        self.pending
            .values()
            .copied()
            .chain(self.pending_wildcard)
            .map(|since| since.max(base) + SETTLE)
            .min()
    }
}

/// One stream's worth of state.
struct Stream<'a> {
    ctx: &'a UpstreamContext,
    session: &'a Session,
    tracked: &'a mut BTreeMap<ResourceType, Tracked>,
    wires: BTreeMap<ResourceType, Wire>,
    node_sent: bool,
    answered: bool,
}

impl<'a> Stream<'a> {
    fn new(
        ctx: &'a UpstreamContext,
        session: &'a Session,
        tracked: &'a mut BTreeMap<ResourceType, Tracked>,
    ) -> Self {
        Stream {
            ctx,
            session,
            tracked,
            wires: BTreeMap::new(),
            node_sent: false,
            answered: false,
        }
    }

    /// Ok when the session closed (commands channel gone); Err when the stream broke.
    async fn run(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Result<(), StreamError> {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        for kind in ResourceType::ALL {
            self.subscribe(kind, &tx).await;
        }
        let mut client = AggregatedDiscoveryServiceClient::new(self.ctx.channel.clone())
            .max_decoding_message_size(self.ctx.max_message_bytes)
            .max_encoding_message_size(self.ctx.max_message_bytes);
        let call = client.delta_aggregated_resources(self.ctx.request(ReceiverStream::new(rx)));
        tokio::pin!(call);
        // Commands may arrive before the response headers do.
        let mut inbound = loop {
            tokio::select! {
                response = &mut call => break response?.into_inner(),
                command = commands.recv() => match command {
                    Some(command) => self.command(command, &tx).await,
                    None => return Ok(()),
                },
            }
        };
        self.ctx.metrics.stream_opened();
        let _open = StreamGuard(self.ctx);
        info!("upstream delta stream open");
        loop {
            let settle = self.wires.values().filter_map(Wire::next_settle).min();
            tokio::select! {
                message = inbound.message() => match message? {
                    Some(response) => self.response(response, &tx).await,
                    None => return Err(StreamError::Closed),
                },
                command = commands.recv() => match command {
                    Some(command) => self.command(command, &tx).await,
                    None => return Ok(()),
                },
                () = sleep_until(settle) => self.settle(Instant::now()),
            }
        }
    }

    async fn command(&mut self, command: Command, tx: &mpsc::Sender<DeltaDiscoveryRequest>) {
        match command {
            Command::Resubscribe(kind) => self.subscribe(kind, tx).await,
            Command::Nack { kind, message, .. } => {
                let nonce = self
                    .wires
                    .get(&kind)
                    .map(|w| w.nonce.clone())
                    .unwrap_or_default();
                if nonce.is_empty() {
                    // Nothing of the type arrived on this stream: there is
                    // no response to NACK (and a first request without
                    // names would be a legacy wildcard subscription).
                    debug!(%kind, "no response to NACK on this stream");
                    return;
                }
                let request = self.request(kind, Diff::default(), nonce, Some(message));
                self.ctx.metrics.nack(kind);
                let _ = tx.send(request).await;
            }
        }
    }

    /// Sends what moves the stream's subscription of `kind` to the
    /// session's, forgetting what nobody wants any more.
    async fn subscribe(&mut self, kind: ResourceType, tx: &mpsc::Sender<DeltaDiscoveryRequest>) {
        let want = self.session.subscription(kind).unwrap_or_default();
        let narrowed = self.tracked.entry(kind).or_default().narrow(&want);
        if narrowed {
            self.publish(kind);
        }
        let wire = self.wires.entry(kind).or_default();
        let first = wire.sent.is_none();
        if first && want == Coverage::default() {
            // Nothing wanted and nothing said yet on this stream.
            return;
        }
        let sent = wire.sent.clone().unwrap_or_default();
        let diff = diff(&sent, &want);
        if diff.is_empty() {
            return;
        }
        wire.record(&sent, &want, Instant::now());
        let mut request = self.request(kind, diff, String::new(), None);
        if first {
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
            initial = request.initial_resource_versions.len(),
            "subscription"
        );
        let _ = tx.send(request).await;
    }

    fn request(
        &mut self,
        kind: ResourceType,
        diff: Diff,
        nonce: String,
        error: Option<String>,
    ) -> DeltaDiscoveryRequest {
        let node = (!self.node_sent).then(|| self.session.node.clone());
        self.node_sent = true;
        DeltaDiscoveryRequest {
            node,
            type_url: kind.type_url().to_owned(),
            resource_names_subscribe: diff.subscribe,
            resource_names_unsubscribe: diff.unsubscribe,
            response_nonce: nonce,
            error_detail: error.map(|message| Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
            ..Default::default()
        }
    }

    async fn response(
        &mut self,
        response: DeltaDiscoveryResponse,
        tx: &mpsc::Sender<DeltaDiscoveryRequest>,
    ) {
        self.answered = true;
        self.ctx.ready.mark_ready();
        let Some(kind) = ResourceType::from_type_url(&response.type_url) else {
            warn!(type_url = %response.type_url, "response for a type the gateway does not serve");
            return;
        };
        if self.wires.get(&kind).is_none_or(|w| w.sent.is_none()) {
            // Never subscribed on this stream: nothing to ACK (a first
            // request without names would subscribe to the wildcard).
            warn!(%kind, "unsolicited response ignored");
            return;
        }
        let nonce = response.nonce.clone();
        let system_version = response.system_version_info.clone();
        let decoded = decode_update_off_thread(&self.ctx.renderer, kind, response).await;
        let wire = self.wires.entry(kind).or_default();
        wire.nonce = nonce.clone();
        match decoded {
            Ok(update) => {
                debug!(
                    %kind,
                    %system_version,
                    added = update.added.len(),
                    name_only = update.name_only.len(),
                    removed = update.removed.len(),
                    "accepted"
                );
                self.tracked
                    .entry(kind)
                    .or_default()
                    .apply(wire, update, Instant::now());
                self.publish(kind);
                let request = self.request(kind, Diff::default(), nonce, None);
                self.ctx.metrics.ack(kind);
                let _ = tx.send(request).await;
            }
            Err(reason) => {
                warn!(%kind, %system_version, %reason, "rejected upstream delta response (NACK)");
                let request = self.request(kind, Diff::default(), nonce, Some(reason));
                self.ctx.metrics.nack(kind);
                let _ = tx.send(request).await;
            }
        }
    }

    /// Settles due subscriptions (see [`SETTLE`]) and publishes what changed.
    fn settle(&mut self, now: Instant) {
        let mut changed = Vec::new();
        for (kind, wire) in &mut self.wires {
            if self.tracked.entry(*kind).or_default().settle(wire, now) {
                changed.push(*kind);
            }
        }
        for kind in changed {
            debug!(%kind, "unanswered subscription settled");
            self.publish(kind);
        }
    }

    /// Publishes the held state of `kind` if its version or coverage changed
    /// (never before the first accepted response: no state is not the same
    /// as an empty one).
    fn publish(&mut self, kind: ResourceType) {
        let tracked = self.tracked.entry(kind).or_default();
        let answered_here = self
            .wires
            .get(&kind)
            .is_some_and(|w| w.answered_at.is_some());
        if tracked.published.is_none() && !answered_here {
            return;
        }
        let state = tracked.state(kind);
        let key = (state.version.clone(), state.coverage.clone());
        if tracked.published.as_ref() == Some(&key) {
            return;
        }
        tracked.published = Some(key);
        self.session.publish(state);
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Keeps the open-streams gauge right however the stream ends.
struct StreamGuard<'a>(&'a UpstreamContext);

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.0.metrics.stream_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::{Resource as DeltaResource, ResourceName};
    use envoy_types::pb::google::protobuf::Any;

    fn cov(wildcard: bool, names: &[&str]) -> Coverage {
        Coverage {
            wildcard,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn resource(name: &str, content: u8) -> Arc<Resource> {
        Arc::new(Resource {
            kind: ResourceType::Endpoints,
            name: name.to_owned(),
            digest: [content; 32],
            payload: Default::default(),
            json: Default::default(),
        })
    }

    fn held(name: &str, version: &str) -> (String, Held) {
        (
            name.to_owned(),
            Held {
                version: version.to_owned(),
                resource: resource(name, 1),
            },
        )
    }

    #[test]
    fn digest_is_deterministic_and_order_free() {
        let a: BTreeMap<String, Held> = [held("a", "1"), held("b", "2")].into_iter().collect();
        let b: Vec<(String, Held)> = vec![held("b", "2"), held("a", "1")];
        let d = digest(&a);
        assert_eq!(d.len(), VERSION_HEX_DIGITS);
        assert!(d.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(d, digest(b.iter().map(|(n, h)| (n, h))));
        assert_eq!(d, digest(&a), "stable across calls");
        // Any change of a version, a name, or the set changes it.
        let changed: BTreeMap<String, Held> =
            [held("a", "1"), held("b", "3")].into_iter().collect();
        assert_ne!(d, digest(&changed));
        let fewer: BTreeMap<String, Held> = [held("a", "1")].into_iter().collect();
        assert_ne!(d, digest(&fewer));
        // No ambiguity from concatenation.
        let x: BTreeMap<String, Held> = [held("ab", "c")].into_iter().collect();
        let y: BTreeMap<String, Held> = [held("a", "bc")].into_iter().collect();
        assert_ne!(digest(&x), digest(&y));
        // Empty versions are digested by content.
        let mut e1: BTreeMap<String, Held> = [held("a", "")].into_iter().collect();
        let before = digest(&e1);
        e1.get_mut("a").unwrap().resource = resource("a", 2);
        assert_ne!(before, digest(&e1));
        assert_eq!(digest(&BTreeMap::new()), digest(&BTreeMap::new()));
    }

    #[test]
    fn subscription_diffs() {
        let none = Coverage::default();
        assert_eq!(
            diff(&none, &cov(false, &["a", "b"])),
            Diff {
                subscribe: strings(&["a", "b"]),
                unsubscribe: vec![]
            }
        );
        assert_eq!(
            diff(&none, &cov(true, &["a"])),
            Diff {
                subscribe: strings(&["*", "a"]),
                unsubscribe: vec![]
            }
        );
        assert_eq!(
            diff(&cov(false, &["a", "b"]), &cov(false, &["b", "c"])),
            Diff {
                subscribe: strings(&["c"]),
                unsubscribe: strings(&["a"])
            }
        );
        assert_eq!(
            diff(&cov(true, &["a"]), &cov(false, &["a"])),
            Diff {
                subscribe: vec![],
                unsubscribe: strings(&["*"])
            }
        );
        // No interest: everything goes.
        assert_eq!(
            diff(&cov(true, &["a", "b"]), &none),
            Diff {
                subscribe: vec![],
                unsubscribe: strings(&["*", "a", "b"])
            }
        );
        assert!(diff(&cov(true, &["a"]), &cov(true, &["a"])).is_empty());
    }

    fn wire_after(subs: &[Coverage], now: Instant) -> Wire {
        let mut wire = Wire::default();
        for want in subs {
            let sent = wire.sent.clone().unwrap_or_default();
            wire.record(&sent, want, now);
        }
        wire
    }

    fn update(added: &[(&str, &str)], name_only: &[(&str, &str)], removed: &[&str]) -> Update {
        Update {
            added: added.iter().map(|(n, v)| held(n, v)).collect(),
            name_only: name_only
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            removed: strings(removed),
        }
    }

    #[test]
    fn first_response_answers_the_first_subscription() {
        let now = Instant::now();
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(false, &["a", "missing"])], now);
        t.apply(&mut wire, update(&[("a", "1")], &[], &[]), now);
        assert_eq!(t.coverage(), cov(false, &["a", "missing"]));
        assert!(wire.pending.is_empty());
        // A later name is answered only by data or an absence signal.
        let sent = wire.sent.clone().unwrap();
        wire.record(&sent, &cov(false, &["a", "b", "c", "missing"]), now);
        t.apply(&mut wire, update(&[("a", "2")], &[], &[]), now);
        assert_eq!(t.coverage(), cov(false, &["a", "missing"]));
        t.apply(&mut wire, update(&[("b", "1")], &[("c", "")], &[]), now);
        assert_eq!(t.coverage(), cov(false, &["a", "b", "c", "missing"]));
        assert_eq!(t.held.keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn wildcard_coverage_needs_proof() {
        let now = Instant::now();
        // Wildcard in the first subscription: the first response proves it.
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(true, &[])], now);
        t.apply(&mut wire, update(&[], &[], &[]), now);
        assert!(t.coverage().wildcard);

        // Wildcard added later: a response with only known names proves nothing.
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(false, &["a"]), cov(true, &["a"])], now);
        t.apply(&mut wire, update(&[("a", "1")], &[], &[]), now);
        assert!(!t.coverage().wildcard);
        assert!(wire.pending_wildcard.is_some());
        // A name never subscribed explicitly does.
        t.apply(&mut wire, update(&[("x", "1")], &[], &[]), now);
        assert!(t.coverage().wildcard);
        assert!(wire.pending_wildcard.is_none());

        // Not after the wildcard was dropped on the same stream.
        let mut t = Tracked::default();
        let mut wire = wire_after(
            &[cov(false, &["a"]), cov(true, &["a"]), cov(false, &["a"])],
            now,
        );
        t.apply(&mut wire, update(&[("a", "1")], &[], &[]), now);
        let sent = wire.sent.clone().unwrap();
        wire.record(&sent, &cov(true, &["a"]), now);
        t.apply(&mut wire, update(&[("y", "1")], &[], &[]), now);
        assert!(!t.coverage().wildcard);
    }

    #[test]
    fn removals_heartbeats_and_absence() {
        let now = Instant::now();
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(true, &["a"])], now);
        t.apply(&mut wire, update(&[("a", "1"), ("b", "1")], &[], &[]), now);
        let v1 = digest(&t.held);
        // A heartbeat (name, same version, no payload) keeps the resource.
        t.apply(&mut wire, update(&[], &[("a", "1")], &[]), now);
        assert!(t.held.contains_key("a"));
        assert_eq!(digest(&t.held), v1);
        // Name-only at another version: it does not exist any more.
        t.apply(&mut wire, update(&[], &[("a", "2")], &[]), now);
        assert!(!t.held.contains_key("a"));
        // removed_resources.
        t.apply(&mut wire, update(&[], &[], &["b"]), now);
        assert!(t.held.is_empty());
        assert_ne!(digest(&t.held), v1);
        assert_eq!(t.coverage(), cov(true, &["a"]));
    }

    #[test]
    fn unwanted_resources_are_not_held_and_narrowing_forgets() {
        let now = Instant::now();
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(false, &["a", "b"])], now);
        t.apply(&mut wire, update(&[("a", "1"), ("zz", "1")], &[], &[]), now);
        assert_eq!(t.held.keys().collect::<Vec<_>>(), ["a"]);
        assert!(t.narrow(&cov(false, &["b"])));
        assert!(t.held.is_empty());
        assert_eq!(t.coverage(), cov(false, &["b"]));
        assert!(!t.narrow(&cov(false, &["b"])));
        assert!(t.narrow(&Coverage::default()));
        assert_eq!(t.coverage(), Coverage::default());
    }

    #[test]
    fn unanswered_subscriptions_settle_only_on_an_answering_stream() {
        let start = Instant::now();
        let mut t = Tracked::default();
        let mut wire = wire_after(&[cov(false, &["a"])], start);
        // Nothing answered yet on the stream: never settles.
        assert_eq!(wire.next_settle(), None);
        assert!(!t.settle(&mut wire, start + SETTLE * 10));
        t.apply(&mut wire, update(&[("a", "1")], &[], &[]), start);
        let later = start + Duration::from_millis(100);
        let sent = wire.sent.clone().unwrap();
        wire.record(&sent, &cov(true, &["a", "ghost"]), later);
        assert_eq!(wire.next_settle(), Some(later + SETTLE));
        assert!(!t.settle(&mut wire, later + SETTLE / 2));
        assert!(t.settle(&mut wire, later + SETTLE));
        assert_eq!(t.coverage(), cov(true, &["a", "ghost"]));
        assert_eq!(wire.next_settle(), None);
    }

    fn any_cla(name: &str) -> Any {
        // ClusterLoadAssignment { cluster_name (1) = name }.
        let mut value = vec![0x0a, name.len() as u8];
        value.extend_from_slice(name.as_bytes());
        Any {
            type_url: ResourceType::Endpoints.type_url().to_owned(),
            value,
        }
    }

    #[test]
    fn responses_are_decoded_and_checked_as_a_whole() {
        let renderer = Renderer::new(crate::xds::Codec::embedded());
        let kind = ResourceType::Endpoints;
        let with = |name: &str, version: &str, any: Option<Any>| DeltaResource {
            name: name.to_owned(),
            version: version.to_owned(),
            resource: any,
            ..Default::default()
        };
        let ok = DeltaDiscoveryResponse {
            resources: vec![with("a", "1", Some(any_cla("a"))), with("gone", "", None)],
            removed_resources: vec!["b".into()],
            removed_resource_names: vec![ResourceName {
                name: "b".into(),
                ..Default::default()
            }],
            type_url: kind.type_url().into(),
            nonce: "n1".into(),
            ..Default::default()
        };
        let update = decode_update(&renderer, kind, ok.clone()).unwrap();
        assert_eq!(update.added.len(), 1);
        assert_eq!(update.added[0].0, "a");
        assert_eq!(update.added[0].1.version, "1");
        assert_eq!(update.name_only, [("gone".to_string(), String::new())]);
        assert_eq!(update.removed, ["b"]);

        let mut bad = ok.clone();
        bad.resources.push(with("c", "1", Some(any_cla("not-c"))));
        assert!(decode_update(&renderer, kind, bad)
            .unwrap_err()
            .contains("not-c"));
        let mut bad = ok.clone();
        bad.resources.push(with(
            "c",
            "1",
            Some(Any {
                type_url: kind.type_url().into(),
                value: vec![0x0a, 0xff, 0xff, 0xff],
            }),
        ));
        assert!(decode_update(&renderer, kind, bad).is_err());
        let mut bad = ok.clone();
        bad.removed_resources.push("a".into());
        assert!(decode_update(&renderer, kind, bad)
            .unwrap_err()
            .contains("both"));
        let mut bad = ok;
        bad.resources.push(with("a", "2", Some(any_cla("a"))));
        assert!(decode_update(&renderer, kind, bad)
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        for failures in 1..40 {
            let d = backoff(failures);
            assert!(d <= BACKOFF_MAX.mul_f64(1.0 + BACKOFF_JITTER), "{d:?}");
            assert!(d >= BACKOFF_BASE.mul_f64(1.0 - BACKOFF_JITTER), "{d:?}");
        }
    }
}
