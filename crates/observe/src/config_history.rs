//! The config history: per node identity and type, a bounded timeline of the
//! versions the upstream pushed (when, the gateway's version, the upstream's
//! version and nonce, the resources added, modified or removed) and of the
//! NACKs the gateway sent upstream (with their `error_detail`), for
//! `/debug/history` and `/debug/diff`. Timelines are keyed by a digest of the
//! [`IdentityKey`](super::IdentityKey), not by the session: a session that
//! idles out and comes back finds its history. Sessions write through a
//! [`Recorder`].
//!
//! # The bound
//!
//! One byte bound for the whole store (`--history-max-bytes`): past it, the
//! oldest events of the whole store go first, whichever timeline. A version
//! holds the published [`TypeState`] by `Arc` (the cache's own resources,
//! never copied); counted is what the store keeps alive: each resource once
//! however many versions share it (JSON, payload, name, bookkeeping), each
//! version's map of names, each event's own strings. A timeline whose every
//! event was evicted is forgotten; its next version is listed as all added
//! (`since` absent, as it is once the version compared with is evicted).
//!
//! # Each principal's share
//!
//! Under a policy of several principals, a session's events count against
//! the principal whose request opened it, up to `--principal-share` of the
//! bound (one principal's 80 nodes emptied every other tenant's history):
//! past it, that principal's own oldest events go first, wherever they are.
//! An event is charged what it added to the store (its own bytes, and the
//! resources no event held before), and given back exactly that.
//!
//! Every event can also go to a [`HistorySink`] as a [`HistoryLine`] (the
//! `--history-file`), whatever the bound keeps; the sink does the I/O, off
//! the push path.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::cache::{by_name, upstream_version, Names, Paired, Resource, TypeState};
use crate::xds::ResourceType;

/// The default bound, in bytes (64 MiB).
pub(crate) const DEFAULT_HISTORY_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes every event costs besides its strings and content: the event, its
/// place in the store's order, its `Vec`s and `VecDeque` slot.
const EVENT_OVERHEAD: u64 = 160;
/// Bytes a held resource costs besides its JSON, payload and name: the
/// `Resource` and the store's count of it.
const RESOURCE_OVERHEAD: u64 = 120;
/// Bytes one name costs in a version's map or a change list (a `String`
/// and its slot), besides its characters.
const NAME_OVERHEAD: u64 = 48;
/// Bytes a timeline costs while it holds events (its key, node and map slot).
const TIMELINE_OVERHEAD: u64 = 200;

/// Which identity a timeline belongs to: the SHA-256 of the session's
/// identity key (node id, cluster, metadata and locality), so a node with
/// megabytes of metadata costs 32 bytes per timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct IdentityDigest([u8; 32]);

impl IdentityDigest {
    pub(crate) fn of(identity: &str) -> IdentityDigest {
        IdentityDigest(Sha256::digest(identity.as_bytes()).into())
    }

