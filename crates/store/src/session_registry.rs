//! Sessions as a [`Source`]: the registry of live sessions, one per node
//! identity and upstream that owns names, and how a poll is answered from
//! them.
//!
//! A session is created for the first client of an identity (bounded in
//! number and in the bytes of the nodes sessions hold, and per principal by
//! its share of `--max-sessions`: a session counts against the principal
//! whose request opened it until it closes), shared by every later one
//! (fan-in), and closed when no client has polled it for the idle
//! timeout; names nobody asks for any more are pruned on the same sweep.
//! What feeds a session (an upstream stream, the upstream's unary calls,
//! the snapshot) is the [`Feeder`]'s business; the registry only starts
//! it, and asks a feeder that is not pushed to to freshen a type before a
//! poll reads it. With several upstreams owning names, each has a lane of
//! sessions fed by its own feeder, and a poll is routed to the lanes owning
//! its names (`federation.rs`).
//!
//! The global map is locked only to look up, insert and remove: a new
//! identity's node is decoded outside it (a few at a time, big ones on a
//! blocking thread), so a client sending a huge node never stalls the polls
//! of existing sessions.
//!
//! A poll records the client's names in the session (widening the upstream
//! subscription if needed), then waits, bounded, for a state that covers
//! them: at once once those names have been asked for longer than
//! [`SETTLE`] (servers send nothing for names that do not exist), else up to
//! the first-response timeout.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use tokio::sync::{watch, Semaphore};
use tracing::info;

use super::federation::{merge, Routes, UpstreamSlot};
use super::feeder::Feeder;
use super::namespace::Namespace;
use super::node::{decode_node, NodeInterner};
use super::polled::{suspicion_message, PollChannel, Polled};
use super::publisher::Publisher;
use super::session::{wait_for_change, wait_for_coverage, Command, InFlight, Session, SETTLE};
use super::view::SessionView;
use super::{
    Feed, Inspect, PassThrough, PassedThrough, Source, SourceError, Status, SESSION_ERRORS_SHOWN,
};
use crate::cache::{upstream_version, IdentityKey, Intake, ParsedRequest, TypeState};
use crate::config::Config;
use crate::log_escape::Escaped;
use crate::metrics::Metrics;
use crate::observe::ConfigHistory;
use crate::observe::Suspicion;
use crate::shares::{Share, SharePlace, Tenant};
use crate::sync::AbortOnDrop;
use crate::xds::ResourceType;

/// How often idle sessions and stale names are swept, at most.
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(5);
/// New nodes decoded at once, at most (each costs CPU and transient memory
/// in proportion to its size).
const DECODES_AT_ONCE: usize = 4;
/// Nodes larger than this (JSON bytes) are decoded on a blocking thread.
const DECODE_OFF_THREAD_BYTES: usize = 64 * 1024;

/// The limits and policies sessions are run with (from [`Config`]).
#[derive(Debug, Clone)]
struct Limits {
    max_sessions: usize,
    max_session_bytes: usize,
    max_names_per_session: usize,
    idle_timeout: Duration,
    first_response_timeout: Duration,
    forward_rejections: bool,
    /// What the sessions' streams may hold of upstream answers at once
    /// (the memory budget's share; `None` without a budget).
    max_answer_bytes: Option<u64>,
}

/// A [`Source`] of sessions, in one lane per upstream that owns names.
#[derive(Debug)]
pub struct Sessions {
    /// The default upstream's first; one alone without federation.
    lanes: Box<[Lane]>,
    /// With several lanes: which owns each name, and merged answers.
    routes: Option<Routes>,
    sessions: Mutex<Registry>,
    decoding: Semaphore,
    /// The extension lists of the sessions' nodes, one per distinct list.
    nodes: NodeInterner,
    intake: Intake,
    /// Where every session records what it publishes (and the NACKs).
    history: ConfigHistory,
    metrics: Arc<Metrics>,
    limits: Limits,
    /// What each principal holds of `--max-sessions`.
    share: Share,
    /// What each principal's sessions hold of `--max-session-bytes`.
    bytes_share: Share,
    sweeper: Mutex<Option<AbortOnDrop>>,
}

