//! What a poll gets from a source: [`Polled`], the state that answers one
//! REST client now, over the source's own [`Feed`] (how a long poll learns of
//! the next state, where rejections are counted, whether the state is stale).
//!
//! Rejection tracking is the same for every feed ([`suspect`]): REST has no
//! NACK, so a client that keeps presenting an older version after the current
//! one was served to it has probably rejected it. What a feed does with a
//! suspicion (NACK upstream, or only log and count) is its own business.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tracing::warn;

use crate::cache::{Answer, ParsedRequest, RejectionTracker, Renderer, Suspicion, TypeState};
use crate::metrics::Metrics;
use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// What answers a poll.
#[derive(Debug, Clone)]
pub(super) enum Current {
    /// A state of the type: the cache's rules decide between a body and 304.
    State(Arc<TypeState>),
    /// The upstream said the (non-empty) version the client presented is
    /// current (fetch mode's "up to date"): 304, with no state to show.
    UpToDate(String),
}

/// The per-source part of a [`Polled`].
pub(super) trait Feed: Send + Sync {
    /// Waits up to `wait` for a state newer than `seen`; `None` if none came.
    fn next_change<'a>(
        &'a mut self,
        seen: &'a Current,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Current>>;

    /// Called before `request` is answered from `state`: rejection bookkeeping.
    fn observe(&self, request: &ParsedRequest, state: &TypeState, target: Option<&RestTarget>);

    /// A body of `state` was served.
    fn served(&self, state: &TypeState);

    /// Since when the state served is stale (its upstream is down), if it is.
    fn stale_since(&self) -> Option<SystemTime>;
}

/// The state that answers one poll, and what the source does around it.
pub(crate) struct Polled {
    current: Current,
    feed: Box<dyn Feed>,
}

impl std::fmt::Debug for Polled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polled")
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl Polled {
    pub(super) fn new(current: Current, feed: Box<dyn Feed>) -> Polled {
        Polled { current, feed }
    }

    /// The version of what answers (the ETag).
    pub(crate) fn version(&self) -> &str {
        match &self.current {
            Current::State(state) => &state.version,
            Current::UpToDate(version) => version,
        }
    }

    /// Answers `request`: rejection bookkeeping first, then the cache's rule
    /// (a body, or 304 when this state already served these names); a body
    /// is recorded as served.
    pub(crate) fn answer(
        &self,
        renderer: &Renderer,
        request: &ParsedRequest,
        target: Option<&RestTarget>,
    ) -> Result<Answer, JsonError> {
        let state = match &self.current {
            Current::State(state) => state,
            Current::UpToDate(_) => return Ok(Answer::NotModified),
        };
        self.feed.observe(request, state, target);
        let answer = state.answer(renderer, request.names(), request.version_info(), target)?;
        if matches!(answer, Answer::Body { .. }) {
            self.feed.served(state);
        }
        Ok(answer)
    }

    /// Long poll: waits up to `wait` for the state to change; true if it did
    /// (answer again), false if the wait ran out.
    pub(crate) async fn next_change(&mut self, wait: Duration) -> bool {
        match self.feed.next_change(&self.current, wait).await {
            Some(next) => {
                self.current = next;
                true
            }
            None => false,
        }
    }

    /// Since when the state served is stale (its upstream is down), if it is.
    pub(crate) fn stale_since(&self) -> Option<SystemTime> {
        self.feed.stale_since()
    }
}

/// Counts a poll of `request` presenting a version older than the current
/// state's, once this subscription (node id + names) was served the current
/// state; a suspicion the first time `threshold` such polls are seen.
pub(super) fn suspect(
    tracker: &Mutex<RejectionTracker>,
    request: &ParsedRequest,
    state: &TypeState,
    target: Option<&RestTarget>,
    threshold: u32,
) -> Option<Suspicion> {
    let presented = request.version_info();
    if presented.is_empty() {
        return None;
    }
    let subscription = || format!("{}\u{0}{:?}", request.node_id(), request.names());
    if presented == state.version {
        lock(tracker).caught_up(subscription);
        return None;
    }
    let served_current = state.has_served(request.names(), target);
    lock(tracker).observe(
        &subscription(),
        presented,
        &state.version,
        served_current,
        threshold,
    )
}

/// Records that a body of `state` went out (for [`suspect`]).
pub(super) fn record_served(tracker: &Mutex<RejectionTracker>, state: &TypeState) {
    lock(tracker).served(&state.version);
}

/// Logs and counts a suspected rejection of `kind` by a client of `node_id`;
/// `nacked` says whether it goes upstream as a NACK too.
pub(super) fn report_suspicion(
    metrics: &Metrics,
    kind: ResourceType,
    node_id: &str,
    suspicion: &Suspicion,
    nacked: bool,
) {
    warn!(
        node = %node_id, %kind, presented = %suspicion.presented, current = %suspicion.current,
        polls = suspicion.polls, nacked,
        "suspected rejection: a REST client keeps presenting an older version"
    );
    metrics.suspected_rejection(kind);
}

/// The message a NACK carries for a suspicion.
pub(super) fn suspicion_message(node_id: &str, suspicion: &Suspicion) -> String {
    format!(
        "xds-gateway: a REST client of node {node_id:?} kept presenting version {:?} for {} polls after version {:?} was served; it probably rejected it",
        suspicion.presented, suspicion.polls, suspicion.current
    )
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section in `source` is a few field updates; a panic
    // inside one cannot leave the data half-updated in a way later readers
    // would trip on.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