    /// The first 12 hex digits: what the views show to tell apart two
    /// identities with the same node id and cluster.
    fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

type TimelineKey = (IdentityDigest, ResourceType);

/// What happened, as held.
#[derive(Debug)]
enum Happened {
    /// The session published a state (an upstream push, a TTL expiry, a
    /// snapshot reload).
    Version {
        /// The version a client asking the subscription's names (without a
        /// rewrite) is served: what `/debug/config` shows. Worked out when
        /// first shown, not on the push path: it digests every resource,
        /// and a node subscribing to 1,000 names one by one is pushed 1,000
        /// growing states.
        gateway_version: OnceLock<String>,
        state: Arc<TypeState>,
        /// The event it was compared with (`None`: the first held).
        since: Option<u64>,
        /// What changed since then (shared by the events of every session
        /// taken from the same set to the same set).
        changes: Arc<Changes>,
    },
    /// The gateway NACKed an upstream response.
    Nack {
        upstream_version: String,
        nonce: String,
        error_detail: String,
    },
}

#[derive(Debug)]
struct Event {
    seq: u64,
    at: SystemTime,
    happened: Happened,
    /// What it adds to the store's count besides the resources it holds.
    bytes: u64,
    /// The principal it counts against, and what it was charged.
    owner: Option<(Owner, u64)>,
}

/// A principal of a policy with several, as the history counts it.
pub(crate) type Owner = Arc<str>;

/// What one principal's events hold.
#[derive(Debug, Default)]
struct Owned {
    /// Charged to it, in bytes.
    bytes: u64,
    /// Its events, oldest first (some may be gone already).
    order: VecDeque<(u64, TimelineKey)>,
}

#[derive(Debug)]
struct Timeline {
    node_id: String,
    cluster: String,
    events: VecDeque<Event>,
}

impl Timeline {
    /// The newest version held, if any, and its event's seq.
    fn newest_version(&self) -> Option<(u64, &Arc<TypeState>)> {
        self.events
            .iter()
            .rev()
            .find_map(|e| Some((e.seq, e.state()?)))
    }

    /// The gateway version of the event `seq`, if held and a version.
    fn version_of(&self, seq: u64) -> Option<&str> {
        let at = self.events.binary_search_by_key(&seq, |e| e.seq).ok()?;
        self.events[at].gateway_version()
    }
}

impl Event {
    /// The state a version published (`None` for a NACK).
    fn state(&self) -> Option<&Arc<TypeState>> {
        match &self.happened {
            Happened::Version { state, .. } => Some(state),
            Happened::Nack { .. } => None,
        }
    }

    /// The gateway version of a version (worked out once, when first asked).
    fn gateway_version(&self) -> Option<&str> {
        match &self.happened {
            Happened::Version {
                gateway_version,
                state,
                ..
            } => Some(
                gateway_version
                    .get_or_init(|| state.served_version(&covered_names(state), None))
                    .as_str(),
            ),
            Happened::Nack { .. } => None,
        }
    }
}

/// Changes between two sets worked out lately are kept, by (old set, new
/// set): a SotW push takes every session from one shared set to the next,
/// and the comparison walks every resource.
const CHANGES_KEPT: usize = 8;

/// Added, modified and removed names, each sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub removed: Vec<String>,
}

/// Things several events hold at once (resources, sets of them, lists of
/// changes), each weighed once: by key, how many hold it and its bytes.
#[derive(Debug, Default)]
struct Shares(HashMap<usize, (usize, u64)>);

impl Shares {
    /// Counts `key` as held once more; its bytes (`weigh`) when it was not
    /// held before, else 0.
    fn hold(&mut self, key: usize, weigh: impl FnOnce() -> u64) -> u64 {
        let mut added = 0;
        let held = self.0.entry(key).or_insert_with(|| {
            added = weigh();
            (0, added)
        });
        held.0 += 1;
        added
    }

    /// Counts `key` as held once less; its bytes when nothing holds it any
    /// more (`None` otherwise).
    fn release(&mut self, key: usize) -> Option<u64> {
        let held = self.0.get_mut(&key)?;
        held.0 -= 1;
        if held.0 > 0 {
            return None;
        }
        self.0.remove(&key).map(|(_, bytes)| bytes)
    }
}

#[derive(Debug, Default)]
struct Store {
    timelines: HashMap<TimelineKey, Timeline>,
    /// Every held event's timeline, oldest first (sequence numbers rise).
    order: VecDeque<(u64, TimelineKey)>,
    /// Resources held, by address (unique while the store holds an `Arc`).
    resources: Shares,
    /// Sets of resources held, by address.
    sets: Shares,
    /// Lists of changes held, by address.
    changes: Shares,
    /// The latest [`changes`] worked out, by (old set id, new set id).
    recent_changes: VecDeque<((u64, u64), Arc<Changes>)>,
    /// What each principal's events hold.
    owners: HashMap<Owner, Owned>,
    bytes: u64,
    next_seq: u64,
}

