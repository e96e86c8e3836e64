//! The one driver of upstream xDS streams, shared by SotW ([`super::ads`])
//! and delta ([`super::delta`]), on either transport: one aggregated (ADS)
//! stream per session, or one stream per session and type on the type's
//! own service (`--upstream-streams per-type`), each such lane a driver of
//! its own with its own protocol state, fed the session's commands of its
//! type. The call is opened by method path with a generic gRPC client, so
//! the four variants are one code path.
//!
//! Per stream: send what opens it, open the call while still taking the
//! session's commands (they may come before the response headers), then
//! select on responses, commands and the protocol's timer. Every response
//! marks the upstream answered and the session fresh before the protocol
//! takes it. When the stream breaks, the session is marked stale (it keeps
//! serving its last state) and the driver reconnects after a jittered,
//! capped [`Backoff`]; it ends when the session's command channel closes.
//! A [`Protocol`] says what to send and how to take what arrives.
//!
//! Subscription changes are coalesced before they are sent
//! ([`super::coalesce`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::google::rpc::Status;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn, Instrument};

use std::marker::PhantomData;

use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::coalesce::{send, PendingSubscriptions};
use super::registry::Feeder;
use super::session::{Command, Session};
use super::upstream_log::Phase;
use super::UpstreamContext;
use crate::config::UpstreamStreams;
use crate::log_escape::Escaped;
use crate::xds::ResourceType;

/// Requests queued toward one stream before the sender waits.
const OUTBOUND_QUEUE: usize = 64;
/// gRPC code INVALID_ARGUMENT, used in NACK `error_detail`s.
const INVALID_ARGUMENT: i32 = 3;

/// One xDS protocol variant over an ADS stream: what to send, how to take
/// what arrives. One value per session, living across its streams.
pub(crate) trait Protocol: Send + 'static {
    type Request: prost::Message + Send + 'static;
    type Response: prost::Message + Default + Send + 'static;
    /// For logs and `/readyz`: `sotw` or `delta`.
    const MODE: &'static str;
    /// The aggregated (ADS) method that carries every type.
    const AGGREGATED_PATH: &'static str;
    /// Whether a type's own service speaks it as `Delta<X>` (else
    /// `Stream<X>`).
    const DELTA: bool;
    /// Whether it carries the delta-only types (VHDS, LEDS).
    const CARRIES_DELTA_ONLY_TYPES: bool = false;

    /// The protocol of a new session.
    fn new(ctx: Arc<UpstreamContext>, session: Arc<Session>) -> Self;

    /// A new stream begins: forget what belonged to the last one.
    fn reset_stream(&mut self);

    /// The request that tells the stream the session's subscription of
    /// `kind`, if it has not been told it yet.
    fn subscribe(&mut self, kind: ResourceType) -> Option<Self::Request>;

    /// The request NACKing the current response of `kind` on behalf of a
    /// REST client stuck on `presented`, if there is a response to NACK.
    fn nack(
        &mut self,
        kind: ResourceType,
        presented: String,
        message: String,
    ) -> Option<Self::Request>;

    /// The type URL a response is for.
    fn type_url(response: &Self::Response) -> &str;

    /// Takes a response of `kind`; the request it calls for (ACK or NACK).
    fn response(
        &mut self,
        kind: ResourceType,
        response: Self::Response,
    ) -> impl Future<Output = Option<Self::Request>> + Send;

    /// When [`timer`](Self::timer) is next due, if ever.
    fn next_timer(&self) -> Option<Instant> {
        None
    }

    /// The timer fired at `now`.
    fn timer(&mut self, _now: Instant) {}

    /// When a held resource's TTL next runs out, if any has one. Expiry
    /// runs whether a stream is open or not: a TTL is what keeps config
    /// from outliving an unreachable control plane.
    fn next_expiry(&self) -> Option<Instant> {
        None
    }

    /// Drops the resources whose TTL ran out by `now` from what is served.
    fn expire(&mut self, _now: Instant) {}
}

