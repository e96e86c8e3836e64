//! One session: the state shared by every REST client of one node identity
//! (fan-in), what they subscribed to, and the channel that tells the task
//! feeding the session (an upstream stream, or the snapshot) what changed.
//!
//! The session never talks to the network itself; its feeder does, and
//! publishes each accepted state here through a `watch` channel per type,
//! which is what waiting and long-polling requests wait on. A feeder that
//! is asked rather than pushed to (fetch mode) is asked through the same
//! channel, per poll ([`Command::Freshen`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::{task::JoinHandle, time::Instant};

use super::upstream_log::UpstreamLog;
use super::view::{SessionTypeView, SessionView};
use super::{node::SessionNode, unserved::Unserved, SourceError};
use crate::cache::{Coverage, Names, TypeState};
use crate::observe::Recorder;
use crate::sync::{lock, AbortOnDrop};
use crate::xds::{extra_types::MAX_EXTRA_TYPES, ResourceType};

/// How long after a subscription a request stops waiting for the upstream
/// to prove it answered, and takes the current state as the answer.
pub const SETTLE: Duration = Duration::from_secs(2);

/// What a session asks of its upstream stream task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The subscription for this type changed: send it.
    Resubscribe(ResourceType),
    /// A REST client seems to have rejected `current`: NACK upstream.
    Nack {
        kind: ResourceType,
        presented: String,
        message: String,
    },
    /// A poll is about to read this type: a feeder that is asked rather
    /// than pushed to brings its state up to date first and says how that
    /// went through `reply`. Pushed-to feeders drop it, which lets the
    /// poll go on at once.
    Freshen {
        kind: ResourceType,
        reply: FreshenReply,
    },
}

impl Command {
    pub fn kind(&self) -> ResourceType {
        match self {
            Command::Resubscribe(kind)
            | Command::Nack { kind, .. }
            | Command::Freshen { kind, .. } => *kind,
        }
    }
}

/// How a feeder freshened a type for a poll: `Err` is what a poll with no
/// state to fall back on is answered (one with a state is served it,
/// marked stale by the feeder).
pub type Freshened = Result<(), SourceError>;

/// The poll's end of a [`Command::Freshen`]: answered once. Shared so
/// that a command stays cloneable; two are equal when they are the same.
#[derive(Debug, Clone)]
pub struct FreshenReply {
    asked_at: Instant,
    reply: Arc<Mutex<Option<oneshot::Sender<Freshened>>>>,
}

impl FreshenReply {
    pub fn asked_at(&self) -> Instant {
        self.asked_at
    }

    /// Tells the poll how freshening went (nothing when it no longer waits).
    pub fn send(&self, outcome: Freshened) {
        if let Some(reply) = lock(&self.reply).take() {
            let _ = reply.send(outcome);
        }
    }
}

impl PartialEq for FreshenReply {
    fn eq(&self, other: &FreshenReply) -> bool {
        Arc::ptr_eq(&self.reply, &other.reply)
    }
}

impl Eq for FreshenReply {}

/// When clients first and last asked for one name (or the wildcard).
#[derive(Debug, Clone, Copy)]
struct Interest {
    first: Instant,
    last: Instant,
}

impl Interest {
    fn new(now: Instant) -> Interest {
        Interest {
            first: now,
            last: now,
        }
    }
}

/// Bytes of names one type of one session may subscribe to: with
/// `--max-names-per-session` counting them, long names (a body may carry
/// megabytes of one) cannot make a session hold more than this.
pub(super) const NAME_BYTES: usize = 16 * 1024 * 1024;

/// What the node's clients want of one type.
#[derive(Debug, Default)]
struct Subscription {
    wildcard: Option<Interest>,
    names: BTreeMap<String, Interest>,
    /// Bytes of the names (their lengths summed).
    bytes: usize,
}

impl Subscription {
    fn coverage(&self) -> Coverage {
        Coverage {
            wildcard: self.wildcard.is_some(),
            names: self.names.keys().cloned().collect(),
        }
    }