impl Store {
    /// Counts what a version event holds (its state's set of resources,
    /// and the list of changes) as held once more; returns the bytes that
    /// adds: those of what no other event holds yet (a new set: its map of
    /// names and the resources no other set holds).
    fn hold(&mut self, state: &TypeState, changes: &Arc<Changes>) -> u64 {
        let mut added = self
            .changes
            .hold(Arc::as_ptr(changes) as usize, || changes_bytes(changes));
        let set = &state.resources;
        let mut new_set = false;
        added += self.sets.hold(Arc::as_ptr(set) as usize, || {
            new_set = true;
            names_bytes(set.keys())
        });
        if new_set {
            for resource in set.values() {
                added += self
                    .resources
                    .hold(Arc::as_ptr(resource) as usize, || resource_bytes(resource));
            }
        }
        added
    }

    /// The reverse of [`hold`](Self::hold): the bytes freed.
    fn release(&mut self, state: &TypeState, changes: &Arc<Changes>) -> u64 {
        let mut freed = self
            .changes
            .release(Arc::as_ptr(changes) as usize)
            .unwrap_or(0);
        let set = &state.resources;
        if let Some(bytes) = self.sets.release(Arc::as_ptr(set) as usize) {
            freed += bytes;
            for resource in set.values() {
                freed += self
                    .resources
                    .release(Arc::as_ptr(resource) as usize)
                    .unwrap_or(0);
            }
        }
        freed
    }

    /// Adds an event to `key`'s timeline, charged to `owner` if any
    /// (evicting the owner's oldest past `share`, then the store's oldest
    /// past `max`); returns it as the views show it when `view` (a sink
    /// wants it).
    fn push(
        &mut self,
        (key, node): (TimelineKey, (&str, &str)),
        happened: Happened,
        (owner, max, share): (Option<&Owner>, u64, u64),
        view: bool,
    ) -> Option<EventView> {
        let mut bytes = EVENT_OVERHEAD + happened_bytes(&happened);
        let held = match &happened {
            Happened::Version { state, changes, .. } => self.hold(state, changes),
            Happened::Nack { .. } => 0,
        };
        let timeline = self.timelines.entry(key).or_insert_with(|| {
            bytes += TIMELINE_OVERHEAD + (node.0.len() + node.1.len()) as u64;
            Timeline {
                node_id: node.0.to_owned(),
                cluster: node.1.to_owned(),
                events: VecDeque::new(),
            }
        });
        let seq = self.next_seq;
        self.next_seq += 1;
        let charged = bytes + held;
        let event = Event {
            seq,
            at: SystemTime::now(),
            happened,
            bytes,
            owner: owner.map(|owner| (owner.clone(), charged)),
        };
        let view = view.then(|| event_view(timeline, &event));
        timeline.events.push_back(event);
        self.order.push_back((seq, key));
        self.bytes += charged;
        if let Some(owner) = owner {
            let owned = self.owners.entry(owner.clone()).or_default();
            owned.bytes += charged;
            owned.order.push_back((seq, key));
            while self.owners.get(owner).is_some_and(|o| o.bytes > share)
                && self.evict_oldest_of(owner)
            {}
        }
        while self.bytes > max && self.evict_oldest() {}
        view
    }

