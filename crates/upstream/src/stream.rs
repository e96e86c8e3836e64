//! The one driver of upstream xDS streams, shared by SotW ([`super::sotw`])
//! and delta ([`super::delta`]), on either transport: a session's shared
//! aggregated (ADS) stream and its probes (ADS streams asking one type not
//! yet seen served), or one stream per session and type on the type's own
//! service (`--upstream-streams per-type`). Each stream is a driver of its
//! own with its own protocol state, fed the session's commands of the types
//! it carries ([`super::lanes`] decides which). The call is opened by
//! method path with a generic gRPC client, so the four variants are one
//! code path.
//!
//! Per stream: send what opens it, then select on the call (whose response
//! headers may come after the session's commands), responses, commands and
//! the protocol's timer. The session is fresh again once the stream is up:
//! the server took it, or the upstream answers gRPC health checks while the
//! stream waits (java-control-plane's SotW cache answers nothing to a
//! resubscription at the versions held). Every response marks the upstream
//! answered before the protocol takes it. A stream silent past a
//! failover's `failover-after` is down only if its upstream also fails a
//! health check. When the stream breaks, the session is marked stale (it
//! keeps serving its last state) and the driver reconnects after a
//! jittered, capped [`Backoff`]; it ends when the session's command channel
//! closes, or, for a probe, once its type is answered. A stream that
//! carries one type and is refused before answering it sets the type aside
//! ([`set_aside`]); the shared stream, refused after answering, hands the
//! types it still waited on to probes. A [`Protocol`] says what to send and
//! how to take what arrives; subscription changes are coalesced first
//! ([`super::coalesce`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::google::rpc::Status;
use futures::future::BoxFuture;
use futures::FutureExt as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn, Instrument};

use super::backoff::Backoff;
use super::coalesce::{send, PendingSubscriptions};
use super::connection::{probe, Health};
use super::failover::Route;
use super::lanes::{self, Carrier, LaneOf};
use super::name_check;
use super::UpstreamContext;
use crate::config::UpstreamStreams;
use crate::log_escape::Escaped;
use crate::store::{Command, Feeder, Namespace, PassThrough, PassedThrough, Publisher, Refused};
use crate::store::{Phase, Placement, SourceError, FAILBACK_REASON, FAILOVER_REASON};
use crate::xds::ResourceType;

/// Requests queued toward one stream before the sender waits.
const OUTBOUND_QUEUE: usize = 64;
/// How often a stream silent past its failover-after checks again that
/// its upstream still answers health checks.
const SILENCE_RECHECK: Duration = Duration::from_secs(1);

/// One xDS protocol variant over an ADS stream: what to send, how to take
/// what arrives. One value per session, living across its streams.
pub(crate) trait Protocol: name_check::AskingAlone + Send + 'static {
    type Request: super::frame_codec::ToFrame;
    type Response: super::frame_codec::FromFrame;
    /// For logs and `/readyz`: `sotw` or `delta`.
    const MODE: &'static str;
    /// The aggregated (ADS) method that carries every type.
    const AGGREGATED_PATH: &'static str;
    /// Whether it is delta: a type's own service speaks it as `Delta<X>`
    /// (else `Stream<X>`), and it carries the delta-only types (VHDS, LEDS).
    const DELTA: bool;

    /// The protocol of a new session, whose upstream may send the names of
    /// `namespace`.
    fn new(ctx: Arc<UpstreamContext>, session: Publisher, namespace: Namespace) -> Self;

    /// A new stream begins: forget what belonged to the last one.
    fn reset_stream(&mut self);

    /// The next stream goes to another upstream (a failover, or back):
    /// forget the versions of this one, so that the next one's first
    /// answer per type replaces what is held rather than being diffed
    /// against versions it never issued.
    fn switch_upstream(&mut self);

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

    /// The request NACKing `response`, of a type this stream did not ask
    /// for, with `message`: the protocol expects every response ACKed or
    /// NACKed, and taking it would answer nobody.
    fn refuse_unasked(response: &Self::Response, message: String) -> Self::Request;

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
    fn next_expiry(&self) -> Option<Instant>;

    /// Drops the resources whose TTL ran out by `now` from what is served.
    fn expire(&mut self, now: Instant);

    /// The descriptor pool grew: publishes again what was served opaque
    /// for a type it now knows, rendered in full.
    fn refresh(&mut self);
}

