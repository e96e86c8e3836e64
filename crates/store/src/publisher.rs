//! What a producer holds of the session it feeds ([`Publisher`]): the node
//! to send upstream, what clients subscribed to, the state it published
//! last, and where it writes: the next state, the upstream log (phase,
//! replies, down and stale marks, placements), the types and names the
//! upstream refused, and the NACKs it sent (the config history).
//!
//! What polls and admin do with a session (waiting, long polls, idle
//! tracking, subscribing, the view) is not reachable through it.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{node::SessionNode, session::Session, unserved::Unserved, upstream_log::UpstreamLog};
use crate::cache::{Coverage, TypeState};
use crate::xds::ResourceType;

/// A producer's handle on one session. Cloned freely: every clone is the
/// same session.
#[derive(Debug, Clone)]
pub struct Publisher(pub(super) Arc<Session>);

impl Publisher {
    /// A session of its own and the receiving end of its command channel,
    /// for a producer's tests.
    #[cfg(any(test, feature = "test-support"))]
    pub fn new(
        node: impl Into<SessionNode>,
    ) -> (
        Publisher,
        tokio::sync::mpsc::UnboundedReceiver<super::Command>,
    ) {
        let (session, commands) = Session::recorded(node, None);
        (Publisher(session), commands)
    }

    /// The node sent upstream.
    pub fn node(&self) -> &SessionNode {
        &self.0.node
    }

    /// What the upstream streams did last and where they stand.
    pub fn upstream(&self) -> &UpstreamLog {
        &self.0.upstream
    }

    /// The types and names the upstream refused, set aside.
    pub fn unserved(&self) -> &Unserved {
        &self.0.unserved
    }

    /// The subscription to send upstream for `kind`
    /// (`Session::subscription`).
    pub fn subscription(&self, kind: ResourceType) -> Option<Coverage> {
        self.0.subscription(kind)
    }

    /// The names of `kind` subscribed and not yet answered: wanted now, and
    /// not covered by the state published (every name wanted, before the
    /// type's first answer).
    pub fn unanswered_names(&self, kind: ResourceType) -> BTreeSet<String> {
        let mut wanted = self.0.subscription(kind).unwrap_or_default().names;
        if let Some(state) = self.0.state(kind) {
            wanted.retain(|name| !state.coverage.names.contains(name));
        }
        wanted
    }

    /// The upstream took `names` of `kind`, asked alone (`name_check.rs`
    /// in `upstream`): they are subscribed again.
    pub fn names_cleared(&self, kind: ResourceType, names: &BTreeSet<String>) {
        self.0.unserved.names_served(kind, names);
        self.0.send(super::Command::Resubscribe(kind));
    }

    pub fn state(&self, kind: ResourceType) -> Option<Arc<TypeState>> {
        self.0.state(kind)
    }

    pub fn has_state(&self) -> bool {
        self.0.has_state()
    }

    /// Publishes an accepted state to every waiting poll.
    pub fn publish(&self, state: TypeState) {
        self.0.publish(state);
    }

    /// Records in the config history that the gateway NACKed the response
    /// `nonce` of `kind` at `version` (the upstream's), saying `detail`.
    /// (`upstream.nacked` records what `/debug/sessions` shows: the
    /// version presented in the NACK.)
    pub fn record_nack(&self, kind: ResourceType, version: &str, nonce: &str, detail: &str) {
        if let Some(history) = &self.0.history {
            history.nacked(kind, version, nonce, detail);
        }
    }

    /// The upstream stream `lane` broke for `reason`
    /// (`Session::stream_failed`).
    pub fn stream_failed(&self, lane: Option<ResourceType>, reason: String) {
        self.0.stream_failed(lane, reason);
    }

    /// A client subscribes to `names` of `kind`, as a poll records it
    /// (settled), for a producer's tests.
    #[cfg(any(test, feature = "test-support"))]
    pub fn subscribe(
        &self,
        kind: ResourceType,
        names: &crate::cache::Names,
        max_names: usize,
    ) -> Result<(super::session::StateRx, bool), super::session::TooManyNames> {
        self.0.want(kind, names, super::SETTLE, max_names)
    }

    /// Forgets names no client asked for within `ttl`, as the registry's
    /// sweep does, for a producer's tests.
    #[cfg(any(test, feature = "test-support"))]
    pub fn sweep_names(&self, now: tokio::time::Instant, ttl: std::time::Duration) {
        self.0.prune(now, ttl);
    }
}