    /// Drops the oldest event of the store; `false` when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((seq, key)) = self.order.pop_front() else {
            return false;
        };
        // An entry whose event went already (evicted from its owner's
        // share) is passed over.
        let front = self
            .timelines
            .get(&key)
            .and_then(|t| t.events.front())
            .map(|e| e.seq);
        if front == Some(seq) {
            self.remove(key, 0);
        }
        true
    }

    /// Drops the oldest event still held of `owner`; `false` when it holds
    /// none.
    fn evict_oldest_of(&mut self, owner: &Owner) -> bool {
        loop {
            let Some((seq, key)) = self.owners.get_mut(owner).and_then(|o| o.order.pop_front())
            else {
                return false;
            };
            let at = self
                .timelines
                .get(&key)
                .and_then(|t| t.events.binary_search_by_key(&seq, |e| e.seq).ok());
            if let Some(at) = at {
                self.remove(key, at);
                return true;
            }
        }
    }

    /// Removes the event at `at` in `key`'s timeline, giving back what it
    /// holds (and its timeline, when it was the last) to the store and to
    /// its owner.
    fn remove(&mut self, key: TimelineKey, at: usize) {
        let Some(timeline) = self.timelines.get_mut(&key) else {
            return;
        };
        let Some(event) = timeline.events.remove(at) else {
            return;
        };
        let mut freed = event.bytes;
        if timeline.events.is_empty() {
            freed += TIMELINE_OVERHEAD + (timeline.node_id.len() + timeline.cluster.len()) as u64;
            self.timelines.remove(&key);
        }
        if let Happened::Version { state, changes, .. } = &event.happened {
            freed += self.release(state, changes);
        }
        self.bytes = self.bytes.saturating_sub(freed);
        if let Some((owner, charged)) = &event.owner {
            if let Some(owned) = self.owners.get_mut(owner) {
                owned.bytes = owned.bytes.saturating_sub(*charged);
                if owned.bytes == 0 {
                    self.owners.remove(owner);
                }
            }
        }
    }
}

/// What a resource kept alive weighs.
fn resource_bytes(resource: &Resource) -> u64 {
    (resource.json.len()
        + resource.payload.len()
        + resource.name.len()
        + resource.aliases.iter().map(String::len).sum::<usize>()) as u64
        + RESOURCE_OVERHEAD
}

/// What names weigh, in a version's map of names or a list of changes.
fn names_bytes<'a>(names: impl IntoIterator<Item = &'a String>) -> u64 {
    names
        .into_iter()
        .map(|n| n.len() as u64 + NAME_OVERHEAD)
        .sum()
}

/// What a list of changes weighs.
fn changes_bytes(changes: &Changes) -> u64 {
    let lists = [&changes.added, &changes.modified, &changes.removed];
    names_bytes(lists.into_iter().flatten()) + 3 * 24
}

/// What an event's own strings weigh (what it shares with other events is
/// weighed once, by [`Store::hold`]).
fn happened_bytes(happened: &Happened) -> u64 {
    match happened {
        Happened::Version { state, .. } => {
            // The gateway version, once worked out, is the upstream's, `~`
            // and 12 hex digits.
            (2 * state.version.len() + 13 + state.nonce.len()) as u64
                + names_bytes(&state.coverage.names)
        }
        Happened::Nack {
            upstream_version,
            nonce,
            error_detail,
        } => (upstream_version.len() + nonce.len() + error_detail.len()) as u64,
    }
}

/// The names a client asking what `state` covers is served (without a
/// rewrite): what its gateway version digests.
pub fn covered_names(state: &TypeState) -> Names {
    if state.coverage.wildcard {
        Names::Wildcard
    } else {
        Names::Named(state.coverage.names.clone())
    }
}

/// Added, modified and removed names from `old` to `new`, each sorted.
fn changes(old: Option<&TypeState>, new: &TypeState) -> Changes {
    let empty = BTreeMap::new();
    let before = old.map_or(&empty, |s| s.resources.map());
    let mut changes = Changes::default();
    for (name, paired) in by_name(before, new.resources.iter()) {
        match paired {
            Paired::New(_) => changes.added.push(name.clone()),
            Paired::Both(was, now) if was.digest != now.digest => {
                changes.modified.push(name.clone())
            }
            Paired::Both(..) => {}
            Paired::Old(_) => changes.removed.push(name.clone()),
        }
    }
    changes
}