/// Feeds each session from its own upstream stream speaking `P`: one
/// aggregated stream, or one per type the session subscribes to; on the
/// route's primary, or its failover while the primary is unreachable.
pub struct StreamFeeder<P> {
    route: Arc<Route>,
    streams: UpstreamStreams,
    namespace: Namespace,
    protocol: PhantomData<fn() -> P>,
}

impl<P> StreamFeeder<P> {
    /// Streams to `route`'s upstreams, which may send `namespace`'s names.
    pub fn new(route: Route, streams: UpstreamStreams, namespace: Namespace) -> StreamFeeder<P> {
        StreamFeeder {
            route: Arc::new(route),
            streams,
            namespace,
            protocol: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for StreamFeeder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamFeeder")
            .field("upstream", &self.route.primary().uri)
            .finish_non_exhaustive()
    }
}

impl<P: Protocol> Feeder for StreamFeeder<P> {
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        let (route, namespace) = (self.route.clone(), self.namespace.clone());
        let primary = route.primary().clone();
        // Each stream of the session: a protocol state of its own.
        let spawn = move |lane: LaneOf, commands| {
            let protocol = P::new(route.primary().clone(), session.clone(), namespace.clone());
            tokio::spawn(run(
                route.clone(),
                session.clone(),
                commands,
                protocol,
                lane,
            ))
        };
        match self.streams {
            UpstreamStreams::Aggregated => {
                let served = move |kind| primary.served.serves(kind);
                tokio::spawn(lanes::aggregated(commands, served, spawn))
            }
            UpstreamStreams::PerType => tokio::spawn(lanes::per_type(commands, spawn)),
        }
    }

    fn is_ready(&self) -> bool {
        self.route.has_answered()
    }

    fn describe(&self) -> String {
        let upstream = if self.route.fails_over() {
            self.route.describe()
        } else {
            self.route.primary().uri.clone()
        };
        let per_type = match self.streams {
            UpstreamStreams::Aggregated => "",
            UpstreamStreams::PerType => ", per-type streams",
        };
        format!("gRPC upstream {upstream} ({}{per_type})", P::MODE)
    }

    fn carries(&self, kind: ResourceType) -> bool {
        P::DELTA || !kind.delta_only()
    }