/// The sessions serving one upstream's names, and what feeds them.
#[derive(Debug)]
struct Lane {
    /// With several upstreams, the `[[upstream]]` whose names it serves.
    serves: Option<String>,
    feeder: Arc<dyn Feeder>,
}

impl Lane {
    /// `what` said of this lane, among several.
    fn label(&self, what: String) -> String {
        match &self.serves {
            Some(upstream) => format!("{upstream}: {what}"),
            None => what,
        }
    }
}

/// The live sessions and the node bytes they hold.
#[derive(Debug)]
struct Registry {
    /// One map per lane, in the lanes' order.
    lanes: Box<[HashMap<IdentityKey, Entry>]>,
    /// Sessions in every lane.
    open: usize,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    session: Arc<Session>,
    /// What it counts in [`Registry::bytes`].
    bytes: usize,
    /// Its place in the share of the principal that opened it (given
    /// back when the entry goes: the session closed).
    _share: Option<SharePlace>,
    /// Its bytes in that principal's share of `--max-session-bytes`.
    _bytes_share: Option<SharePlace>,
}

impl Registry {
    /// Whether a new session whose node is `bytes` may open: within the
    /// count, the nodes' bytes, and (with a memory budget) the answers its
    /// stream and every other would hold if the upstream's largest answer
    /// reached them all at once (`answer`: its bytes).
    fn room_for(&self, bytes: usize, answer: usize, limits: &Limits) -> Result<(), SourceError> {
        if self.open >= limits.max_sessions {
            return Err(SourceError::TooManySessions {
                max: limits.max_sessions,
            });
        }
        if let Some(max) = limits.max_answer_bytes {
            let streams = self.open as u64 + 1;
            if streams.saturating_mul(answer as u64) > max {
                return Err(SourceError::AnswerBytes {
                    sessions: self.open,
                    answer,
                    max,
                });
            }
        }
        if self.bytes.saturating_add(bytes) > limits.max_session_bytes {
            return Err(SourceError::SessionBytes {
                held: self.bytes,
                wanted: bytes,
                max: limits.max_session_bytes,
            });
        }
        Ok(())
    }

    fn existing(&self, lane: usize, key: &IdentityKey) -> Option<Arc<Session>> {
        let session = &self.lanes[lane].get(key)?.session;
        session.touch();
        Some(session.clone())
    }
}

impl Sessions {
    /// Sessions fed by `feeder`, swept for idleness in the background until
    /// [`Feed::close`] or the last handle drops.
    pub fn start(
        feeder: Arc<dyn Feeder>,
        intake: Intake,
        history: ConfigHistory,
        metrics: Arc<Metrics>,
        config: &Config,
    ) -> Arc<Sessions> {
        let lanes = Box::new([Lane {
            serves: None,
            feeder,
        }]);
        Sessions::of_lanes(lanes, None, intake, history, metrics, config)
    }

    /// Sessions of several upstreams, one lane per slot (the default
    /// first), each poll routed to the slots owning its names by
    /// `namespace`.
    pub fn federated(
        slots: Vec<UpstreamSlot>,
        namespace: Namespace,
        intake: Intake,
        history: ConfigHistory,
        metrics: Arc<Metrics>,
        config: &Config,
    ) -> Arc<Sessions> {
        let owners = slots.iter().map(|slot| slot.name.clone()).collect();
        let lanes = slots
            .into_iter()
            .map(|slot| Lane {
                serves: Some(slot.name),
                feeder: slot.feeder,
            })
            .collect();
        let routes = Some(Routes::new(namespace, owners));
        Sessions::of_lanes(lanes, routes, intake, history, metrics, config)
    }