    /// Records interest in `names` at `now`. Returns whether that widened
    /// the subscription, and when the newest part of `names` was first asked
    /// for; or, adding no name, `Err` when that would subscribe more than
    /// `max` names or [`NAME_BYTES`] of them (the names already subscribed
    /// are asked for all the same). Each name is looked up once when none
    /// is new, as in every poll after a client's first.
    fn ask(
        &mut self,
        names: &Names,
        now: Instant,
        max: usize,
    ) -> Result<(bool, Instant), TooManyNames> {
        let set = match names {
            Names::Wildcard => {
                let widened = self.wildcard.is_none();
                let interest = self.wildcard.get_or_insert(Interest::new(now));
                interest.last = now;
                return Ok((widened, interest.first));
            }
            Names::Named(set) => set,
        };
        let (mut new, mut bytes, mut newest) = (0, 0, None::<Instant>);
        for name in set {
            match self.names.get_mut(name) {
                Some(interest) => {
                    interest.last = now;
                    newest = Some(newest.map_or(interest.first, |n| n.max(interest.first)));
                }
                None => (new, bytes) = (new + 1, bytes + name.len()),
            }
        }
        if new == 0 {
            return Ok((false, newest.unwrap_or(now)));
        }
        if self.names.len() + new > max || self.bytes + bytes > NAME_BYTES {
            return Err(TooManyNames { max });
        }
        for name in set {
            if !self.names.contains_key(name) {
                self.names.insert(name.clone(), Interest::new(now));
            }
        }
        self.bytes += bytes;
        Ok((true, newest.map_or(now, |n| n.max(now))))
    }
}

/// Where a type's states arrive, for requests to wait on.
pub(super) type StateRx = watch::Receiver<Option<Arc<TypeState>>>;

/// A subscription would grow past the per-session limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyNames {
    pub(super) max: usize,
}

#[derive(Debug, Default)]
struct TypeSlot {
    state: watch::Sender<Option<Arc<TypeState>>>,
    subscription: Mutex<Subscription>,
}

/// The shared upstream session of one node identity.
#[derive(Debug)]
pub struct Session {
    /// The node sent upstream: the first client's, as it sent it (its
    /// extension list shared with every session sending the same one).
    pub(super) node: SessionNode,
    /// Per type: the state published last and what clients subscribed to.
    slots: TypeSlots,
    commands: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<AbortOnDrop>>,
    /// Whether polls are using it, and when one last did.
    liveness: Liveness,
    /// Where every state published and every NACK sent is recorded (the
    /// config history, which outlives the session); `None` in unit tests.
    pub(super) history: Option<Recorder>,
    /// What the upstream streams did last and where they stand (for
    /// `/debug/sessions`, and the stale mark of what polls are served).
    pub(super) upstream: UpstreamLog,
    /// The types the upstream refused, set aside (`unserved.rs`).
    pub(super) unserved: Unserved,
}

/// A session's type slots: one per built-in type, in table order, and one
/// per extra type, made when first named.
#[derive(Debug)]
struct TypeSlots {
    built_in: Box<[TypeSlot]>,
    extra: OnceLock<Box<[OnceLock<TypeSlot>]>>,
}

impl TypeSlots {
    fn get(&self, kind: ResourceType) -> &TypeSlot {
        match kind {
            ResourceType::Extra(extra) => {
                let slots = self
                    .extra
                    .get_or_init(|| (0..MAX_EXTRA_TYPES).map(|_| OnceLock::new()).collect());
                slots[extra.index()].get_or_init(TypeSlot::default)
            }
            // One entry per built-in type, in table order.
            built_in => &self.built_in[built_in.index()],
        }
    }

    /// Every slot made so far.
    fn all(&self) -> impl Iterator<Item = &TypeSlot> {
        let extras = self.extra.get().into_iter().flatten();
        self.built_in.iter().chain(extras.filter_map(OnceLock::get))
    }
}

/// Whether a session is in use: requests in flight (a held long poll keeps
/// it alive) and when the last one ended.
#[derive(Debug)]
struct Liveness {
    last_poll: Mutex<Instant>,
    in_flight: AtomicUsize,
}

