//! What a poll gets from a source: [`Polled`], the state that answers one
//! REST client now, over the source's own [`PollChannel`] (how a long poll
//! learns of the next state, whether the state is stale, whether a
//! suspected rejection is NACKed upstream). It answers nothing itself: the
//! REST face answers from its state through the cache and writes the answer
//! into the client book, which judges where the client stands.
//!
//! REST has no NACK, so a client that keeps presenting an older version
//! after the current one was served to it has probably rejected it; whether
//! a suspicion the book finds is also NACKed upstream is the feed's
//! business ([`Polled::forward`], [`PollChannel::forward`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::cache::{Names, ParsedRequest, ResourceSet, TypeState};
use crate::observe::{ServedAnswer, Suspicion};
use crate::xds::{rewrite::RestTarget, ResourceType};

/// The per-source part of a [`Polled`]: the channel a poll talks back to its
/// source through (not to be confused with a [`super::feeder::Feeder`], which
/// feeds sessions).
pub trait PollChannel: Send + Sync {
    /// Waits up to `wait` for a state newer than `seen`; `None` if none came.
    fn next_change<'a>(
        &'a mut self,
        seen: &'a Arc<TypeState>,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Arc<TypeState>>>;

    /// Since when the state served is stale (its upstream is down), if it is.
    fn stale_since(&self) -> Option<SystemTime>;

    /// Whether a suspected rejection is NACKed upstream ([`Self::forward`]);
    /// by default it is only logged and counted.
    fn forwards(&self) -> bool {
        false
    }

    /// NACKs `suspicion` (of a client polling `request`) upstream; called
    /// only when [`Self::forwards`].
    fn forward(&self, _request: &ParsedRequest, _suspicion: &Suspicion) {}

    /// The same node's current state of another type, where the source
    /// keeps one per node (`None`: not known here).
    fn sibling(&self, _kind: ResourceType) -> Option<Arc<TypeState>> {
        None
    }
}

/// The state that answers one poll, and what the source does around it.
pub struct Polled {
    state: Arc<TypeState>,
    feed: Box<dyn PollChannel>,
}

impl std::fmt::Debug for Polled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polled")
            .field("kind", &self.state.kind)
            .field("version", &self.state.version)
            .finish_non_exhaustive()
    }
}

impl Polled {
    pub fn new(state: Arc<TypeState>, feed: Box<dyn PollChannel>) -> Polled {
        Polled { state, feed }
    }

    /// The state it answers with now.
    pub fn state(&self) -> &Arc<TypeState> {
        &self.state
    }

    /// The resources of the state it answers with now.
    pub fn resources(&self) -> &Arc<ResourceSet> {
        &self.state.resources
    }

    /// The state it answers with now, of the resources `names` select.
    pub fn selected<'a>(
        &'a self,
        names: &'a Names,
    ) -> impl Iterator<Item = &'a Arc<crate::cache::Resource>> + 'a {
        self.state.select(names)
    }

    /// The same node's current state of `kind`, if the source knows it
    /// (`PollChannel::sibling`).
    pub fn sibling(&self, kind: ResourceType) -> Option<Arc<TypeState>> {
        self.feed.sibling(kind)
    }

    /// NACKs `suspicion` (of a client polling `request`) upstream, if the
    /// source forwards suspected rejections; whether it does.
    pub fn forward(&self, request: &ParsedRequest, suspicion: &Suspicion) -> bool {
        let forwards = self.feed.forwards();
        if forwards {
            self.feed.forward(request, suspicion);
        }
        forwards
    }

    /// Long poll: waits up to `wait` for the state to change; true if it did
    /// (answer again), false if the wait ran out.
    pub async fn next_change(&mut self, wait: Duration) -> bool {
        let Some(next) = self.feed.next_change(&self.state, wait).await else {
            return false;
        };
        self.state = next;
        true
    }

    /// The current state as answered to `request` with `target` (what
    /// `?changes` diffs against later).
    pub fn served(&self, request: &ParsedRequest, target: Option<&RestTarget>) -> ServedAnswer {
        ServedAnswer::new(self.state.clone(), request.names(), target)
    }

    /// Since when the state served is stale (its upstream is down), if it is.
    pub fn stale_since(&self) -> Option<SystemTime> {
        self.feed.stale_since()
    }

    /// The types served opaque in the answer to `names` (none, almost
    /// always): what the `x-xds-gateway-opaque-types` header says.
    pub fn opaque_types(&self, names: &Names) -> Vec<String> {
        self.state.opaque_types(names)
    }

    /// Whether the answer to `names` holds a resource the upstream marked
    /// `do_not_cache` (then `Cache-Control: no-store`, and no memo keeps
    /// it).
    pub fn holds_uncacheable(&self, names: &Names) -> bool {
        self.state.holds_uncacheable(names)
    }
}

/// The message a NACK carries for a suspicion (or a client's NACK).
pub(super) fn suspicion_message(node_id: &str, suspicion: &Suspicion) -> String {
    if let Some(message) = &suspicion.nack {
        return format!(
            "xds-gateway: a REST client of node {node_id:?} NACKed version {:?} and holds {:?}: {message}",
            suspicion.current, suspicion.presented
        );
    }
    format!(
        "xds-gateway: a REST client of node {node_id:?} kept presenting version {:?} for {} polls after version {:?} was served; it probably rejected it",
        suspicion.presented, suspicion.polls, suspicion.current
    )
}