    fn of_lanes(
        lanes: Box<[Lane]>,
        routes: Option<Routes>,
        intake: Intake,
        history: ConfigHistory,
        metrics: Arc<Metrics>,
        config: &Config,
    ) -> Arc<Sessions> {
        let registry = Registry {
            lanes: lanes.iter().map(|_| HashMap::new()).collect(),
            open: 0,
            bytes: 0,
        };
        let sessions = Arc::new(Sessions {
            lanes,
            routes,
            sessions: Mutex::new(registry),
            decoding: Semaphore::new(DECODES_AT_ONCE),
            nodes: NodeInterner::default(),
            intake,
            history,
            metrics,
            limits: Limits {
                max_sessions: config.max_sessions,
                max_session_bytes: config.max_session_bytes,
                max_names_per_session: config.max_names_per_session,
                idle_timeout: config.idle_timeout,
                first_response_timeout: config.first_response_timeout,
                forward_rejections: config.forward_rejections,
                max_answer_bytes: config.memory.budget.map(|_| config.memory.answers),
            },
            share: Share::new(
                "max-sessions",
                "sessions",
                config.max_sessions,
                config.principal_share,
            ),
            bytes_share: Share::new(
                "max-session-bytes",
                "bytes of nodes",
                config.max_session_bytes,
                config.principal_share,
            ),
            sweeper: Mutex::default(),
        });
        let every = (config.idle_timeout / 4).clamp(Duration::from_millis(50), SWEEP_EVERY_MAX);
        let weak = Arc::downgrade(&sessions);
        let sweeper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(sessions) = weak.upgrade() else {
                    return;
                };
                sessions.sweep(Instant::now());
            }
        });
        *crate::sync::lock(&sessions.sweeper) = Some(AbortOnDrop(sweeper));
        sessions
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Map operations are single inserts/removes: never half-done.
        crate::sync::lock(&self.sessions)
    }

    /// The session of the request's identity in `lane`, created (and its
    /// feeder started) for the first client of that identity. The request's
    /// `node` is decoded only then, outside the registry's lock. A new
    /// session counts against `tenant`'s share until it closes.
    async fn session(
        &self,
        lane: usize,
        request: &ParsedRequest,
        tenant: Option<&Tenant>,
    ) -> Result<Arc<Session>, SourceError> {
        let key = request.identity();
        let bytes = request.node_bytes();
        {
            let registry = self.lock();
            if let Some(session) = registry.existing(lane, key) {
                return Ok(session);
            }
            self.share.check(tenant)?;
            self.bytes_share.check_weighing(tenant, bytes)?;
            registry.room_for(bytes, self.intake.largest_answer(), &self.limits)?;
        }
        // The semaphore is never closed.
        let _decoding = self.decoding.acquire().await;
        if let Some(session) = self.lock().existing(lane, key) {
            return Ok(session);
        }
        let node = if bytes > DECODE_OFF_THREAD_BYTES {
            let (intake, node) = (self.intake.clone(), request.node_json_bytes());
            tokio::task::spawn_blocking(move || decode_node(&intake, node.as_deref()))
                .await
                .map_err(|e| SourceError::InvalidNode(format!("decoder task failed: {e}")))??
        } else {
            decode_node(&self.intake, request.node_json())?
        };
        let mut registry = self.lock();
        if let Some(session) = registry.existing(lane, key) {
            return Ok(session);
        }
        registry.room_for(bytes, self.intake.largest_answer(), &self.limits)?;
        let share = self.share.take(tenant)?;
        let bytes_share = self.bytes_share.take_weighing(tenant, bytes)?;
        let history = self
            .history
            .recorder(key.as_str(), &node.id, &node.cluster)
            .owned_by(tenant.map(Tenant::name));
        let node = self
            .nodes
            .intern(node)
            .with_parameters(request.parameters().clone());
        let (session, commands) = Session::recorded(node, Some(history));
        let publisher = Publisher(session.clone());
        session.attach_task(self.lanes[lane].feeder.start(publisher, commands));
        info!(node = %Escaped(&session.node.id), cluster = %Escaped(&session.node.cluster), node_bytes = bytes, "session opened");
        registry.lanes[lane].insert(
            key.clone(),
            Entry {
                session: session.clone(),
                bytes,
                _share: share,
                _bytes_share: bytes_share,
            },
        );
        registry.bytes += bytes;
        registry.open += 1;
        self.metrics.set_sessions(registry.open);
        Ok(session)
    }

    /// Closes idle sessions and prunes names nobody asked for recently.
    fn sweep(&self, now: Instant) {
        let idle_timeout = self.limits.idle_timeout;
        let mut registry = self.lock();
        let mut freed = 0;
        for lane in registry.lanes.iter_mut() {
            lane.retain(|_, entry| {
                let session = &entry.session;
                if session.idle_for(now) >= idle_timeout {
                    info!(node = %Escaped(&session.node.id), "session idle: closed");
                    session.close();
                    freed += entry.bytes;
                    false
                } else {
                    session.prune(now, idle_timeout);
                    true
                }
            });
        }
        registry.bytes -= freed;
        registry.open = registry.lanes.iter().map(HashMap::len).sum();
        self.metrics.set_sessions(registry.open);
    }

    /// Waits up to `wait` for a state covering `names` (see
    /// `wait_for_coverage`), and ends the wait at once, with the error its
    /// polls get, if the upstream refuses the type meanwhile.
    async fn first_state(
        session: &Session,
        kind: ResourceType,
        rx: super::session::StateRx,
        names: &crate::cache::Names,
        wait: Duration,
    ) -> Result<Option<Arc<TypeState>>, SourceError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let set_aside = session.unserved.next_set_aside();
            let waiting =
                wait_for_coverage(rx.clone(), names, deadline - tokio::time::Instant::now());
            tokio::select! {
                state = waiting => return Ok(state),
                () = set_aside => session.unserved.refuse(kind, names, Instant::now())?,
            }
        }
    }

    /// Forgets the merged answers kept for polls across upstreams (for the
    /// bench of what keeping them earns).
    #[doc(hidden)]
    pub fn forget_merges(&self) {
        if let Some(routes) = &self.routes {
            routes.merges.invalidate_all();
        }
    }

    async fn poll_lane(
        &self,
        lane: usize,
        kind: ResourceType,
        request: &ParsedRequest,
        tenant: Option<&Tenant>,
    ) -> Result<Polled, SourceError> {
        let feeder = &self.lanes[lane].feeder;
        if let Some(pending) = feeder.pending() {
            pending.await?;
        }
        if !feeder.carries(kind) {
            let from = feeder.describe();
            return Err(SourceError::DeltaOnly { kind, from });
        }
        if let Some(unavailable) = feeder.unavailable() {
            return Err(unavailable);
        }
        if request.node_id().is_empty() && feeder.upstream_name().is_some() {
            return Err(SourceError::NoNodeId);
        }
        let session = self.session(lane, request, tenant).await?;
        let now = tokio::time::Instant::now();
        session.unserved.refuse(kind, request.names(), now)?;
        let serving = session.serving();
        let names = request.names();
        let max = self.limits.max_names_per_session;
        let (rx, settled) = session
            .want(kind, names, SETTLE, max)
            .map_err(|e| SourceError::TooManyNames { kind, max: e.max })?;
        if session.unserved.due(kind, now) || session.unserved.names_due(kind, names, now) {
            // Set aside, and its time is up: ask the upstream again.
            session.send(Command::Resubscribe(kind));
        }
        let freshen_every = feeder.freshened_every();
        if freshen_every.is_some() {
            // Asked rather than pushed to: the state is brought up to date
            // first. A poll with no state to fall back on gets the failure.
            if let Err(failed) = session.freshen(kind).await {
                if session.state(kind).is_none() {
                    return Err(failed);
                }
            }
        }
        let within = self.limits.first_response_timeout;
        // A name being checked alone has no answer yet, however long ago it
        // was first asked: the poll waits for the check as for a first
        // answer (it ends in the name's state, or in its refusal).
        let checking = session.unserved.checking_any(kind, names);
        let first_wait = if settled && !checking {
            Duration::ZERO
        } else {
            within
        };
        let state = Self::first_state(&session, kind, rx.clone(), names, first_wait)
            .await?
            .ok_or_else(|| match session.upstream.refusal(kind) {
                Some(detail) => SourceError::Refused { kind, detail },
                None => SourceError::NoAnswer {
                    from: feeder.answers_from(),
                    kind,
                    within,
                },
            })?;
        let feed = SessionChannel {
            kind,
            session,
            rx,
            _serving: serving,
            forward: self.limits.forward_rejections,
            freshen_every,
        };
        Ok(Polled::new(state, Box::new(feed)))
    }
}