impl Session {
    /// A new session recording its states and NACKs through `history`.
    pub(super) fn recorded(
        node: impl Into<SessionNode>,
        history: Option<Recorder>,
    ) -> (Arc<Session>, mpsc::UnboundedReceiver<Command>) {
        let (commands, rx) = mpsc::unbounded_channel();
        let session = Arc::new(Session {
            node: node.into(),
            slots: TypeSlots {
                built_in: ResourceType::BUILT_IN.map(|_| TypeSlot::default()).into(),
                extra: OnceLock::new(),
            },
            commands,
            task: Mutex::new(None),
            liveness: Liveness {
                last_poll: Mutex::new(Instant::now()),
                in_flight: AtomicUsize::new(0),
            },
            history,
            upstream: UpstreamLog::default(),
            unserved: Unserved::default(),
        });
        (session, rx)
    }

    /// Attaches the upstream task, aborted when the session closes.
    pub(super) fn attach_task(&self, task: JoinHandle<()>) {
        *lock(&self.task) = Some(AbortOnDrop(task));
    }

    /// Stops the upstream task. Waiting requests see their channels close.
    pub(super) fn close(&self) {
        lock(&self.task).take();
    }

    /// The upstream stream `lane` (`None`: the aggregated one; a type: its
    /// own stream) broke for `reason`: the state it served is stale from
    /// now on (`UpstreamLog::failed`).
    pub(super) fn stream_failed(&self, lane: Option<ResourceType>, reason: String) {
        self.upstream.failed(lane, reason, self.has_state());
    }

    /// Whether the upstream has answered this session for any type.
    pub(super) fn has_state(&self) -> bool {
        self.slots.all().any(|slot| slot.state.borrow().is_some())
    }

    /// Marks a poll now (keeps the session from idling out).
    pub(super) fn touch(&self) {
        *lock(&self.liveness.last_poll) = Instant::now();
    }

    /// How long no request has been served: zero while one is in flight.
    pub(super) fn idle_for(&self, now: Instant) -> Duration {
        if self.liveness.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(*lock(&self.liveness.last_poll))
    }

