//! What delta mode knows per type: the resources held with their
//! per-resource versions and which subscriptions are answered ([`Tracked`],
//! across streams), and per stream what was sent and is pending ([`Wire`]).
//! The coverage rules these implement are in the module docs of `delta`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tracing::debug;

use tokio::time::Instant;

use super::update::{digest, Held, Update};
use super::SETTLE;
use crate::cache::{Coverage, SharedAnswers, TypeState};
use crate::log_escape::Escaped;
use crate::xds::{membership, ResourceType};

/// What the gateway knows of one type, across streams.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    pub(super) held: BTreeMap<String, Held>,
    /// Explicitly subscribed names the upstream has answered (held or absent).
    pub(super) answered: BTreeSet<String>,
    pub(super) wildcard_answered: bool,
    /// (version, coverage) last published, so unchanged states are not republished.
    pub(super) published: Option<(String, Coverage)>,
}

impl Tracked {
    pub(super) fn coverage(&self) -> Coverage {
        Coverage {
            wildcard: self.wildcard_answered,
            names: self.answered.clone(),
        }
    }

    /// Forgets what `want` no longer asks for; true if anything was dropped.
    pub(super) fn narrow(&mut self, want: &Coverage) -> bool {
        let before = (self.held.len(), self.answered.len(), self.wildcard_answered);
        if !want.wildcard {
            self.wildcard_answered = false;
            self.held.retain(|_, h| want.wants_resource(&h.resource));
        }
        self.answered.retain(|name| want.names.contains(name));
        before != (self.held.len(), self.answered.len(), self.wildcard_answered)
    }

    /// The versions to present on a new stream.
    pub(super) fn initial_versions(&self) -> HashMap<String, String> {
        self.held
            .iter()
            .map(|(name, h)| (name.clone(), h.version.clone()))
            .collect()
    }

    /// Applies an accepted `update` of `kind` that arrived on a stream whose
    /// state for the type is `wire`, at `now`.
    pub(super) fn apply(
        &mut self,
        kind: ResourceType,
        wire: &mut Wire,
        update: Update,
        now: Instant,
    ) {
        let sent = wire.sent.clone().unwrap_or_default();
        let first = wire.answered_at.is_none();
        if first {
            wire.answered_at = Some(now);
        }
        if sent.wildcard && !wire.wildcard_dropped {
            // Only a wildcard brings a resource nothing named on the stream holds.
            let unnamed = |name: &str, aliases: &[String]| {
                !membership::wanted(kind, name, aliases, &wire.ever_named)
            };
            let proves = (first && wire.first.wildcard)
                || update
                    .added
                    .iter()
                    .any(|(name, h)| unnamed(name, &h.resource.aliases))
                || update.name_only.iter().any(|(name, _)| unnamed(name, &[]));
            if proves {
                self.wildcard_answered = true;
                wire.pending_wildcard = None;
            }
        }
        // A resource answers its own name if subscribed, and every set it
        // belongs to (an empty set settles).
        let answered = |tracked: &mut Tracked, wire: &mut Wire, name: &str, aliases: &[String]| {
            let own = sent.names.get(name).into_iter();
            for set in own.chain(membership::sets_holding(kind, name, aliases, &sent.names)) {
                wire.pending.remove(set);
                tracked.answered.insert(set.clone());
            }
        };
        if first {
            // The first response answers the stream's first subscription.
            let names: Vec<String> = wire.first.names.iter().cloned().collect();
            for name in &names {
                answered(self, wire, name, &[]);
            }
        }
        for (name, held) in update.added {
            if !sent.wants_resource(&held.resource) {
                debug!(name = %Escaped(&name), "resource nobody subscribed to: ignored");
                continue;
            }
            answered(self, wire, &name, &held.resource.aliases);
            self.held.insert(name, held);
        }
        for (name, version) in update.name_only {
            let heartbeat = self
                .held
                .get(&name)
                .is_some_and(|h| h.version == version && !version.is_empty());
            if !heartbeat {
                self.held.remove(&name);
            }
            answered(self, wire, &name, &[]);
        }
        for name in update.removed {
            self.held.remove(&name);
            answered(self, wire, &name, &[]);
        }
    }

    /// Takes what `wire` has waited [`SETTLE`] for as answered; true if any.
    pub(super) fn settle(&mut self, wire: &mut Wire, now: Instant) -> bool {
        let Some(base) = wire.answered_at else {
            return false;
        };
        let due = |since: Instant| since.max(base) + SETTLE <= now;
        let names: Vec<String> = wire
            .pending
            .iter()
            .filter(|(_, since)| due(**since))
            .map(|(name, _)| name.clone())
            .collect();
        let mut changed = false;
        for name in names {
            wire.pending.remove(&name);
            changed |= self.answered.insert(name);
        }
        if wire.pending_wildcard.is_some_and(due) {
            wire.pending_wildcard = None;
            changed |= !self.wildcard_answered;
            self.wildcard_answered = true;
        }
        changed
    }

    /// The state to publish: its resources a set shared with every session
    /// holding the same (`shared`), its version their digest.
    pub(super) fn state(&self, kind: ResourceType, shared: &SharedAnswers) -> TypeState {
        let version = digest(&self.held);
        let held = self.held.iter().map(|(name, h)| (name, &h.resource));
        let resources = shared.held(kind, &version, held);
        TypeState::new(kind, version, String::new(), resources, self.coverage())
    }
}

/// One type on one stream.
#[derive(Debug, Default)]
pub(super) struct Wire {
    /// What the upstream was told this stream subscribes to; `None` until
    /// the first request of the type on the stream.
    pub(super) sent: Option<Coverage>,
    /// The first subscription of the type on the stream.
    pub(super) first: Coverage,
    /// Nonce of the latest response of the type (what ACKs/NACKs carry).
    pub(super) nonce: String,
    /// When the first accepted response of the type arrived on the stream.
    pub(super) answered_at: Option<Instant>,
    /// Every name explicitly subscribed on the stream.
    pub(super) ever_named: BTreeSet<String>,
    /// Whether `*` was unsubscribed on the stream.
    pub(super) wildcard_dropped: bool,
    /// Unanswered subscribed names, with when they were subscribed.
    pub(super) pending: BTreeMap<String, Instant>,
    pub(super) pending_wildcard: Option<Instant>,
}

impl Wire {
    /// Records that `want` replaces `sent` on the stream at `now`.
    pub(super) fn record(&mut self, sent: &Coverage, want: &Coverage, now: Instant) {
        if self.sent.is_none() {
            self.first = want.clone();
        }
        for name in want.names.difference(&sent.names) {
            self.pending.insert(name.clone(), now);
        }
        for name in sent.names.difference(&want.names) {
            self.pending.remove(name);
        }
        self.ever_named.extend(want.names.iter().cloned());
        match (sent.wildcard, want.wildcard) {
            (false, true) => self.pending_wildcard = Some(now),
            (true, false) => {
                self.pending_wildcard = None;
                self.wildcard_dropped = true;
            }
            _ => {}
        }
        self.sent = Some(want.clone());
    }

    /// When the next pending subscription settles, if the stream answers the type.
    pub(super) fn next_settle(&self) -> Option<Instant> {
        let base = self.answered_at?;
        self.pending
            .values()
            .copied()
            .chain(self.pending_wildcard)
            .map(|since| since.max(base) + SETTLE)
            .min()
    }
}