impl Source for Sessions {
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>> {
        // The answer of the lane owning the request's names, or the merge of
        // the answers of the lanes owning some.
        async move {
            let Some(routes) = &self.routes else {
                return self.poll_lane(0, kind, request, tenant).await;
            };
            let groups = routes.route(request.names());
            if groups.len() <= 1 {
                let lane = groups.keys().next().copied().unwrap_or(0);
                return self.poll_lane(lane, kind, request, tenant).await;
            }
            let parts: Vec<(usize, ParsedRequest)> = groups
                .into_iter()
                .map(|(lane, names)| (lane, request.narrowed(crate::cache::Names::Named(names))))
                .collect();
            let polls = parts
                .iter()
                .map(|(lane, part)| self.poll_lane(*lane, kind, part, tenant));
            let polled = join_all(polls).await;
            let parts = polled.into_iter().collect::<Result<Vec<Polled>, _>>()?;
            Ok(routes.merged(kind, parts))
        }
        .boxed()
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.lanes[0].feeder.pass_through(call)
    }
}

impl Inspect for Sessions {
    fn status(&self) -> Status {
        let mut status = Status {
            ready: true,
            ..Status::default()
        };
        let mut descriptions = Vec::new();
        let registry = self.lock();
        for (lane, sessions) in self.lanes.iter().zip(registry.lanes.iter()) {
            status.ready &= lane.feeder.is_ready();
            descriptions.push(lane.label(lane.feeder.describe()));
            let problems = lane.feeder.problems().into_iter();
            status.problems.extend(problems.map(|p| lane.label(p)));
            lane.sessions_status(sessions, &mut status);
        }
        status.description = descriptions.join("; ");
        status
    }