    /// Marks a request in flight until the guard drops (then counts as a poll).
    pub(super) fn serving(self: &Arc<Self>) -> InFlight {
        self.liveness.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Records that a client wants `names` of `kind`; asks the upstream task
    /// to resubscribe if that widens the subscription. Also says whether every
    /// part of `names` was first asked for at least `settle` ago: such a
    /// request need not wait for the upstream to prove it answered (servers
    /// send nothing for names that do not exist; waiting the first-response
    /// timeout on every poll would outlast Envoy's 1 s request timeout). The
    /// first polls after a subscription still wait. A request that would
    /// subscribe the type to more than `max_names` names records nothing
    /// and is refused.
    pub(super) fn want(
        &self,
        kind: ResourceType,
        names: &Names,
        settle: Duration,
        max_names: usize,
    ) -> Result<(StateRx, bool), TooManyNames> {
        let (now, slot) = (Instant::now(), self.slots.get(kind));
        let (widened, newest) = lock(&slot.subscription).ask(names, now, max_names)?;
        if widened {
            self.send(Command::Resubscribe(kind));
        }
        let settled = now.saturating_duration_since(newest) >= settle;
        Ok((slot.state.subscribe(), settled))
    }

    /// Drops names (and wildcard interest) no client asked for within `ttl`,
    /// resubscribing the types that narrowed.
    pub(super) fn prune(&self, now: Instant, ttl: Duration) {
        for kind in ResourceType::all() {
            let narrowed = {
                let mut sub = lock(&self.slots.get(kind).subscription);
                let before = (sub.wildcard.is_some(), sub.names.len());
                let fresh = |i: &Interest| now.saturating_duration_since(i.last) < ttl;
                sub.names.retain(|_, interest| fresh(interest));
                sub.bytes = sub.names.keys().map(String::len).sum();
                sub.wildcard = sub.wildcard.filter(fresh);
                before != (sub.wildcard.is_some(), sub.names.len())
            };
            if narrowed {
                self.send(Command::Resubscribe(kind));
            }
        }
    }

    /// The subscription to send upstream for `kind`, or `None` if no client
    /// has asked for it.
    /// Names held apart (being checked, or refused alone) are left out.
    pub(super) fn subscription(&self, kind: ResourceType) -> Option<Coverage> {
        let now = Instant::now();
        if self.unserved.check(kind, now).is_some() {
            // Set aside: the upstream refused it; not asked again yet.
            return None;
        }
        let apart = self.unserved.names_apart(kind, now);
        let mut coverage = lock(&self.slots.get(kind).subscription).coverage();
        coverage.names.retain(|name| !apart.contains(name));
        (coverage.wildcard || !coverage.names.is_empty()).then_some(coverage)
    }

    pub(super) fn state(&self, kind: ResourceType) -> Option<Arc<TypeState>> {
        self.slots.get(kind).state.borrow().clone()
    }

    /// Publishes an accepted state of `kind` to every waiting request.
    pub(super) fn publish(&self, state: TypeState) {
        let state = Arc::new(state);
        if let Some(history) = &self.history {
            if state.uncacheable.is_empty() {
                history.published(&state);
            } else {
                // Kept out of the history (files and memory): it records
                // the version without the `do_not_cache` resources.
                history.published(&Arc::new(state.without_uncacheable()));
            }
        }
        self.slots.get(state.kind).state.send_replace(Some(state));
    }

    /// Queues a command for the upstream task (dropped if it has stopped).
    pub(super) fn send(&self, command: Command) {
        let _ = self.commands.send(command);
    }

    /// Asks the feeding task to bring `kind` up to date for a poll
    /// ([`Command::Freshen`]) and waits for it to say how that went; a
    /// task that does not freshen (or has stopped) lets the poll go on.
    pub(super) async fn freshen(&self, kind: ResourceType) -> Freshened {
        let (reply, answer) = oneshot::channel();
        let reply = FreshenReply {
            asked_at: Instant::now(),
            reply: Arc::new(Mutex::new(Some(reply))),
        };
        self.send(Command::Freshen { kind, reply });
        answer.await.unwrap_or(Ok(()))
    }

    pub(super) fn states(&self) -> Vec<Arc<TypeState>> {
        self.slots
            .all()
            .filter_map(|slot| slot.state.borrow().clone())
            .collect()
    }

    /// This session as `/debug/sessions` shows it: the node, `source` (what
    /// feeds it), the upstream stream (when `streamed`: a snapshot has none),
    /// and per type wanted or served the version, the names subscribed and
    /// the last ACK/NACK sent.
    pub(super) fn view(&self, source: String, streamed: bool) -> SessionView {
        let types = ResourceType::all()
            .iter()
            .filter_map(|kind| {
                let slot = self.slots.get(*kind);
                let state = slot.state.borrow().clone();
                let subscription = lock(&slot.subscription);
                if state.is_none()
                    && subscription.wildcard.is_none()
                    && subscription.names.is_empty()
                {
                    return None;
                }
                let view = SessionTypeView {
                    version: state.as_ref().map(|s| s.version.clone()),
                    resources: state.as_ref().map(|s| s.resources.len()),
                    wildcard: subscription.wildcard.is_some(),
                    names: subscription
                        .names
                        .keys()
                        .take(NAMES_SHOWN)
                        .cloned()
                        .collect(),
                    name_count: subscription.names.len(),
                    last_reply: self.upstream.last_reply(*kind),
                    resource_errors: state
                        .as_ref()
                        .map(|s| s.errors.view(NAMES_SHOWN))
                        .unwrap_or_default(),
                    resource_error_count: state.as_ref().map_or(0, |s| s.errors.len()),
                };
                Some((kind.short_name(), view))
            })
            .collect();
        SessionView {
            node_id: self.node.id.clone(),
            cluster: self.node.cluster.clone(),
            source,
            serves: None,
            stream: streamed.then(|| self.upstream.view()),
            node_sent: self.node.sent_view(),
            requests_in_flight: self.liveness.in_flight.load(Ordering::Acquire),
            types,
        }
    }
}

/// Names listed per type in a session's view (the count is always given).
const NAMES_SHOWN: usize = 20;

/// A request in flight on a session; see [`Session::serving`].
#[derive(Debug)]
pub(super) struct InFlight(Arc<Session>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.liveness.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits up to `timeout` for a state of `rx` that covers `names`. Returns the
/// covering state, else the latest state (the names may simply not exist
/// upstream), else `None` when the upstream has not answered at all.
pub(super) async fn wait_for_coverage(
    mut rx: watch::Receiver<Option<Arc<TypeState>>>,
    names: &Names,
    timeout: Duration,
) -> Option<Arc<TypeState>> {
    let covered = |s: &Option<Arc<TypeState>>| s.as_ref().is_some_and(|s| s.coverage.covers(names));
    if let Ok(Ok(state)) = tokio::time::timeout(timeout, rx.wait_for(covered)).await {
        return state.clone();
    }
    rx.borrow().clone()
}

/// Waits up to `wait` for a state other than `seen` (a long poll).
pub(super) async fn wait_for_change(
    mut rx: watch::Receiver<Option<Arc<TypeState>>>,
    seen: &Arc<TypeState>,
    wait: Duration,
) -> Arc<TypeState> {
    let changed = |s: &Option<Arc<TypeState>>| s.as_ref().is_some_and(|s| !Arc::ptr_eq(s, seen));
    match tokio::time::timeout(wait, rx.wait_for(changed)).await {
        Ok(Ok(state)) => state.clone().unwrap_or_else(|| seen.clone()),
        _ => seen.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Node;

    const MAX: usize = usize::MAX;

    impl Session {
        /// A new session recording nothing, and its command channel.
        fn new(node: impl Into<SessionNode>) -> (Arc<Session>, mpsc::UnboundedReceiver<Command>) {
            Session::recorded(node, None)
        }
    }

    fn names(n: &[&str]) -> Names {
        Names::from_request(n.iter().map(|s| s.to_string()).collect())
    }

    #[tokio::test]
    async fn with_per_type_streams_the_session_is_fresh_only_when_every_stream_is() {
        let (s, _rx) = Session::new(Node::default());
        s.publish(TypeState::new(
            ResourceType::Clusters,
            "1".into(),
            String::new(),
            BTreeMap::new(),
            crate::cache::Coverage::default(),
        ));
        let (cds, eds) = (Some(ResourceType::Clusters), Some(ResourceType::Endpoints));
        s.stream_failed(cds, "down".into());
        s.stream_failed(eds, "down".into());
        let since = s.upstream.stale_since().expect("stale once a stream broke");
        // One stream answering again is not all of them.
        s.upstream.fresh(eds);
        assert_eq!(s.upstream.stale_since(), Some(since));
        s.upstream.fresh(cds);
        assert_eq!(s.upstream.stale_since(), None);
        // The aggregated stream is one lane of its own.
        s.stream_failed(None, "down".into());
        assert!(s.upstream.stale_since().is_some());
        s.upstream.fresh(None);
        assert_eq!(s.upstream.stale_since(), None);
    }

    #[tokio::test]
    async fn a_subscription_cannot_grow_past_its_limit() {
        let (s, _rx) = Session::new(Node::default());
        let eds = ResourceType::Endpoints;
        s.want(eds, &names(&["a", "b"]), SETTLE, 3).unwrap();
        assert_eq!(
            s.want(eds, &names(&["c", "d"]), SETTLE, 3).unwrap_err(),
            TooManyNames { max: 3 }
        );
        // No name of the refused request was added; names already held
        // and the wildcard are always fine.
        assert_eq!(s.subscription(eds).unwrap().names.len(), 2);
        s.want(eds, &names(&["a", "b"]), SETTLE, 2).unwrap();
        s.want(eds, &Names::Wildcard, SETTLE, 2).unwrap();
        s.want(eds, &names(&["c"]), SETTLE, 3).unwrap();
    }

    /// The names of a session are bounded in bytes as
    /// well as in count (a 4 MiB body can carry one name of 4 MiB).
    #[tokio::test]
    async fn a_subscription_cannot_grow_past_its_bytes() {
        let (s, _rx) = Session::new(Node::default());
        let eds = ResourceType::Endpoints;
        let long = |i: usize| format!("{i}{}", "x".repeat(1 << 20));
        let batch =
            |from: usize| Names::from_request((from..from + 4).map(long).collect::<Vec<_>>());
        for i in 0..3 {
            s.want(eds, &batch(4 * i), SETTLE, MAX).unwrap();
        }
        assert!(s.want(eds, &batch(100), SETTLE, MAX).is_err());
        assert_eq!(s.subscription(eds).unwrap().names.len(), 12);
        // Pruned names give their bytes back.
        s.prune(
            Instant::now() + Duration::from_secs(10),
            Duration::from_secs(1),
        );
        s.want(eds, &batch(100), SETTLE, MAX).unwrap();
    }

    #[tokio::test]
    async fn want_resubscribes_only_when_widened_and_prune_narrows() {
        let (s, mut rx) = Session::new(Node::default());
        s.want(ResourceType::Endpoints, &names(&["a"]), SETTLE, MAX)
            .unwrap();
        s.want(ResourceType::Endpoints, &names(&["a"]), SETTLE, MAX)
            .unwrap();
        s.want(ResourceType::Endpoints, &names(&["a", "b"]), SETTLE, MAX)
            .unwrap();
        assert_eq!(
            rx.try_recv().unwrap(),
            Command::Resubscribe(ResourceType::Endpoints)
        );
        assert_eq!(
            rx.try_recv().unwrap(),
            Command::Resubscribe(ResourceType::Endpoints)
        );
        assert!(rx.try_recv().is_err());
        let cov = s.subscription(ResourceType::Endpoints).unwrap();
        assert_eq!(
            cov.names.iter().map(String::as_str).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(s.subscription(ResourceType::Clusters).is_none());

        s.prune(
            Instant::now() + Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            rx.try_recv().unwrap(),
            Command::Resubscribe(ResourceType::Endpoints)
        );
        assert!(s.subscription(ResourceType::Endpoints).is_none());
    }

    #[test]
    fn ask_reports_widening_and_the_newest_first_ask() {
        let mut sub = Subscription::default();
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        assert_eq!(sub.ask(&names(&["a"]), t0, MAX), Ok((true, t0)));
        assert_eq!(
            sub.ask(&names(&["a"]), t1, MAX),
            Ok((false, t0)),
            "first ask is kept"
        );
        // a new name is as young as it gets, whatever its companions
        assert_eq!(sub.ask(&names(&["a", "b"]), t2, MAX), Ok((true, t2)));
        assert_eq!(sub.ask(&Names::Wildcard, t1, MAX), Ok((true, t1)));
        assert_eq!(sub.ask(&Names::Wildcard, t2, MAX), Ok((false, t1)));
        assert_eq!(sub.names["a"].last, t2, "last ask is updated");
    }

    #[tokio::test]
    async fn want_says_whether_the_names_are_settled() {
        let (s, _rx) = Session::new(Node::default());
        assert!(
            !s.want(
                ResourceType::Endpoints,
                &names(&["a"]),
                Duration::from_secs(3600),
                MAX
            )
            .unwrap()
            .1
        );
        assert!(
            s.want(ResourceType::Endpoints, &names(&["a"]), Duration::ZERO, MAX)
                .unwrap()
                .1
        );
    }

    #[tokio::test]
    async fn a_request_in_flight_keeps_the_session_from_idling() {
        let (s, _rx) = Session::new(Node::default());
        let later = Instant::now() + Duration::from_secs(600);
        assert!(s.idle_for(later) >= Duration::from_secs(599));
        let held = s.serving();
        assert_eq!(s.idle_for(later), Duration::ZERO);
        drop(held);
        assert!(
            s.idle_for(Instant::now()) < Duration::from_secs(1),
            "the end of a request counts as a poll"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waits_are_bounded() {
        let (s, _rx) = Session::new(Node::default());
        let (rx, _) = s
            .want(ResourceType::Clusters, &Names::Wildcard, SETTLE, MAX)
            .unwrap();
        assert!(
            wait_for_coverage(rx, &Names::Wildcard, Duration::from_secs(5))
                .await
                .is_none()
        );
    }
}