/// One event, with whose it is: what a [`HistorySink`] is given.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryLine {
    pub node_id: String,
    pub cluster: String,
    /// As [`TimelineView::identity`].
    pub identity: String,
    /// The short type name.
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(flatten)]
    pub event: EventView,
    /// The principal whose share of the file it counts against (not
    /// written).
    #[serde(skip)]
    pub owner: Option<Owner>,
}

/// Where every event goes besides the store (the JSON-lines file).
/// `write` must not block: it is called on the upstream push path.
pub trait HistorySink: Send + Sync + std::fmt::Debug {
    fn write(&self, line: HistoryLine);
}

/// The config history of every node identity. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct ConfigHistory {
    store: Arc<Mutex<Store>>,
    max_bytes: u64,
    /// What one principal's events may hold (`--principal-share` of
    /// `max_bytes`).
    share: u64,
    sink: Option<Arc<dyn HistorySink>>,
}

impl Default for ConfigHistory {
    fn default() -> ConfigHistory {
        ConfigHistory::with_max_bytes(DEFAULT_HISTORY_BYTES)
    }
}

impl ConfigHistory {
    /// A history holding at most `max_bytes` (0 holds nothing).
    pub fn with_max_bytes(max_bytes: u64) -> ConfigHistory {
        ConfigHistory {
            store: Arc::default(),
            max_bytes,
            share: max_bytes,
            sink: None,
        }
    }

    /// The same history, a principal's events holding at most `percent`%
    /// of its bytes (`--principal-share`).
    pub fn with_principal_share(mut self, percent: u8) -> ConfigHistory {
        self.share = self.max_bytes.saturating_mul(u64::from(percent.min(100))) / 100;
        self
    }

    /// The same history, also writing every event to `sink`.
    pub fn with_sink(mut self, sink: Option<Arc<dyn HistorySink>>) -> ConfigHistory {
        self.sink = sink;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        crate::sync::lock(&self.store)
    }

    /// What a session of `identity` (its identity key), presenting the node
    /// `node_id` of `cluster`, records through.
    pub fn recorder(&self, identity: &str, node_id: &str, cluster: &str) -> Recorder {
        Recorder {
            history: self.clone(),
            identity: IdentityDigest::of(identity),
            node_id: node_id.to_owned(),
            cluster: cluster.to_owned(),
            owner: None,
        }
    }

    /// Bytes held now, and the bound.
    pub fn held_bytes(&self) -> (u64, u64) {
        (self.lock().bytes, self.max_bytes)
    }

    /// The timelines of `kind` for the node `node_id` (of `cluster`, when
    /// given), sorted by cluster and identity.
    pub fn timelines(
        &self,
        node_id: &str,
        cluster: Option<&str>,
        kind: ResourceType,
    ) -> Vec<TimelineView> {
        let store = self.lock();
        let mut views: Vec<TimelineView> = store
            .timelines
            .iter()
            .filter(|((_, k), t)| *k == kind && matches(t, node_id, cluster))
            .map(|((identity, _), t)| TimelineView {
                cluster: t.cluster.clone(),
                identity: identity.short(),
                events: t.events.iter().map(|e| event_view(t, e)).collect(),
            })
            .collect();
        views.sort_by(|a, b| (&a.cluster, &a.identity).cmp(&(&b.cluster, &b.identity)));
        views
    }