    fn upstream_name(&self) -> Option<&str> {
        Some(&self.route.primary().name)
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.route.primary().pass_through(call).boxed()
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
    #[error("upstream did not answer within {0:?} (failover-after)")]
    Silent(Duration),
}

/// How long a stream that answered must have stayed up for its end to
/// start the reconnect backoff over.
const STABLE_STREAM: Duration = Duration::from_secs(30);

impl StreamError {
    /// Whether the connection to the upstream failed (unreachable, reset,
    /// timed out), as opposed to the upstream ending this stream with an
    /// application status (UNKNOWN, UNAUTHENTICATED, INVALID_ARGUMENT, ...),
    /// closing it, or staying silent on it: only the first is evidence
    /// about the upstream's health rather than about this session.
    fn is_connection_failure(&self) -> bool {
        use tonic::Code::{Cancelled, DeadlineExceeded, Unavailable};
        matches!(self, StreamError::Status(status)
            if matches!(status.code(), Unavailable | Cancelled | DeadlineExceeded))
    }
}

/// The gRPC method a stream is opened on: the aggregated one (for a
/// probe too: a control plane may serve ADS alone, as Istio does), or the
/// type's own.
fn method_path<P: Protocol>(carrier: Carrier) -> Result<String, StreamError> {
    match carrier {
        Carrier::Aggregated | Carrier::Probe(_) => Ok(P::AGGREGATED_PATH.to_owned()),
        Carrier::Own(kind) => kind
            .stream_path(P::DELTA)
            .ok_or(StreamError::NoStream(kind, P::MODE)),
    }
}

/// How a stream's task ended without an error.
#[derive(Debug, PartialEq, Eq)]
enum Done {
    /// The session closed (its command channel is gone).
    Closed,
    /// A probe's type was answered: the shared stream takes it.
    Proven,
}

/// Feeds `session` through `protocol` until the session closes (or, for a
/// probe, until its type is answered): on the stream `of` carries (see
/// `lanes.rs`); on the route's primary, moving to its failover while the
/// primary is down (see [`Lane`]).
async fn run<P: Protocol>(
    route: Arc<Route>,
    session: Publisher,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut protocol: P,
    of: LaneOf,
) {
    let lane = of.carrier.lane();
    let span = tracing::info_span!(
        "upstream",
        mode = P::MODE,
        lane = lane.map(ResourceType::short_name),
        probe = of.is_probe(),
        node = %Escaped(&session.node().id),
        cluster = %Escaped(&session.node().cluster)
    );
    async move {
        let mut at = Lane::new(&route, &session, lane);
        let mut backoff = Backoff::default();
        loop {
            let ctx = route.ctx(at.index).clone();
            let mut heard = Heard::default();
            let opened = Instant::now();
            let silence = route.failover_from(at.index).map(|(_, after)| after);
            let ended = tokio::select! {
                result = one_stream(&ctx, &session, &mut commands, &mut protocol, &of, &mut heard, silence) => result,
                () = route.primary_back(at.index, at.failed_returns) => {
                    at.move_to(&route, &session, 0, format!("{FAILBACK_REASON}: the primary answers health checks again"));
                    protocol.switch_upstream();
                    backoff.reset();
                    continue;
                }
            };
            let err = match ended {
                Ok(Done::Closed) => return,
                Ok(Done::Proven) => {
                    info!("the upstream answered the probed type: the session's shared stream takes it");
                    session.upstream().unplace(lane);
                    of.proven();
                    return;
                }
                Err(err) => err,
            };
            let answered = heard.answered;
            session.upstream().phase(Phase::Connecting);
            let served_before = answered || ctx.served.any();
            if let Some(kind) = set_aside(&session, of.carrier, &err, served_before) {
                info!(%kind, error = %Escaped(&err), "the upstream refused the type: set aside; the session's other types go on");
                // Its own stream: nothing else rides on it. Wait for a
                // client to ask again once its time is up.
                match commands.recv().await {
                    Some(_) => continue,
                    None => return,
                }
            }
            let carries_many_names = matches!(of.carrier, Carrier::Aggregated | Carrier::Own(_));
            if carries_many_names && answered && refusal(&err).is_some() {
                // The upstream ended the stream itself after answering: the
                // names it still waited on are checked apart; a type it
                // waited on with no such name is asked apart.
                let path = method_path::<P>(of.carrier).unwrap_or_default();
                let mut awaiting = Vec::new();
                for kind in heard.awaiting {
                    if !name_check::hold_and_check::<P>(&ctx, &session, kind, path.clone()).await {
                        awaiting.push(kind);
                    }
                }
                if of.carrier == Carrier::Aggregated && !awaiting.is_empty() {
                    let kinds: Vec<&str> = awaiting.iter().map(|k| k.short_name()).collect();
                    info!(types = ?kinds, error = %Escaped(&err), "the upstream ended the shared stream: the types it had not answered are probed apart");
                    of.demote(awaiting);
                }
            }
            session.stream_failed(lane, err.to_string());
            if err.is_connection_failure() {
                // Only the link's failure says the upstream is unwell; an
                // application error ends this session's stream alone (one
                // tenant's refused type must not hold back another's
                // failback).
                ctx.health.broke();
            }
            if answered {
                at.answered();
                // Only a stream that stayed up a while starts the backoff
                // over: one the upstream answers and then ends at once (a
                // type or name it now refuses) would otherwise reconnect
                // several times a second.
                if opened.elapsed() >= STABLE_STREAM {
                    backoff.reset();
                }
            }
            let failover_at = match at.stream_failed(&route) {
                AfterFailure::FailOver(next) => {
                    let reason = format!("{FAILOVER_REASON}: {} unreachable: {err}", ctx.name);
                    warn!(error = %Escaped(&err), to = %route.ctx(next).name, "upstream stream ended; failing over");
                    at.move_to(&route, &session, next, reason);
                    protocol.switch_upstream();
                    backoff.reset();
                    continue;
                }
                AfterFailure::Retry { failover_at } => failover_at,
            };
            let delay = backoff.next_delay();
            warn!(error = %Escaped(&err), retry_in = ?delay, "upstream stream ended");
            // Backoff never sleeps past the time to fail over.
            let retry_at = failover_at.into_iter().fold(Instant::now() + delay, Ord::min);
            while let Some(due) = protocol.next_expiry().filter(|due| *due < retry_at) {
                tokio::time::sleep_until(due).await;
                protocol.expire(Instant::now());
            }
            tokio::time::sleep_until(retry_at).await;
        }
    }
    .instrument(span)
    .await
}

/// How the upstream refused what a stream asked, if `err` is its own
/// application error ([`name_check::status_refusal`]; a stream's own
/// service missing is UNIMPLEMENTED).
fn refusal(err: &StreamError) -> Option<(Refused, tonic::Code)> {
    match err {
        StreamError::NoStream(..) => Some((
            Refused::Unimplemented(err.to_string()),
            tonic::Code::Unimplemented,
        )),
        StreamError::Status(status) => name_check::status_refusal(status),
        StreamError::Closed | StreamError::Silent(_) => None,
    }
}

/// The type to set aside after a stream carrying `carrier` ended with
/// `err`, if that is evidence the upstream refused the type: the stream
/// carried that type alone, and the upstream refused it ([`refusal`])
/// before ever answering it, while it had served something else (this
/// stream answered, the upstream answered some type on any stream, or the
/// session holds a state: `served_before`); a stream refused before
/// anything may be refused as a whole. On a type's own service an
/// UNIMPLEMENTED method is the type's; on a probe (the aggregated method)
/// it is every type's (auto mode looks for another). The shared aggregated
/// stream sets nothing aside: the upstream does not say which of its types
/// it ended it for.
fn set_aside(
    session: &Publisher,
    carrier: Carrier,
    err: &StreamError,
    served_before: bool,
) -> Option<ResourceType> {
    use tonic::Code;
    let (refused, code) = refusal(err)?;
    let served_before = served_before || session.has_state();
    let kind = match carrier {
        Carrier::Aggregated => return None,
        Carrier::Own(kind) if code == Code::Unimplemented => kind,
        Carrier::Probe(_) if code == Code::Unimplemented => return None,
        Carrier::Own(kind) | Carrier::Probe(kind)
            if session.state(kind).is_none() && served_before =>
        {
            kind
        }
        Carrier::Own(_) | Carrier::Probe(_) => return None,
    };
    session.unserved().set_aside(kind, refused, Instant::now());
    Some(kind)
}

/// What a lane does after one of its streams failed.
#[derive(Debug, PartialEq, Eq)]
enum AfterFailure {
    /// Move to the upstream at this index of the route now.
    FailOver(usize),
    /// Retry the same upstream; fail over at `failover_at` if it is still
    /// down then (`None`: it has no failover).
    Retry { failover_at: Option<Instant> },
}

/// Where one lane of a session is on its route, and since when the
/// upstream it is on has been down.
#[derive(Default)]
struct Lane {
    lane: Option<ResourceType>,
    /// Index into the route.
    index: usize,
    /// Whether the upstream at `index` has answered since the lane came.
    answered_here: bool,
    /// When its streams began failing without an answer in between.
    down_since: Option<Instant>,
    /// Returns to the primary that failed before it answered, in a row.
    failed_returns: u32,
}

impl Lane {
    fn new(route: &Route, session: &Publisher, lane: Option<ResourceType>) -> Lane {
        if route.fails_over() {
            let primary = &route.primary().name;
            session
                .upstream()
                .place(lane, Placement::now(primary, "primary".into()));
        }
        Lane {
            lane,
            ..Lane::default()
        }
    }

