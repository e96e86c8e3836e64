//! Sessions as a [`Source`]: the registry of live sessions, one per node
//! identity, and how a poll is answered from one.
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
//! poll reads it.
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tracing::info;

use super::feeder::Feeder;
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

/// A [`Source`] of sessions, each fed by `feeder`.
#[derive(Debug)]
pub struct Sessions {
    feeder: Arc<dyn Feeder>,
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

/// The live sessions and the node bytes they hold.
#[derive(Debug, Default)]
struct Registry {
    sessions: HashMap<IdentityKey, Entry>,
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
    /// Why a session of `bytes` cannot be added now, if so.
    /// Whether a new session whose node is `bytes` may open: within the
    /// count, the nodes' bytes, and (with a memory budget) the answers its
    /// stream and every other would hold if the upstream's largest answer
    /// reached them all at once (`answer`: its bytes).
    fn room_for(&self, bytes: usize, answer: usize, limits: &Limits) -> Result<(), SourceError> {
        if self.sessions.len() >= limits.max_sessions {
            return Err(SourceError::TooManySessions {
                max: limits.max_sessions,
            });
        }
        if let Some(max) = limits.max_answer_bytes {
            let streams = self.sessions.len() as u64 + 1;
            if streams.saturating_mul(answer as u64) > max {
                return Err(SourceError::AnswerBytes {
                    sessions: self.sessions.len(),
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

    fn existing(&self, key: &IdentityKey) -> Option<Arc<Session>> {
        let session = &self.sessions.get(key)?.session;
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
        let sessions = Arc::new(Sessions {
            feeder,
            sessions: Mutex::default(),
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
        let sweeper = spawn_sweeper(Arc::downgrade(&sessions), sessions.sweep_every());
        *sessions.sweeper_lock() = Some(AbortOnDrop(sweeper));
        sessions
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Map operations are single inserts/removes: never half-done.
        crate::sync::lock(&self.sessions)
    }

    fn sweeper_lock(&self) -> MutexGuard<'_, Option<AbortOnDrop>> {
        crate::sync::lock(&self.sweeper)
    }

    fn sweep_every(&self) -> Duration {
        (self.limits.idle_timeout / 4).clamp(Duration::from_millis(50), SWEEP_EVERY_MAX)
    }

    /// The session of the request's identity, created (and its feeder
    /// started) for the first client of that identity. The request's `node`
    /// is decoded only then, outside the registry's lock. A new session
    /// counts against `tenant`'s share until it closes.
    async fn session(
        &self,
        request: &ParsedRequest,
        tenant: Option<&Tenant>,
    ) -> Result<Arc<Session>, SourceError> {
        let key = request.identity();
        let bytes = request.node_bytes();
        {
            let registry = self.lock();
            if let Some(session) = registry.existing(key) {
                return Ok(session);
            }
            self.share.check(tenant)?;
            self.bytes_share.check_weighing(tenant, bytes)?;
            registry.room_for(bytes, self.intake.largest_answer(), &self.limits)?;
        }
        // The semaphore is never closed.
        let _decoding = self.decoding.acquire().await;
        if let Some(session) = self.lock().existing(key) {
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
        if let Some(session) = registry.existing(key) {
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
        session.attach_task(self.feeder.start(Publisher::of(&session), commands));
        info!(node = %Escaped(&session.node.id), cluster = %Escaped(&session.node.cluster), node_bytes = bytes, "session opened");
        registry.sessions.insert(
            key.clone(),
            Entry {
                session: session.clone(),
                bytes,
                _share: share,
                _bytes_share: bytes_share,
            },
        );
        registry.bytes += bytes;
        self.metrics.set_sessions(registry.sessions.len());
        Ok(session)
    }

    /// Closes idle sessions and prunes names nobody asked for recently.
    fn sweep(&self, now: Instant) {
        let idle_timeout = self.limits.idle_timeout;
        let mut registry = self.lock();
        let mut freed = 0;
        registry.sessions.retain(|_, entry| {
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
        registry.bytes -= freed;
        self.metrics.set_sessions(registry.sessions.len());
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
                () = set_aside => {
                    let now = tokio::time::Instant::now();
                    if let Some(aside) = session.unserved.check(kind, now) {
                        return Err(SourceError::Unserved { kind, refused: aside.refused, retry_in: aside.retry_in });
                    }
                    if let Some((name, aside)) = session.unserved.check_asked(kind, names, now) {
                        return Err(SourceError::NameUnserved { kind, name, refused: aside.refused, retry_in: aside.retry_in });
                    }
                }
            }
        }
    }

    async fn poll_session(
        &self,
        kind: ResourceType,
        request: &ParsedRequest,
        tenant: Option<&Tenant>,
    ) -> Result<Polled, SourceError> {
        if let Some(pending) = self.feeder.pending() {
            pending.await?;
        }
        if !self.feeder.carries(kind) {
            let from = self.feeder.describe();
            return Err(SourceError::DeltaOnly { kind, from });
        }
        if let Some(unavailable) = self.feeder.unavailable() {
            return Err(unavailable);
        }
        if request.node_id().is_empty() && self.feeder.upstream_name().is_some() {
            return Err(SourceError::NoNodeId);
        }
        let session = self.session(request, tenant).await?;
        let now = tokio::time::Instant::now();
        if let Some(aside) = session.unserved.check(kind, now) {
            return Err(SourceError::Unserved {
                kind,
                refused: aside.refused,
                retry_in: aside.retry_in,
            });
        }
        if let Some((name, aside)) = session.unserved.check_asked(kind, request.names(), now) {
            return Err(SourceError::NameUnserved {
                kind,
                name,
                refused: aside.refused,
                retry_in: aside.retry_in,
            });
        }
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
        let freshen_every = self.feeder.freshened_every();
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
                    from: self.feeder.answers_from(),
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

fn spawn_sweeper(sessions: Weak<Sessions>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            sessions.sweep(Instant::now());
        }
    })
}

impl Source for Sessions {
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>> {
        self.poll_session(kind, request, tenant).boxed()
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.feeder.pass_through(call)
    }
}

impl Inspect for Sessions {
    fn status(&self) -> Status {
        let mut status = Status {
            ready: self.feeder.is_ready(),
            description: self.feeder.describe(),
            problems: self.feeder.problems(),
            ..Status::default()
        };
        let registry = self.lock();
        status.sessions = registry.sessions.len();
        for entry in registry.sessions.values() {
            let session = &entry.session;
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
                    status.failovers.push(format!(
                        "node {:?} (cluster {:?}): {}",
                        session.node.id,
                        session.node.cluster,
                        placements.join("; ").trim_start()
                    ));
                }
            }
            let now = tokio::time::Instant::now();
            let types = session.unserved.listed(now).into_iter();
            let types =
                types.map(|(kind, refused, since)| (kind.type_url().to_owned(), refused, since));
            let names = session.unserved.listed_names(now).into_iter();
            let names = names.map(|(kind, name, refused, since)| {
                (format!("{name:?} of {}", kind.type_url()), refused, since)
            });
            for (what, refused, since) in types.chain(names) {
                if status.problems.len() < SESSION_ERRORS_SHOWN {
                    status.problems.push(format!(
                        "node {:?} (cluster {:?}): {what} set aside since {}: {refused}; its polls get an error until the upstream is asked again",
                        session.node.id,
                        session.node.cluster,
                        humantime::format_rfc3339_seconds(since)
                    ));
                }
            }
            let refusals = session.upstream.refusals();
            if !refusals.is_empty() {
                status.refusing_sessions += 1;
                if status.problems.len() < SESSION_ERRORS_SHOWN {
                    for (kind, version, detail) in refusals {
                        status.problems.push(format!(
                            "node {:?} (cluster {:?}): the gateway refuses the upstream's answers of {} (NACK, presenting version {version:?}): {detail}",
                            session.node.id, session.node.cluster, kind.type_url()
                        ));
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
                status.session_errors.push(format!(
                    "node {:?} (cluster {:?}): {state}; last upstream error: {error}",
                    session.node.id, session.node.cluster
                ));
            }
        }
        status
    }

    fn states_of(&self, node_id: &str) -> Vec<Arc<crate::cache::TypeState>> {
        let registry = self.lock();
        let session = registry
            .sessions
            .values()
            .find(|entry| entry.session.node.id == node_id);
        session.map(|e| e.session.states()).unwrap_or_default()
    }

    fn placements_of(&self, node_id: &str) -> Vec<super::StreamPlacement> {
        let registry = self.lock();
        let serves = self
            .feeder
            .upstream_name()
            .map(str::to_owned)
            .unwrap_or_default();
        registry
            .sessions
            .values()
            .filter(|entry| entry.session.node.id == node_id)
            .flat_map(|entry| entry.session.upstream.placements())
            .map(|(lane, placement)| super::StreamPlacement {
                serves: serves.clone(),
                stream: lane.map_or("ads", ResourceType::short_name),
                placement,
            })
            .collect()
    }

    fn sessions(&self) -> Vec<SessionView> {
        let description = self.feeder.describe();
        // A snapshot has no stream to show.
        let streamed = self.feeder.upstream_name().is_some();
        let registry = self.lock();
        let mut views: Vec<SessionView> = registry
            .sessions
            .values()
            .map(|entry| entry.session.view(description.clone(), streamed))
            .collect();
        views.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        views
    }
}

impl Feed for Sessions {
    fn close(&self) {
        self.sweeper_lock().take();
        let mut registry = self.lock();
        for (_, entry) in registry.sessions.drain() {
            entry.session.close();
        }
        registry.bytes = 0;
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
            tokio::spawn(async move { sessions.session(&huge, None).await.map(|_| ()) })
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
}
