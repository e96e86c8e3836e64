//! Several control planes behind one store: indirect federation for REST
//! clients, which are simple clients in the xDS transport design's sense
//! (one server at a time).
//!
//! Each upstream that serves names of its own (the default one, and every
//! one claiming xdstp authorities) is an [`UpstreamSlot`]: a feeder of its
//! own, built as a single-upstream gateway's would be (its streams and
//! failover), whose sessions the store keeps apart from the others'. A
//! poll is routed by its names ([`Namespace`]):
//!
//! ```text
//!   poll(CDS, [xdstp://edge.example/…/a, plain-b])
//!        │ names grouped by owner
//!        ├── "edge" slot ── poll([xdstp://edge.example/…/a]) ─┐
//!        └── "mesh" slot ── poll([plain-b])  ────────────────┤
//!                                                             ▼
//!                              one state: both parts' resources, one
//!                              version (304 while neither part changes)
//! ```
//!
//! A poll whose names all have one owner (and every wildcard poll, which
//! the default upstream answers alone) is that slot's poll, untouched.
//! A poll across owners gets a merged channel: its state is the union of
//! the parts' states (names never overlap: each has one owner), and a long
//! poll ends when any part changes. Rejections of a merged answer are
//! tracked (in the client book, as every answer's) and reported, but never
//! NACKed upstream: which part a client rejected cannot be known.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::feeder::Feeder;
use super::namespace::Namespace;
use super::polled::{PollChannel, Polled};
use crate::cache::{Coverage, Names, ResourceErrors, TypeState};
use crate::xds::ResourceType;

/// Merged states kept, so that polls of an unchanged merge share one state
/// (and its memoised bodies).
const MERGES_KEPT: u64 = 4096;

/// One upstream that owns names, and what feeds the sessions serving them.
#[derive(Debug)]
pub struct UpstreamSlot {
    pub name: String,
    pub feeder: Arc<dyn Feeder>,
}

/// How polls are routed to the slots that own their names, and the merges
/// of answers across slots.
pub(super) struct Routes {
    namespace: Namespace,
    /// The slots' names, the default first.
    owners: Vec<String>,
    pub(super) merges: moka::sync::Cache<(ResourceType, Vec<u64>), Arc<TypeState>>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("owners", &self.owners)
            .finish_non_exhaustive()
    }
}

impl Routes {
    /// Routes to the slots named `owners` (the default first) by `namespace`.
    pub(super) fn new(namespace: Namespace, owners: Vec<String>) -> Routes {
        Routes {
            namespace,
            owners,
            merges: moka::sync::Cache::new(MERGES_KEPT),
        }
    }

    /// The names asked grouped by the slot owning them (wildcard: the
    /// default's).
    pub(super) fn route(&self, names: &Names) -> BTreeMap<usize, BTreeSet<String>> {
        let set = match names {
            Names::Wildcard => return BTreeMap::from([(0, BTreeSet::new())]),
            Names::Named(set) => set,
        };
        let mut groups: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for name in set {
            let owner = self.namespace.owner_of(name);
            let slot = self.owners.iter().position(|s| s == owner).unwrap_or(0);
            groups.entry(slot).or_default().insert(name.clone());
        }
        groups
    }

    /// One poll answered from the `parts` of several slots.
    pub(super) fn merged(&self, kind: ResourceType, parts: Vec<Polled>) -> Polled {
        let merged = Merged {
            kind,
            parts,
            merges: self.merges.clone(),
        };
        Polled::new(merged.state(), Box::new(merged))
    }
}

/// The parts' states as one: every resource of each (their names are
/// disjoint: each has one owner), one version naming each part's.
pub(super) fn merge(kind: ResourceType, states: &[Arc<TypeState>]) -> TypeState {
    let mut resources = BTreeMap::new();
    let mut coverage = Coverage::default();
    let mut versions = Vec::new();
    for state in states {
        resources.extend(state.resources.iter().map(|(n, r)| (n.clone(), r.clone())));
        coverage.wildcard |= state.coverage.wildcard;
        coverage.names.extend(state.coverage.names.iter().cloned());
        versions.push(state.version.as_str());
    }
    let state = TypeState::new(kind, versions.join(","), String::new(), resources, coverage);
    if states.iter().all(|s| s.errors.is_empty()) {
        return state;
    }
    let errors = ResourceErrors::union(states.iter().map(|s| &*s.errors));
    state.with_errors(Arc::new(errors))
}

/// A poll answered from several slots' parts.
struct Merged {
    kind: ResourceType,
    parts: Vec<Polled>,
    merges: moka::sync::Cache<(ResourceType, Vec<u64>), Arc<TypeState>>,
}

impl Merged {
    /// The merge of the parts' current states (the same state for the same
    /// parts' states).
    fn state(&self) -> Arc<TypeState> {
        let states: Vec<Arc<TypeState>> = self.parts.iter().map(|p| p.state().clone()).collect();
        let key = (self.kind, states.iter().map(|s| s.id()).collect());
        self.merges
            .get_with(key, || Arc::new(merge(self.kind, &states)))
    }
}

impl PollChannel for Merged {
    fn next_change<'a>(
        &'a mut self,
        _seen: &'a Arc<TypeState>,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Arc<TypeState>>> {
        async move {
            let waits = self.parts.iter_mut().map(|p| p.next_change(wait).boxed());
            let (changed, _, _) = futures::future::select_all(waits).await;
            changed.then(|| self.state())
        }
        .boxed()
    }

    fn stale_since(&self) -> Option<SystemTime> {
        self.parts.iter().filter_map(Polled::stale_since).min()
    }
}