    fn answered(&mut self) {
        self.answered_here = true;
        self.down_since = None;
        if self.index == 0 {
            self.failed_returns = 0;
        }
    }

    /// A stream of this lane just failed: records since when the upstream
    /// has been down (the first failure with no answer since), and says
    /// whether to fail over now (at once if the upstream never answered the
    /// lane since it came: it cannot be opened; else once it has been down
    /// for its `failover-after`) or to retry, and until when.
    fn stream_failed(&mut self, route: &Route) -> AfterFailure {
        let Some((next, after)) = route.failover_from(self.index) else {
            return AfterFailure::Retry { failover_at: None };
        };
        let due = *self.down_since.get_or_insert_with(Instant::now) + after;
        if !self.answered_here || Instant::now() >= due {
            AfterFailure::FailOver(next)
        } else {
            AfterFailure::Retry {
                failover_at: Some(due),
            }
        }
    }

    fn move_to(&mut self, route: &Route, session: &Publisher, to: usize, reason: String) {
        let (from, to_ctx) = (route.ctx(self.index), route.ctx(to));
        let failback = to < self.index;
        if self.index == 0 && !self.answered_here {
            // Leaving the primary before it answered: a return that failed
            // (or a first stream that did), which makes the next wait longer.
            self.failed_returns += 1;
        }
        info!(from = %from.name, to = %to_ctx.name, reason = %Escaped(&reason), "session stream moved");
        from.metrics
            .upstream_switched(&from.name, &to_ctx.name, failback);
        session
            .upstream()
            .place(self.lane, Placement::now(&to_ctx.name, reason));
        self.index = to;
        self.answered_here = false;
        self.down_since = None;
    }
}

/// What one stream heard: whether anything arrived on it, and which types
/// it asked for and has not answered since.
#[derive(Debug, Default)]
struct Heard {
    answered: bool,
    awaiting: BTreeSet<ResourceType>,
}

/// The request subscribing `kind` on a stream carrying `of`'s types (it
/// then awaits an answer), if there is one to send: none for a type the
/// stream does not carry (a command for it may have been queued before the
/// type moved to a probe).
fn subscribe<P: Protocol>(
    of: &LaneOf,
    protocol: &mut P,
    heard: &mut Heard,
    kind: ResourceType,
) -> Option<P::Request> {
    let request = of.carries(kind).then(|| protocol.subscribe(kind))??;
    heard.awaiting.insert(kind);
    Some(request)
}

/// Ok when the session closed (its command channel is gone), or a probe's
/// type was answered; Err when the stream broke. Records in `heard` what
/// arrived.
async fn one_stream<P: Protocol>(
    ctx: &Arc<UpstreamContext>,
    session: &Publisher,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    protocol: &mut P,
    of: &LaneOf,
    heard: &mut Heard,
    silence: Option<std::time::Duration>,
) -> Result<Done, StreamError> {
    let lane = of.carrier.lane();
    // With a failover to go to, an upstream that does not answer within
    // its failover-after and fails a health check then (a listener that
    // accepts and never speaks) is down. One that answers health checks
    // has only nothing new to say: a server need not answer a
    // resubscription at the versions the session holds.
    let deadline = silence.map(|after| Instant::now() + after);
    let silent = || StreamError::Silent(silence.unwrap_or_default());
    // Whether the upstream is known up while the stream waits for its first
    // answer: the session is then fresh, its state current.
    let mut up = false;
    let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
    session.upstream().phase(Phase::Connecting);
    ctx.reflection_settled().await;
    protocol.reset_stream();
    for kind in ResourceType::all() {
        send(&tx, subscribe(of, protocol, heard, kind)).await;
    }
    let path = method_path::<P>(of.carrier)?;
    let call = ctx.streaming::<P::Request, P::Response>(&path, ReceiverStream::new(rx));
    tokio::pin!(call);
    let mut pending = PendingSubscriptions::default();
    let mut grown = ctx.intake.codec().descriptors().grown();
    // Commands may arrive before the response headers do.
    let (mut inbound, mut _open) = (None, None);
    loop {
        let timer = protocol
            .next_timer()
            .into_iter()
            .chain(protocol.next_expiry())
            .min();
        let open = inbound.is_some();
        let message = async {
            match inbound.as_mut() {
                Some(inbound) => tonic::Streaming::message(inbound).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            response = &mut call, if !open => {
                inbound = Some(response?);
                _open = Some(StreamGuard::open(ctx));
                info!("upstream stream open");
                grown.borrow_and_update();
                // The server took the stream: it is up, whether or not it
                // has anything to send.
                if !up {
                    up = stream_up(session, lane);
                }
            }
            () = Health::healthy_for(ctx, Duration::ZERO), if !up => {
                info!("upstream answers health checks; the stream has nothing new to say yet");
                up = stream_up(session, lane);
            }
            message = message => match message? {
                Some(response) => {
                    heard.answered = true;
                    ctx.mark_answered();
                    session.upstream().fresh(lane);
                    let type_url = P::type_url(&response);
                    let Some(kind) = ResourceType::from_type_url(type_url) else {
                        warn!(type_url = %Escaped(type_url), "response for a type the gateway does not serve: NACKed");
                        let message = format!("xds-gateway does not serve {type_url} and did not ask for it");
                        send(&tx, Some(P::refuse_unasked(&response, message))).await;
                        continue;
                    };
                    session.unserved().served(kind);
                    if let Some(only) = lane.filter(|only| *only != kind) {
                        warn!(type_url = %Escaped(type_url), "response for another type on a per-type stream: NACKed");
                        let message = format!("this stream asked for {} only", only.type_url());
                        send(&tx, Some(P::refuse_unasked(&response, message))).await;
                        continue;
                    }
                    if of.carries(kind) {
                        ctx.served.saw(kind);
                    }
                    heard.awaiting.remove(&kind);
                    send(&tx, protocol.response(kind, response).await).await;
                    if of.is_probe() {
                        return Ok(Done::Proven);
                    }
                }
                None => return Err(StreamError::Closed),
            },
            command = commands.recv() => {
                let nack = |kind, presented, message| protocol.nack(kind, presented, message);
                if !pending.command(command, &tx, nack).await {
                    return Ok(Done::Closed);
                }
            }
            () = sleep_until(pending.deadline) => {
                pending.flush(&tx, |kind| subscribe(of, protocol, heard, kind)).await
            }
            () = sleep_until(timer) => {
                let now = Instant::now();
                protocol.timer(now);
                protocol.expire(now);
            }
            Ok(()) = grown.changed(), if open => protocol.refresh(),
            () = silent_and_down(ctx, deadline.filter(|_| !heard.answered)) => return Err(silent()),
        }
    }
}

/// The stream on `lane` is up, though nothing may have arrived on it: the
/// session is fresh. It is no answer for backoff and failover, which go by
/// what arrived: a health check passing while the stream's own connection
/// fails would keep resetting the time a primary has been down, and it would
/// never fail over. Returns true.
fn stream_up(session: &Publisher, lane: Option<ResourceType>) -> bool {
    session.upstream().phase(Phase::Open);
    session.upstream().fresh(lane);
    true
}

/// Resolves when a stream silent until `deadline` is down: its upstream
/// fails a health check at the deadline or after it (checked every
/// [`SILENCE_RECHECK`] while it passes); never without a deadline.
async fn silent_and_down(ctx: &UpstreamContext, deadline: Option<Instant>) {
    let Some(deadline) = deadline else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(deadline).await;
    while probe::answers_health_check(ctx).await.is_ok() {
        tokio::time::sleep(SILENCE_RECHECK).await;
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
        code: tonic::Code::InvalidArgument as i32,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SessionNode;

    /// A session that was served clusters and subscribes runtime too.
    fn served_session() -> Publisher {
        let (session, _commands) = Publisher::new(SessionNode::default());
        for kind in [ResourceType::Clusters, ResourceType::Runtime] {
            let names = crate::cache::Names::Wildcard;
            session
                .subscribe(kind, &names, 10)
                .unwrap_or_else(|e| panic!("{e:?}"));
        }
        session.publish(crate::cache::TypeState::new(
            ResourceType::Clusters,
            "v1".into(),
            "n1".into(),
            crate::cache::ResourceMap::new(),
            crate::cache::Coverage::default(),
        ));
        session
    }

    #[test]
    fn only_what_the_upstream_said_of_a_stream_carrying_one_type_sets_it_aside() {
        let transport =
            tonic::Status::from_error(Box::new(std::io::Error::other("connection reset")));
        assert!(std::error::Error::source(&transport).is_some());
        let (rtds, probe) = (ResourceType::Runtime, Carrier::Probe(ResourceType::Runtime));
        let unknown = || tonic::Status::unknown("Application error processing RPC");
        let cases = [
            (unknown(), probe, Some(rtds)),
            (unknown(), Carrier::Own(rtds), Some(rtds)),
            // The shared stream: the upstream does not say for which type.
            (unknown(), Carrier::Aggregated, None),
            (
                tonic::Status::unauthenticated(
                    "the api generator requires an authenticated control-plane identity",
                ),
                probe,
                Some(rtds),
            ),
            (transport, probe, None),
            (tonic::Status::unavailable("restarting"), probe, None),
            // The aggregated method's, every type's.
            (tonic::Status::unimplemented("no delta"), probe, None),
            (
                tonic::Status::unimplemented("no delta"),
                Carrier::Aggregated,
                None,
            ),
            (
                tonic::Status::unimplemented("no RTDS"),
                Carrier::Own(rtds),
                Some(rtds),
            ),
        ];
        for (status, carrier, expected) in cases {
            let session = served_session();
            let what = format!("{:?} on {carrier:?}", status.code());
            let err = StreamError::Status(status);
            assert_eq!(set_aside(&session, carrier, &err, true), expected, "{what}");
        }
        // A type answered before is not refused now: its stream retries.
        let session = served_session();
        let err = StreamError::Status(unknown());
        let cds = Carrier::Probe(ResourceType::Clusters);
        assert_eq!(set_aside(&session, cds, &err, true), None);
        // A stream refused before anything was served sets nothing aside;
        // once the upstream served any type, the probe's end is evidence.
        let (fresh, _commands) = Publisher::new(SessionNode::default());
        assert_eq!(set_aside(&fresh, probe, &err, false), None);
        assert_eq!(set_aside(&fresh, probe, &err, true), Some(rtds));
    }
}
