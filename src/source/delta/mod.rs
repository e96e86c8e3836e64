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

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info, warn, Instrument};

mod state;
#[cfg(test)]
mod tests;
mod update;

use self::state::{Tracked, Wire};
use self::update::{decode_update_off_thread, diff, Diff};
use super::reconnect::{backoff, StreamError, StreamGuard, INVALID_ARGUMENT, OUTBOUND_QUEUE};
use super::session::{Command, Session};
use super::UpstreamContext;
use crate::cache::Coverage;
use crate::xds::ResourceType;

/// gRPC code NOT_FOUND in a `resource_errors` entry: the resource is gone.
const NOT_FOUND: i32 = 5;
/// How long a subscription may stay unanswered on a stream that answers the
/// type before it is taken as answered (see the module docs).
pub use super::session::SETTLE;
/// The wildcard subscription name.
const WILDCARD: &str = "*";
/// Hex digits of SHA-256 in a published version.
const VERSION_HEX_DIGITS: usize = 16;

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
                    session.mark_stale();
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
        let _open = StreamGuard::open(self.ctx);
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
        self.session.mark_fresh();
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