/// Feeds each session from its own upstream stream speaking `P`: one
/// aggregated stream, or one per type the session subscribes to.
pub(crate) struct StreamFeeder<P> {
    ctx: Arc<UpstreamContext>,
    streams: UpstreamStreams,
    protocol: PhantomData<fn() -> P>,
}

impl<P> StreamFeeder<P> {
    pub(crate) fn new(ctx: Arc<UpstreamContext>, streams: UpstreamStreams) -> StreamFeeder<P> {
        StreamFeeder {
            ctx,
            streams,
            protocol: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for StreamFeeder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamFeeder")
            .field("upstream", &self.ctx.uri)
            .finish_non_exhaustive()
    }
}

impl<P: Protocol> Feeder for StreamFeeder<P> {
    fn start(
        &self,
        session: Arc<Session>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        match self.streams {
            UpstreamStreams::Aggregated => {
                let protocol = P::new(self.ctx.clone(), session.clone());
                tokio::spawn(run(self.ctx.clone(), session, commands, protocol, None))
            }
            UpstreamStreams::PerType => {
                tokio::spawn(per_type::<P>(self.ctx.clone(), session, commands))
            }
        }
    }

    fn is_ready(&self) -> bool {
        self.ctx.has_answered()
    }

    fn describe(&self) -> String {
        match self.streams {
            UpstreamStreams::Aggregated => format!("gRPC upstream {} ({})", self.ctx.uri, P::MODE),
            UpstreamStreams::PerType => {
                format!(
                    "gRPC upstream {} ({}, per-type streams)",
                    self.ctx.uri,
                    P::MODE
                )
            }
        }
    }

    fn carries(&self, kind: ResourceType) -> bool {
        P::CARRIES_DELTA_ONLY_TYPES || !kind.delta_only()
    }

    fn upstream(&self) -> Option<&UpstreamContext> {
        Some(&self.ctx)
    }
}

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("upstream stream failed: {0}")]
    Status(#[from] tonic::Status),
    #[error("upstream closed the stream")]
    Closed,
    #[error("{0} has no {1} stream of its own")]
    NoStream(ResourceType, &'static str),
}

/// The gRPC method a stream is opened on: the aggregated one, or the
/// `lane` type's own.
fn method_path<P: Protocol>(lane: Option<ResourceType>) -> Result<String, StreamError> {
    match lane {
        None => Ok(P::AGGREGATED_PATH.to_owned()),
        Some(kind) => kind
            .stream_path(P::DELTA)
            .ok_or(StreamError::NoStream(kind, P::MODE)),
    }
}

/// Per-type streams: one lane (a stream of its own, with its own protocol
/// state, driven by [`run`]) per type the session subscribes to, opened
/// when the first command for the type arrives; the session's commands
/// are handed to the lane of their type. Ends, with every lane, when the
/// session closes.
async fn per_type<P: Protocol>(
    ctx: Arc<UpstreamContext>,
    session: Arc<Session>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut lanes: BTreeMap<ResourceType, (mpsc::UnboundedSender<Command>, JoinHandle<()>)> =
        BTreeMap::new();
    while let Some(command) = commands.recv().await {
        let kind = command.kind();
        let (lane, _) = lanes.entry(kind).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let protocol = P::new(ctx.clone(), session.clone());
            let task = tokio::spawn(run(ctx.clone(), session.clone(), rx, protocol, Some(kind)));
            (tx, task)
        });
        // A lane ends only when its sender is dropped (below).
        let _ = lane.send(command);
    }
    for (_, (lane, task)) in lanes {
        drop(lane);
        let _ = task.await;
    }
}