    /// The version `version` of `kind` of the node `node_id` (of
    /// `cluster`, when given), if held: the newest event whose gateway
    /// version is `version`; else whose upstream version is; else whose
    /// upstream version is the upstream part of `version` (a version a
    /// client was served, its digest of other names or a rewrite).
    pub fn version(
        &self,
        node_id: &str,
        cluster: Option<&str>,
        kind: ResourceType,
        version: &str,
    ) -> Option<HeldVersion> {
        let store = self.lock();
        let events = store
            .timelines
            .iter()
            .filter(|((_, k), t)| *k == kind && matches(t, node_id, cluster))
            .flat_map(|((identity, _), t)| t.events.iter().map(move |e| (identity, t, e)));
        let (_, (identity, t, event, state)) = events
            .filter_map(|(identity, t, event)| {
                let state = event.state()?;
                // A gateway version matches before an upstream one.
                let rank = if event.gateway_version()? == version {
                    3
                } else if state.version == version {
                    2
                } else if state.version == upstream_version(version) {
                    1
                } else {
                    return None;
                };
                Some(((rank, event.seq), (identity, t, event, state)))
            })
            .max_by_key(|(rank, _)| *rank)?;
        Some(HeldVersion {
            cluster: t.cluster.clone(),
            identity: identity.short(),
            event: event_view(t, event),
            state: state.clone(),
        })
    }

    /// The version of `kind` of the node `node_id` held just before the one
    /// that published `state`, if both are held.
    pub fn before(
        &self,
        node_id: &str,
        kind: ResourceType,
        state: &Arc<TypeState>,
    ) -> Option<HeldVersion> {
        let store = self.lock();
        for ((identity, k), t) in &store.timelines {
            if *k != kind || !matches(t, node_id, None) {
                continue;
            }
            let versions: Vec<(&Event, &Arc<TypeState>)> = t
                .events
                .iter()
                .filter_map(|e| Some((e, e.state()?)))
                .collect();
            let Some(at) = versions.iter().position(|(_, s)| Arc::ptr_eq(s, state)) else {
                continue;
            };
            let (event, previous) = versions.get(at.checked_sub(1)?)?;
            return Some(HeldVersion {
                cluster: t.cluster.clone(),
                identity: identity.short(),
                event: event_view(t, event),
                state: (*previous).clone(),
            });
        }
        None
    }
}

fn matches(timeline: &Timeline, node_id: &str, cluster: Option<&str>) -> bool {
    timeline.node_id == node_id && cluster.is_none_or(|c| timeline.cluster == c)
}

/// What a session records through: the history and whose it is.
#[derive(Debug, Clone)]
pub struct Recorder {
    history: ConfigHistory,
    identity: IdentityDigest,
    node_id: String,
    cluster: String,
    /// The principal whose share its events count against, if any.
    owner: Option<Owner>,
}

impl Recorder {
    /// The same recorder, its events counting against `owner`'s share
    /// (the principal whose request opened the session, under a policy of
    /// several).
    pub fn owned_by(mut self, owner: Option<&str>) -> Recorder {
        self.owner = owner.map(Owner::from);
        self
    }

    pub fn published(&self, state: &Arc<TypeState>) {
        let key = (self.identity, state.kind);
        // The comparison runs outside the store's lock (it walks every
        // resource); a session publishes one type's states one at a time.
        // Sessions taken from one shared set to the same next one share
        // the comparison (set ids start at 1: 0 is "no previous set").
        let (previous, ids, known) = {
            let store = self.history.lock();
            let previous = store
                .timelines
                .get(&key)
                .and_then(Timeline::newest_version)
                .map(|(seq, s)| (seq, s.clone()));
            let from = previous.as_ref().map_or(0, |(_, s)| s.resources.id());
            let ids = (from, state.resources.id());
            let known = store.recent_changes.iter().find(|(k, _)| *k == ids);
            (previous, ids, known.map(|(_, c)| c.clone()))
        };
        let changes = known.unwrap_or_else(|| {
            let worked_out = Arc::new(changes(previous.as_ref().map(|(_, s)| &**s), state));
            let mut store = self.history.lock();
            if store.recent_changes.len() >= CHANGES_KEPT {
                store.recent_changes.pop_front();
            }
            store.recent_changes.push_back((ids, worked_out.clone()));
            worked_out
        });
        let happened = Happened::Version {
            gateway_version: OnceLock::new(),
            state: state.clone(),
            since: previous.map(|(seq, _)| seq),
            changes,
        };
        self.record(state.kind, happened);
    }