    fn states_of(&self, node_id: &str) -> Vec<Arc<crate::cache::TypeState>> {
        let mut by_kind: BTreeMap<ResourceType, Vec<Arc<TypeState>>> = BTreeMap::new();
        for sessions in self.lock().lanes.iter() {
            let session = sessions
                .values()
                .find(|entry| entry.session.node.id == node_id);
            for state in session.map(|e| e.session.states()).unwrap_or_default() {
                by_kind.entry(state.kind).or_default().push(state);
            }
        }
        by_kind
            .into_iter()
            .map(|(kind, states)| match states.as_slice() {
                [one] => one.clone(),
                _ => Arc::new(merge(kind, &states)),
            })
            .collect()
    }

    fn placements_of(&self, node_id: &str) -> Vec<super::StreamPlacement> {
        let mut placements = Vec::new();
        let registry = self.lock();
        for (lane, sessions) in self.lanes.iter().zip(registry.lanes.iter()) {
            let serves = lane.feeder.upstream_name().unwrap_or_default();
            let of_node = sessions
                .values()
                .filter(|entry| entry.session.node.id == node_id);
            placements.extend(
                of_node
                    .flat_map(|entry| entry.session.upstream.placements())
                    .map(|(stream, placement)| super::StreamPlacement {
                        serves: serves.to_owned(),
                        stream: stream.map_or("ads", ResourceType::short_name),
                        placement,
                    }),
            );
        }
        placements
    }

