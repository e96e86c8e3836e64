//! The upstream side of one session: a SotW `StreamAggregatedResources`
//! stream to the control plane.
//!
//! The task sends the session's subscriptions (node on the first request of
//! each stream), decodes and renders every response off the async threads,
//! publishes what decoded into the session and ACKs it, NACKs with an
//! `error_detail` what did not (keeping the last good state), and forwards
//! suspected REST rejections as NACKs. When the stream breaks it reconnects
//! with jittered exponential backoff and resubscribes, presenting the versions
//! it holds; the session keeps serving its last state meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info, warn, Instrument};

use super::decode::decode_all_off_thread;
use super::reconnect::{backoff, StreamError, StreamGuard, INVALID_ARGUMENT, OUTBOUND_QUEUE};
use super::session::{Command, Session};
use super::UpstreamContext;
use crate::cache::{Coverage, TypeState};
use crate::xds::ResourceType;

/// Subscriptions remembered per type and stream (see [`SentLog`]).
const SENT_LOG_MAX: usize = 64;

/// Last response seen per type: what ACKs and reconnects present.
#[derive(Debug, Default, Clone)]
struct Acked {
    version: String,
    nonce: String,
}

/// Runs the session's upstream stream until the session closes.
pub async fn run(
    ctx: Arc<UpstreamContext>,
    session: Arc<Session>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let span =
        tracing::info_span!("upstream", node = %session.node.id, cluster = %session.node.cluster);
    async move {
        let mut acked: BTreeMap<ResourceType, Acked> = BTreeMap::new();
        let mut failures = 0u32;
        loop {
            let mut stream = Stream::new(&ctx, &session, &mut acked);
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
                    warn!(error = %err, retry_in = ?delay, "upstream stream ended");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// The subscriptions sent for one type on one stream, for telling which of
/// them a response answers.
///
/// SotW does not link a response to the request it answers: a response can
/// answer an older subscription than the one sent last (two clients of one
/// node adding names in quick succession), so labelling it with the latest
/// would let a waiting request take a response that never had its names.
/// A response proves the server saw subscription `i` when it holds a name
/// that `i` added, or when it is the first response of the type on the
/// stream or repeats the last version (a server sends only on a version or
/// subscription change), which then answers the oldest unconfirmed one.
#[derive(Debug, Default)]
struct SentLog {
    /// Subscriptions sent, oldest first; `[0]` is the newest known to have
    /// been seen by the server once `answered`, the rest are unconfirmed.
    subs: Vec<Coverage>,
    answered: bool,
    last_version: Option<String>,
}

impl SentLog {
    fn push(&mut self, coverage: Coverage) {
        self.subs.push(coverage);
        // Bounded even if the server never proves anything seen: forget the
        // oldest unconfirmed subscription.
        if self.subs.len() > SENT_LOG_MAX {
            self.subs.remove(usize::from(self.answered));
        }
    }

    /// What a response of `version` holding `names` surely answers, and
    /// records it: the names (and wildcard) wanted in every subscription from
    /// the newest one it proves seen to the latest.
    fn answer(&mut self, version: &str, names: &BTreeSet<&str>) -> Coverage {
        let first_unconfirmed = usize::from(self.answered);
        let mut seen = self.answered.then_some(0);
        let repeat = self.last_version.as_deref().is_none_or(|v| v == version);
        if repeat && first_unconfirmed < self.subs.len() {
            seen = Some(first_unconfirmed);
        }
        let wants = |c: &Coverage, name: &str| c.wildcard || c.names.contains(name);
        for i in first_unconfirmed..self.subs.len() {
            let added = |name: &&str| {
                wants(&self.subs[i], name) && !(i > 0 && wants(&self.subs[i - 1], name))
            };
            if names.iter().any(added) {
                seen = Some(i);
            }
        }
        self.last_version = Some(version.to_owned());
        let Some(seen) = seen else {
            return Coverage::default();
        };
        self.subs.drain(..seen);
        self.answered = true;
        let mut covered = self.subs[0].clone();
        for later in &self.subs[1..] {
            covered.wildcard &= later.wildcard;
            if !later.wildcard {
                covered.names.retain(|n| later.names.contains(n));
            }
        }
        covered
    }
}

/// One stream's worth of state.
struct Stream<'a> {
    ctx: &'a UpstreamContext,
    session: &'a Session,
    acked: &'a mut BTreeMap<ResourceType, Acked>,
    /// Subscription sent last per type.
    sent: BTreeMap<ResourceType, Coverage>,
    /// Every subscription sent per type, to label responses with.
    sent_log: BTreeMap<ResourceType, SentLog>,
    node_sent: bool,
    answered: bool,
}

impl<'a> Stream<'a> {
    fn new(
        ctx: &'a UpstreamContext,
        session: &'a Session,
        acked: &'a mut BTreeMap<ResourceType, Acked>,
    ) -> Self {
        Stream {
            ctx,
            session,
            acked,
            sent: BTreeMap::new(),
            sent_log: BTreeMap::new(),
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
        let call = client.stream_aggregated_resources(self.ctx.request(ReceiverStream::new(rx)));
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
        info!("upstream stream open");
        loop {
            tokio::select! {
                message = inbound.message() => match message? {
                    Some(response) => self.response(response, &tx).await,
                    None => return Err(StreamError::Closed),
                },
                command = commands.recv() => match command {
                    Some(command) => self.command(command, &tx).await,
                    None => return Ok(()),
                },
            }
        }
    }

    async fn command(&mut self, command: Command, tx: &mpsc::Sender<DiscoveryRequest>) {
        match command {
            Command::Resubscribe(kind) => self.subscribe(kind, tx).await,
            Command::Nack {
                kind,
                presented,
                message,
            } => {
                let nonce = self
                    .acked
                    .get(&kind)
                    .map(|a| a.nonce.clone())
                    .unwrap_or_default();
                let request = self.request(kind, presented, nonce, Some(message));
                self.ctx.metrics.nack(kind);
                let _ = tx.send(request).await;
            }
        }
    }

    /// Sends the session's current subscription for `kind`, if it has one.
    async fn subscribe(&mut self, kind: ResourceType, tx: &mpsc::Sender<DiscoveryRequest>) {
        let Some(coverage) = self.session.subscription(kind) else {
            if self.sent.remove(&kind).is_some() {
                // Nobody wants this type any more: an explicit empty, non-wildcard
                // subscription is not expressible in SotW, so say nothing and
                // ignore what still arrives for it.
                debug!(%kind, "interest dropped");
            }
            return;
        };
        if self.sent.get(&kind) == Some(&coverage) {
            return;
        }
        self.sent.insert(kind, coverage.clone());
        self.sent_log.entry(kind).or_default().push(coverage);
        let acked = self.acked.get(&kind).cloned().unwrap_or_default();
        let request = self.request(kind, acked.version, acked.nonce, None);
        let _ = tx.send(request).await;
    }

    fn request(
        &mut self,
        kind: ResourceType,
        version: String,
        nonce: String,
        error: Option<String>,
    ) -> DiscoveryRequest {
        let names = self
            .sent
            .get(&kind)
            .map(Session::request_names)
            .unwrap_or_default();
        let node = (!self.node_sent).then(|| self.session.node.clone());
        self.node_sent = true;
        DiscoveryRequest {
            version_info: version,
            node,
            resource_names: names,
            type_url: kind.type_url().to_owned(),
            response_nonce: nonce,
            error_detail: error.map(|message| Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
            ..Default::default()
        }
    }

    async fn response(&mut self, response: DiscoveryResponse, tx: &mpsc::Sender<DiscoveryRequest>) {
        self.answered = true;
        self.ctx.ready.mark_ready();
        self.session.mark_fresh();
        let Some(kind) = ResourceType::from_type_url(&response.type_url) else {
            warn!(type_url = %response.type_url, "response for a type the gateway does not serve");
            return;
        };
        let version = response.version_info.clone();
        let nonce = response.nonce.clone();
        let decoded = decode_all_off_thread(&self.ctx.renderer, kind, response.resources).await;
        match decoded {
            Ok(resources) => {
                debug!(%kind, %version, count = resources.len(), "accepted");
                let names: BTreeSet<&str> = resources.keys().map(String::as_str).collect();
                let coverage = match self.sent.get(&kind) {
                    Some(_) => self
                        .sent_log
                        .entry(kind)
                        .or_default()
                        .answer(&version, &names),
                    // Nobody wants the type any more: it answers nobody.
                    None => Coverage::default(),
                };
                self.session.publish(TypeState::new(
                    kind,
                    version.clone(),
                    nonce.clone(),
                    resources,
                    coverage,
                ));
                self.acked.insert(kind, Acked { version, nonce });
                let acked = self.acked[&kind].clone();
                let request = self.request(kind, acked.version, acked.nonce, None);
                self.ctx.metrics.ack(kind);
                let _ = tx.send(request).await;
            }
            Err(reason) => {
                warn!(%kind, %version, %reason, "rejected upstream response (NACK)");
                let previous = self
                    .acked
                    .get(&kind)
                    .map(|a| a.version.clone())
                    .unwrap_or_default();
                let request = self.request(kind, previous, nonce, Some(reason));
                self.ctx.metrics.nack(kind);
                let _ = tx.send(request).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cov(wildcard: bool, names: &[&str]) -> Coverage {
        Coverage {
            wildcard,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
        names.iter().copied().collect()
    }

    #[test]
    fn responses_cover_only_subscriptions_they_prove_seen() {
        let mut log = SentLog::default();
        log.push(cov(false, &["a"]));
        log.push(cov(false, &["a", "b"]));
        // The first response answers the first subscription, not the second.
        assert_eq!(log.answer("1", &set(&["a"])), cov(false, &["a"]));
        // Holding "b" proves the second was seen.
        assert_eq!(log.answer("1", &set(&["a", "b"])), cov(false, &["a", "b"]));
        // A name that does not exist upstream: the same version answers it.
        log.push(cov(false, &["a", "b", "zz"]));
        assert_eq!(
            log.answer("1", &set(&["a", "b"])),
            cov(false, &["a", "b", "zz"])
        );
        // A new version without new names may be a push: proves nothing new.
        log.push(cov(false, &["a", "b", "c", "zz"]));
        assert_eq!(
            log.answer("2", &set(&["a", "b"])),
            cov(false, &["a", "b", "zz"])
        );
        assert_eq!(
            log.answer("2", &set(&["a", "b"])),
            cov(false, &["a", "b", "c", "zz"])
        );
        // Wildcard.
        let mut log = SentLog::default();
        log.push(cov(false, &["a"]));
        log.push(cov(true, &["a"]));
        assert_eq!(log.answer("1", &set(&["a"])), cov(false, &["a"]));
        assert_eq!(log.answer("2", &set(&["a", "x"])), cov(true, &["a"]));
    }
}
