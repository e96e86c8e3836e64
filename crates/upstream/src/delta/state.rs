//! What delta mode knows per type: the resources held with their
//! per-resource versions and which subscriptions are answered ([`Tracked`],
//! across streams), and per stream what was sent and is pending ([`Wire`]).
//! The coverage rules these implement are in the module docs of `delta`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tracing::debug;

use tokio::time::Instant;

use super::update::Update;
use super::SETTLE;
use crate::cache::{Coverage, ResourceErrors, ResourceSet, TypeState};
use crate::held::{Edit, HeldSet, HeldSets};
use crate::log_escape::Escaped;
use crate::xds::{membership, ResourceType};

/// What the gateway knows of one type, across streams.
#[derive(Debug)]
pub(super) struct Tracked {
    /// Shared with every session of the upstream holding the same.
    pub(super) held: Arc<HeldSet>,
    /// Where `held` is found and made (one per upstream).
    sets: Arc<HeldSets>,
    /// Explicitly subscribed names the upstream has answered (held or absent).
    pub(super) answered: BTreeSet<String>,
    pub(super) wildcard_answered: bool,
    /// (version, coverage, descriptor pool generation) last published, so
    /// unchanged states are not republished (forgotten when `errors`
    /// change).
    pub(super) published: Option<(String, Coverage, u64)>,
    /// What the upstream reported wrong with single resources, remembered
    /// until a response carries the resource again or removes it.
    errors: Arc<ResourceErrors>,
    /// Names of held resources the upstream said proxies may not cache, as
    /// the response that last carried each said.
    uncacheable: BTreeSet<String>,
}

impl Tracked {
    /// Nothing known yet, its sets found in and made by `sets`.
    pub(super) fn new(sets: Arc<HeldSets>) -> Tracked {
        Tracked {
            held: Arc::default(),
            sets,
            answered: BTreeSet::new(),
            wildcard_answered: false,
            published: None,
            errors: Arc::default(),
            uncacheable: BTreeSet::new(),
        }
    }

    pub(super) fn coverage(&self) -> Coverage {
        Coverage {
            wildcard: self.wildcard_answered,
            names: self.answered.clone(),
        }
    }

    /// Forgets what `want` no longer asks for; true if anything was dropped.
    pub(super) fn narrow(&mut self, kind: ResourceType, want: &Coverage) -> bool {
        let before = (self.held.len(), self.answered.len(), self.wildcard_answered);
        if !want.wildcard {
            self.wildcard_answered = false;
            let mut edit = Edit::default();
            for (name, h) in self.held.iter() {
                if !want.wants_resource(&h.resource) {
                    edit.forget(&self.held, name);
                }
            }
            self.edit(kind, edit);
        }
        self.answered.retain(|name| want.names.contains(name));
        before != (self.held.len(), self.answered.len(), self.wildcard_answered)
    }

    /// Forgets `names` (their TTL ran out).
    pub(super) fn forget(&mut self, kind: ResourceType, names: &[String]) {
        let mut edit = Edit::default();
        for name in names {
            edit.forget(&self.held, name);
        }
        self.edit(kind, edit);
    }

    /// Holds what `edit` (an edit of what is held) makes of it; a name no
    /// longer held is no longer marked `do_not_cache`.
    pub(super) fn edit(&mut self, kind: ResourceType, edit: Edit) {
        self.held = self.sets.after(kind, &self.held, edit);
        let held = &self.held;
        self.uncacheable.retain(|name| held.contains_key(name));
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
        mut update: Update,
        now: Instant,
    ) {
        let sent = wire.sent.clone().unwrap_or_default();
        let first = wire.answered_at.is_none();
        wire.answered_at.get_or_insert(now);
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
        if !update.errors.is_empty() || !self.errors.is_empty() {
            let carried = update.added.iter().map(|(name, _)| name.as_str());
            let gone = update.removed.iter().map(String::as_str);
            let errors = self.errors.after(carried, gone, update.errors.drain(..));
            if errors != *self.errors {
                self.errors = Arc::new(errors);
                self.published = None;
            }
        }
        // Names are unique across the update's lists (`decode_update`), so
        // one edit of what was held before makes all of it.
        let mut edit = Edit::default();
        let uncacheable_before = self.uncacheable.clone();
        for (name, held) in update.added {
            if !sent.wants_resource(&held.resource) {
                debug!(name = %Escaped(&name), "resource nobody subscribed to: ignored");
                continue;
            }
            answered(self, wire, &name, &held.resource.aliases);
            if update.uncacheable.contains(&name) {
                self.uncacheable.insert(name.clone());
            } else {
                self.uncacheable.remove(&name);
            }
            edit.put(&self.held, name, held);
        }
        for (name, version) in update.name_only {
            let heartbeat = self
                .held
                .get(&name)
                .is_some_and(|h| h.version == version && !version.is_empty());
            if !heartbeat {
                edit.forget(&self.held, &name);
            }
            answered(self, wire, &name, &[]);
        }
        for name in update.removed {
            edit.forget(&self.held, &name);
            answered(self, wire, &name, &[]);
        }
        self.edit(kind, edit);
        if self.uncacheable != uncacheable_before {
            self.published = None;
        }
    }

    /// Takes what `wire` has waited [`SETTLE`] for as answered; true if any.
    pub(super) fn settle(&mut self, wire: &mut Wire, now: Instant) -> bool {
        let Some(base) = wire.answered_at else {
            return false;
        };
        let due = |since: Instant| since.max(base) + SETTLE <= now;
        let mut changed = false;
        wire.pending.retain(|name, since| {
            let settled = due(*since);
            changed |= settled && self.answered.insert(name.clone());
            !settled
        });
        if wire.pending_wildcard.is_some_and(due) {
            wire.pending_wildcard = None;
            changed |= !self.wildcard_answered;
            self.wildcard_answered = true;
        }
        changed
    }

    /// The state to publish: the held set's resources as `rendered` makes
    /// them, and its version.
    pub(super) fn state(
        &self,
        kind: ResourceType,
        rendered: impl FnOnce(Arc<ResourceSet>) -> Arc<ResourceSet>,
    ) -> TypeState {
        let state = TypeState::new(
            kind,
            self.held.version.clone(),
            String::new(),
            rendered(self.held.resources.clone()),
            self.coverage(),
        );
        let state = match self.uncacheable.is_empty() {
            true => state,
            false => state.with_uncacheable(Arc::new(self.uncacheable.clone())),
        };
        if self.errors.is_empty() {
            return state;
        }
        state.with_errors(self.errors.clone())
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