    /// Pushes `happened` to the timeline of `kind`, and hands it to the
    /// history's sink, if it has one.
    fn record(&self, kind: ResourceType, happened: Happened) {
        let history = &self.history;
        let view = history.lock().push(
            ((self.identity, kind), (&self.node_id, &self.cluster)),
            happened,
            (self.owner.as_ref(), history.max_bytes, history.share),
            history.sink.is_some(),
        );
        if let (Some(sink), Some(event)) = (&self.history.sink, view) {
            sink.write(HistoryLine {
                node_id: self.node_id.clone(),
                cluster: self.cluster.clone(),
                identity: self.identity.short(),
                kind: kind.short_name(),
                event,
                owner: self.owner.clone(),
            });
        }
    }

    /// The gateway NACKed the response `nonce` of `kind` at
    /// `upstream_version`, saying `detail`.
    pub fn nacked(&self, kind: ResourceType, upstream_version: &str, nonce: &str, detail: &str) {
        let happened = Happened::Nack {
            upstream_version: upstream_version.to_owned(),
            nonce: nonce.to_owned(),
            error_detail: detail.to_owned(),
        };
        self.record(kind, happened);
    }
}

/// A held version, for `&version=` and diffs.
#[derive(Debug, Clone)]
pub struct HeldVersion {
    pub cluster: String,
    pub identity: String,
    pub event: EventView,
    pub state: Arc<TypeState>,
}

/// One timeline as `/debug/history` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineView {
    pub cluster: String,
    /// The first 12 hex digits of the SHA-256 of the session's identity
    /// (node id, cluster, metadata, locality): tells apart identities with
    /// the same node id and cluster.
    pub identity: String,
    /// Oldest first.
    pub events: Vec<EventView>,
}

/// What an event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A version served from then on.
    Version,
    /// A NACK the gateway sent upstream.
    Nack,
}

/// One event of a timeline.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// Rises with every event of the store (gaps: other timelines, or evicted).
    pub seq: u64,
    /// When (RFC 3339, milliseconds).
    pub at: String,
    pub event: EventKind,
    /// A version: what a client asking the subscription's names is served
    /// (`<upstream version>~<digest>`). Absent for a NACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The upstream's `version_info`: of the version, or of the response
    /// NACKed.
    pub upstream_version: String,
    /// The upstream's nonce: of the version, or of the response NACKed.
    pub nonce: String,
    /// A version: the gateway version its changes are counted from, while
    /// that one is held (absent for the first version a timeline held,
    /// whose resources are all listed as added, and once that one is
    /// evicted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// A version: how many resources it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    /// A NACK: the `error_detail` message sent upstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
}

/// `event` of `timeline` as the views show it.
fn event_view(timeline: &Timeline, event: &Event) -> EventView {
    let at = humantime::format_rfc3339_millis(event.at).to_string();
    let version = event.gateway_version().map(str::to_owned);
    match &event.happened {
        Happened::Version {
            state,
            since,
            changes,
            ..
        } => EventView {
            seq: event.seq,
            at,
            event: EventKind::Version,
            version,
            upstream_version: state.version.clone(),
            nonce: state.nonce.clone(),
            since: since
                .and_then(|seq| timeline.version_of(seq))
                .map(str::to_owned),
            resources: Some(state.resources.len()),
            added: Some(changes.added.clone()),
            modified: Some(changes.modified.clone()),
            removed: Some(changes.removed.clone()),
            error_detail: None,
        },
        Happened::Nack {
            upstream_version,
            nonce,
            error_detail,
        } => EventView {
            seq: event.seq,
            at,
            event: EventKind::Nack,
            version: None,
            upstream_version: upstream_version.clone(),
            nonce: nonce.clone(),
            since: None,
            resources: None,
            added: None,
            modified: None,
            removed: None,
            error_detail: Some(error_detail.clone()),
        },
    }
}

#[cfg(test)]
mod tests;