/// Feeds `session` through `protocol` until the session closes: on the
/// aggregated stream, or (`lane`) on the stream of that one type.
async fn run<P: Protocol>(
    ctx: Arc<UpstreamContext>,
    session: Arc<Session>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut protocol: P,
    lane: Option<ResourceType>,
) {
    let span = tracing::info_span!(
        "upstream",
        mode = P::MODE,
        lane = lane.map(ResourceType::short_name),
        node = %Escaped(&session.node.id),
        cluster = %Escaped(&session.node.cluster)
    );
    async move {
        let mut backoff = Backoff::default();
        loop {
            let mut answered = false;
            let result = one_stream(
                &ctx,
                &session,
                &mut commands,
                &mut protocol,
                lane,
                &mut answered,
            )
            .await;
            let Err(err) = result else { return };
            session.upstream.phase(Phase::Connecting);
            session.stream_failed(lane, err.to_string());
            if answered {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            warn!(error = %Escaped(&err), retry_in = ?delay, "upstream stream ended");
            let retry_at = Instant::now() + delay;
            loop {
                match protocol.next_expiry().filter(|due| *due < retry_at) {
                    Some(due) => {
                        tokio::time::sleep_until(due).await;
                        protocol.expire(Instant::now());
                    }
                    None => break tokio::time::sleep_until(retry_at).await,
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// Ok when the session closed (its command channel is gone); Err when the
/// stream broke. Sets `answered` once a response arrived.
async fn one_stream<P: Protocol>(
    ctx: &UpstreamContext,
    session: &Session,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    protocol: &mut P,
    lane: Option<ResourceType>,
    answered: &mut bool,
) -> Result<(), StreamError> {
    let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
    session.upstream.phase(Phase::Connecting);
    protocol.reset_stream();
    for kind in ResourceType::ALL {
        if lane.is_none_or(|only| only == kind) {
            send(&tx, protocol.subscribe(kind)).await;
        }
    }
    let path = method_path::<P>(lane)?;
    let call = ctx.streaming::<P::Request, P::Response>(&path, ReceiverStream::new(rx));
    tokio::pin!(call);
    let mut pending = PendingSubscriptions::default();
    // Commands may arrive before the response headers do.
    let mut inbound = loop {
        tokio::select! {
            response = &mut call => break response?,
            command = commands.recv() => match command {
                Some(command) => send(&tx, pending.take(protocol, command)).await,
                None => return Ok(()),
            },
            () = sleep_until(pending.deadline) => pending.flush(protocol, &tx).await,
            () = sleep_until(protocol.next_expiry()) => protocol.expire(Instant::now()),
        }
    };
    let _open = StreamGuard::open(ctx);
    session.upstream.phase(Phase::Open);
    info!("upstream stream open");
    loop {
        let timer = protocol
            .next_timer()
            .into_iter()
            .chain(protocol.next_expiry())
            .min();
        tokio::select! {
            message = inbound.message() => match message? {
                Some(response) => {
                    *answered = true;
                    ctx.mark_answered();
                    session.mark_fresh(lane);
                    let type_url = P::type_url(&response);
                    let Some(kind) = ResourceType::from_type_url(type_url) else {
                        warn!(type_url = %Escaped(type_url), "response for a type the gateway does not serve");
                        continue;
                    };
                    if lane.is_some_and(|only| only != kind) {
                        warn!(type_url = %Escaped(type_url), "response for another type on a per-type stream; ignored");
                        continue;
                    }
                    send(&tx, protocol.response(kind, response).await).await;
                }
                None => return Err(StreamError::Closed),
            },
            command = commands.recv() => match command {
                Some(command) => send(&tx, pending.take(protocol, command)).await,
                None => return Ok(()),
            },
            () = sleep_until(pending.deadline) => pending.flush(protocol, &tx).await,
            () = sleep_until(timer) => {
                let now = Instant::now();
                protocol.timer(now);
                protocol.expire(now);
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The `error_detail` of a NACK.
pub(super) fn nack_detail(message: String) -> Status {
    Status {
        code: INVALID_ARGUMENT,
        message,
        details: Vec::new(),
    }
}

/// Keeps the open-streams gauge right however the stream ends.
struct StreamGuard<'a>(&'a UpstreamContext);

impl<'a> StreamGuard<'a> {
    /// Counts a stream as open until the guard drops.
    fn open(ctx: &'a UpstreamContext) -> StreamGuard<'a> {
        ctx.metrics.stream_opened();
        StreamGuard(ctx)
    }
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.0.metrics.stream_closed();
    }
}
