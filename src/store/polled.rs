//! What a poll gets from a source: [`Polled`], the state that answers one
//! REST client now, over the source's own [`PollChannel`] (how a long poll
//! learns of the next state, whether the state is stale, whether a
//! suspected rejection is NACKed upstream).
//!
//! Rejection tracking is the same for every feed and happens once, in the
//! client book (`observe/clients.rs`, [`ClientBook::observe`]): REST has no
//! NACK, so a client that keeps presenting an older version after the
//! current one was served to it has probably rejected it. Every suspicion
//! is logged and counted here; whether it is also NACKed upstream is the
//! feed's business ([`PollChannel::forward`]). A poll through a trusted
//! proxy that did not say whose it is is never counted: its client cannot
//! be told from the others behind that proxy (see [`Polled::answer`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tracing::warn;

use crate::cache::{Answer, Assembler, ClientAddr, ParsedRequest, ResourceSet, TypeState};
use crate::log_escape::Escaped;
use crate::metrics::Metrics;
use crate::observe::{Booked, ClientBook, ServedAnswer, Standing, Suspicion};
use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// The per-source part of a [`Polled`]: the channel a poll talks back to its
/// source through (not to be confused with a [`super::feeder::Feeder`], which
/// feeds sessions).
pub(crate) trait PollChannel: Send + Sync {
    /// Waits up to `wait` for a state newer than `seen`; `None` if none came.
    fn next_change<'a>(
        &'a mut self,
        seen: &'a Arc<TypeState>,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Arc<TypeState>>>;

    /// Since when the state served is stale (its upstream is down), if it is.
    fn stale_since(&self) -> Option<SystemTime>;

    /// Where suspected rejections are counted.
    fn metrics(&self) -> &Metrics;

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
pub(crate) struct Polled {
    state: Arc<TypeState>,
    feed: Box<dyn PollChannel>,
    /// Where the client stood at the last answer.
    sync: Standing,
    /// The client as the book held it at the last answer, if it did: what
    /// the record of this poll takes instead of a second lookup.
    booked: Option<Booked>,
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
    pub(crate) fn new(state: Arc<TypeState>, feed: Box<dyn PollChannel>) -> Polled {
        Polled {
            state,
            feed,
            sync: Standing::default(),
            booked: None,
        }
    }

    /// The state it answers with now.
    pub(super) fn state(&self) -> &Arc<TypeState> {
        &self.state
    }

    /// The resources of the state it answers with now.
    pub(crate) fn resources(&self) -> &Arc<ResourceSet> {
        &self.state.resources
    }

    /// The state it answers with now, of the resources `names` select.
    pub(crate) fn selected<'a>(
        &'a self,
        names: &'a crate::cache::Names,
    ) -> impl Iterator<Item = &'a Arc<crate::cache::Resource>> + 'a {
        self.state.select(names)
    }

    /// The same node's current state of `kind`, if the source knows it
    /// ([`PollChannel::sibling`]).
    pub(crate) fn sibling(&self, kind: ResourceType) -> Option<Arc<TypeState>> {
        self.feed.sibling(kind)
    }

    /// Answers `request`, polled from `remote`, by the cache's rule (a
    /// body, or 304 when it holds what it would get), with the rejection
    /// bookkeeping around it.
    ///
    /// Without the bookkeeping when `remote` is a proxy's that named no
    /// client: the pods of one Deployment behind it (one node id, one
    /// address) poll as one key, and right after a change each presents
    /// the old version once before any presents the new one, which is
    /// exactly what one client rejecting it looks like. No rule on that
    /// key's polls tells the two apart: N clients polling every P seconds
    /// look like one polling every P/N until P has passed, and P (their
    /// refresh delay) is not in the requests. So nothing is guessed.
    pub(crate) fn answer(
        &mut self,
        assembler: &Assembler,
        ledger: &ClientBook,
        request: &ParsedRequest,
        remote: ClientAddr,
        target: Option<&RestTarget>,
    ) -> Result<Answer, JsonError> {
        let answer = self.state.answer_digested(
            assembler,
            request.names(),
            request.names_digest(),
            request.version_info(),
            target,
        )?;
        // A client refusing an answer that holds an Any served opaque is not
        // suspected of a rejection (nor is it forwarded upstream): the
        // gateway knows why, and it is its own limit, not the upstream's.
        if request.error_detail().is_some() {
            self.feed.metrics().client_nack(self.state.kind);
        }
        let opaque = !self.state.opaque_types(request.names()).is_empty();
        if !remote.is_one_client() || opaque {
            self.booked = None;
            self.sync = match answer {
                Answer::NotModified { .. } => Standing::InStep,
                Answer::Body { .. } => Standing::CatchingUp,
            };
            // A client's own NACK needs no guess: it is logged and counted,
            // but not forwarded (the gateway's own limit when opaque; one
            // per client behind a proxy that names none, with no book to
            // report it once).
            if let Some(detail) = request.error_detail() {
                self.nacked(request, answer.version(), &detail.message, false);
            }
            return Ok(answer);
        }
        let (sync, suspicion, booked) =
            ledger.observe(request, self.state.kind, remote.ip(), answer.version());
        self.sync = sync;
        self.booked = booked;
        if let Some(suspicion) = suspicion {
            self.suspected(request, &suspicion);
        }
        Ok(answer)
    }