    fn sessions(&self) -> Vec<SessionView> {
        let mut all = Vec::new();
        let registry = self.lock();
        for (lane, sessions) in self.lanes.iter().zip(registry.lanes.iter()) {
            let description = lane.feeder.describe();
            // A snapshot has no stream to show.
            let streamed = lane.feeder.upstream_name().is_some();
            let mut views: Vec<SessionView> = sessions
                .values()
                .map(|entry| SessionView {
                    serves: lane.serves.clone(),
                    ..entry.session.view(description.clone(), streamed)
                })
                .collect();
            views.sort_by(|a, b| a.node_id.cmp(&b.node_id));
            all.extend(views);
        }
        all
    }
}

impl Lane {
    /// Adds what this lane's `sessions` say to `status`: counts,
    /// failovers, what is set aside or refused, and why stale or waiting
    /// ones are.
    fn sessions_status(&self, sessions: &HashMap<IdentityKey, Entry>, status: &mut Status) {
        status.sessions += sessions.len();
        for entry in sessions.values() {
            let session = &entry.session;
            // Written out only for a session that has something to report.
            let node = || {
                let (id, cluster) = (&session.node.id, &session.node.cluster);
                format!("node {id:?} (cluster {cluster:?})")
            };
            if session.upstream.failed_over() {
                status.failed_over_sessions += 1;
                if status.failovers.len() < SESSION_ERRORS_SHOWN {
                    let placements: Vec<String> = session
                        .upstream
                        .placements()
                        .into_iter()
                        .map(|(lane, p)| {
                            let lane = lane.map_or("", ResourceType::short_name);
                            format!("{lane} on {} since {} ({})", p.upstream, p.since, p.reason)
                        })
                        .collect();
                    let placements = placements.join("; ");
                    let failover = format!("{}: {}", node(), placements.trim_start());
                    status.failovers.push(self.label(failover));
                }
            }
            for (what, refused, since) in session.unserved.listed(tokio::time::Instant::now()) {
                if status.problems.len() < SESSION_ERRORS_SHOWN {
                    let since = humantime::format_rfc3339_seconds(since);
                    status.problems.push(self.label(format!(
                        "{}: {what} set aside since {since}: {refused}; its polls get an error until the upstream is asked again",
                        node()
                    )));
                }
            }
            let refusals = session.upstream.refusals();
            if !refusals.is_empty() {
                status.refusing_sessions += 1;
                if status.problems.len() < SESSION_ERRORS_SHOWN {
                    for (kind, version, detail) in refusals {
                        status.problems.push(self.label(format!(
                            "{}: the gateway refuses the upstream's answers of {} (NACK, presenting version {version:?}): {detail}",
                            node(),
                            kind.type_url()
                        )));
                    }
                }
            }
            let state = if session.upstream.stale_since().is_some() {
                status.stale_sessions += 1;
                "stale"
            } else if !session.has_state() {
                status.waiting_sessions += 1;
                "waiting for the upstream's first answer"
            } else {
                continue;
            };
            let Some((_, error)) = session.upstream.last_error() else {
                continue;
            };
            if status.session_errors.len() < SESSION_ERRORS_SHOWN {
                let error = format!("{}: {state}; last upstream error: {error}", node());
                status.session_errors.push(self.label(error));
            }
        }
    }
}

impl Feed for Sessions {
    fn close(&self) {
        crate::sync::lock(&self.sweeper).take();
        let mut registry = self.lock();
        for lane in registry.lanes.iter_mut() {
            for (_, entry) in lane.drain() {
                entry.session.close();
            }
        }
        (registry.open, registry.bytes) = (0, 0);
        self.metrics.set_sessions(0);
    }
}