    /// Logs and counts `suspicion` of a client polling `request`, and
    /// NACKs it upstream if the feed forwards them.
    fn suspected(&self, request: &ParsedRequest, suspicion: &Suspicion) {
        let nacked = self.feed.forwards();
        if let Some(message) = &suspicion.nack {
            self.nacked(request, &suspicion.current, message, nacked);
            if nacked {
                self.feed.forward(request, suspicion);
            }
            return;
        }
        let kind = self.state.kind;
        warn!(
            node = %Escaped(request.node_id()), %kind,
            presented = %Escaped(&suspicion.presented),
            current = %Escaped(&suspicion.current),
            polls = suspicion.polls, nacked,
            "suspected rejection: a REST client keeps presenting an older version"
        );
        self.feed.metrics().suspected_rejection(kind);
        if nacked {
            self.feed.forward(request, suspicion);
        }
    }

    /// Logs a client's own NACK of `current` (`forwarded`: it is also
    /// sent upstream). Every NACK poll is counted where it is answered.
    fn nacked(&self, request: &ParsedRequest, current: &str, message: &str, forwarded: bool) {
        let kind = self.state.kind;
        warn!(
            node = %Escaped(request.node_id()), %kind,
            presented = %Escaped(request.version_info()),
            %current, code = request.error_detail().map_or(0, |e| e.code),
            message = %Escaped(message), forwarded,
            "a REST client NACKed what it was served"
        );
    }

    /// Long poll: waits up to `wait` for the state to change; true if it did
    /// (answer again), false if the wait ran out.
    pub(crate) async fn next_change(&mut self, wait: Duration) -> bool {
        match self.feed.next_change(&self.state, wait).await {
            Some(next) => {
                self.state = next;
                true
            }
            None => false,
        }
    }

    /// The current state as answered to `request` with `target` (what
    /// `?changes` diffs against later).
    pub(crate) fn served(
        &self,
        request: &ParsedRequest,
        target: Option<&RestTarget>,
    ) -> ServedAnswer {
        ServedAnswer::new(self.state.clone(), request.names(), target)
    }

    /// Since when the state served is stale (its upstream is down), if it is.
    pub(crate) fn stale_since(&self) -> Option<SystemTime> {
        self.feed.stale_since()
    }

    /// The types served opaque in the answer to `names` (none, almost
    /// always): what the `x-xds-gateway-opaque-types` header says.
    pub(crate) fn opaque_types(&self, names: &crate::cache::Names) -> Vec<String> {
        self.state.opaque_types(names)
    }

    /// Whether the answer to `names` holds a resource the upstream marked
    /// `do_not_cache` (then `Cache-Control: no-store`, and no memo keeps
    /// it).
    pub(crate) fn holds_uncacheable(&self, names: &crate::cache::Names) -> bool {
        self.state.holds_uncacheable(names)
    }

    /// Where the client stood when it was last answered.
    pub(crate) fn standing(&self) -> Standing {
        self.sync
    }

    /// The client as the book held it when it was last answered, if it did
    /// (for `ClientBook::record_booked`).
    pub(crate) fn booked(&self) -> Option<&Booked> {
        self.booked.as_ref()
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