/// A poll answered from a session: its state channel for long polls, where
/// a suspected rejection goes (NACKed upstream through the feeder when
/// `--forward-rejections` is on), its stale mark. Holding it keeps the
/// session from idling out.
struct SessionChannel {
    kind: ResourceType,
    session: Arc<Session>,
    rx: watch::Receiver<Option<Arc<TypeState>>>,
    _serving: InFlight,
    forward: bool,
    /// How often a held long poll asks the feeder to freshen the type
    /// (a feeder asked rather than pushed to; see `Feeder::freshened_every`).
    freshen_every: Option<Duration>,
}

impl PollChannel for SessionChannel {
    fn next_change<'a>(
        &'a mut self,
        seen: &'a Arc<TypeState>,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Arc<TypeState>>> {
        async move {
            let Some(every) = self.freshen_every else {
                let next = wait_for_change(self.rx.clone(), seen, wait).await;
                return (!Arc::ptr_eq(&next, seen)).then_some(next);
            };
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let next = wait_for_change(self.rx.clone(), seen, left.min(every)).await;
                if !Arc::ptr_eq(&next, seen) {
                    return Some(next);
                }
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                // The poll is answered with what it has; the next one sees
                // the failure.
                if self.session.freshen(self.kind).await.is_err() {
                    return None;
                }
            }
        }
        .boxed()
    }

    fn forwards(&self) -> bool {
        self.forward
    }

    fn forward(&self, request: &ParsedRequest, suspicion: &Suspicion) {
        self.session.send(Command::Nack {
            kind: self.kind,
            presented: upstream_version(&suspicion.presented).to_owned(),
            message: suspicion_message(request.node_id(), suspicion),
        });
    }

    fn stale_since(&self) -> Option<SystemTime> {
        self.session.upstream.stale_since()
    }

    fn sibling(&self, kind: ResourceType) -> Option<Arc<TypeState>> {
        self.session.state(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ParsedRequests;
    use crate::config::SessionKey;
    use crate::xds::Codec;
    use crate::Script;

    fn node_request(id: &str, keys: usize) -> bytes::Bytes {
        let metadata: serde_json::Map<String, serde_json::Value> = (0..keys)
            .map(|i| {
                (
                    format!("key{i}"),
                    serde_json::Value::from(format!("value{i}")),
                )
            })
            .collect();
        serde_json::json!({"node": {"id": id, "metadata": metadata}})
            .to_string()
            .into()
    }

    /// While a new, huge node is decoded, existing
    /// sessions keep answering (the registry's lock is not held meanwhile).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_huge_new_node_does_not_stall_existing_sessions() {
        let config = Config {
            max_node_bytes: 16 << 20,
            ..Config::default()
        };
        let intake = Intake::new(Codec::embedded());
        let script = Script::new(intake.clone());
        let sessions = Sessions::start(
            Arc::new(script.feeder()),
            intake,
            crate::observe::ConfigHistory::default(),
            Arc::new(Metrics::new()),
            &config,
        );
        script.set(ResourceType::Clusters, "1", &[]).await;
        let parsed = ParsedRequests::new(SessionKey::Node);
        let small = parsed.parse(node_request("small", 1)).unwrap();
        sessions
            .poll(ResourceType::Clusters, &small, None)
            .await
            .unwrap();

        let huge = parsed.parse(node_request("huge", 100_000)).unwrap();
        assert!(huge.node_bytes() > 2_000_000);
        let opening = {
            let sessions = sessions.clone();
            tokio::spawn(async move { sessions.session(0, &huge, None).await.map(|_| ()) })
        };
        let decoding = || sessions.decoding.available_permits() < DECODES_AT_ONCE;
        while !decoding() {
            tokio::task::yield_now().await;
        }
        sessions
            .poll(ResourceType::Clusters, &small, None)
            .await
            .unwrap();
        assert!(
            decoding(),
            "the huge node was decoded before an existing session could answer"
        );
        opening.await.unwrap().unwrap();
        assert_eq!(sessions.status().sessions, 2);
    }

    fn cluster(name: &str) -> serde_json::Value {
        serde_json::json!({"@type": ResourceType::Clusters.type_url(), "name": name,
                           "connect_timeout": "1s"})
    }

    const EDGE_A: &str = "xdstp://edge.example/envoy.config.cluster.v3.Cluster/a";

    /// Sessions of two scripted upstreams: "mesh" (the default) serving
    /// `b`, and "edge", claiming `edge.example`, serving [`EDGE_A`].
    async fn mesh_and_edge(config: &Config) -> (Arc<Sessions>, [Arc<Script>; 2]) {
        let intake = Intake::new(Codec::embedded());
        let (mesh, edge) = (Script::new(intake.clone()), Script::new(intake.clone()));
        mesh.set(ResourceType::Clusters, "m1", &[cluster("b")])
            .await;
        edge.set(ResourceType::Clusters, "e1", &[cluster(EDGE_A)])
            .await;
        let slot = |name: &str, script: &Arc<Script>| UpstreamSlot {
            name: name.to_owned(),
            feeder: Arc::new(script.feeder()),
        };
        let claims = [("edge.example".to_owned(), "edge".to_owned())].into();
        let sessions = Sessions::federated(
            vec![slot("mesh", &mesh), slot("edge", &edge)],
            Namespace::new(claims, "mesh", "mesh"),
            intake,
            crate::observe::ConfigHistory::default(),
            Arc::new(Metrics::new()),
            config,
        );
        (sessions, [mesh, edge])
    }

    fn poll_of(parsed: &ParsedRequests, id: &str, names: &[&str]) -> Arc<ParsedRequest> {
        let body = serde_json::json!({"node": {"id": id}, "resource_names": names});
        parsed.parse(body.to_string().into()).unwrap()
    }

    #[tokio::test]
    async fn a_poll_across_upstreams_is_answered_from_each_owners_sessions_merged() {
        let (sessions, [mesh, edge]) = mesh_and_edge(&Config::default()).await;
        let parsed = ParsedRequests::new(SessionKey::Node);
        let both = poll_of(&parsed, "n", &["b", EDGE_A]);
        let polled = sessions.poll(ResourceType::Clusters, &both, None).await;
        let state = polled.unwrap().state().clone();
        let names: Vec<&str> = state.resources.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["b", EDGE_A]);
        assert_eq!(state.version, "m1,e1");
        assert_eq!((mesh.sessions_started(), edge.sessions_started()), (1, 1));
        let views = sessions.sessions();
        let serves: Vec<_> = views.iter().map(|v| v.serves.as_deref()).collect();
        assert_eq!(serves, [Some("mesh"), Some("edge")]);
        let status = sessions.status();
        assert_eq!(status.sessions, 2);
        assert!(status.description.starts_with("mesh: "), "{status:?}");
        let merged = sessions.states_of("n");
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].resources.len(), 2);

        let mesh_only = poll_of(&parsed, "n", &["b"]);
        let polled = sessions
            .poll(ResourceType::Clusters, &mesh_only, None)
            .await;
        assert_eq!(polled.unwrap().state().version, "m1");
    }

    /// `--max-sessions` bounds the sessions of every upstream together.
    #[tokio::test]
    async fn the_session_limit_counts_every_upstreams_sessions() {
        let config = Config {
            max_sessions: 1,
            ..Config::default()
        };
        let (sessions, _scripts) = mesh_and_edge(&config).await;
        let parsed = ParsedRequests::new(SessionKey::Node);
        let mesh_poll = poll_of(&parsed, "n", &["b"]);
        sessions
            .poll(ResourceType::Clusters, &mesh_poll, None)
            .await
            .unwrap();
        let edge_poll = poll_of(&parsed, "n", &[EDGE_A]);
        let refused = sessions
            .poll(ResourceType::Clusters, &edge_poll, None)
            .await;
        assert!(
            matches!(refused, Err(SourceError::TooManySessions { max: 1 })),
            "{refused:?}"
        );
    }
}
