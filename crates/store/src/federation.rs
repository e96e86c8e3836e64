//! Several control planes behind one [`Source`]: indirect federation for
//! REST clients, which are simple clients in the xDS transport design's
//! sense (one server at a time).
//!
//! Each upstream that serves names of its own (the default one, and every
//! one claiming xdstp authorities) is a slot with a source of its own, built
//! as a single-upstream gateway's would be (its sessions, streams and
//! failover). A poll is routed by its names ([`Namespace`]):
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
//! A poll across owners gets a [`Merged`] feed: its state is the union of
//! the parts' states (names never overlap: each has one owner), and a long
//! poll ends when any part changes. Rejections of a merged answer are
//! tracked (in the client book, as every answer's) and reported, but never
//! NACKed upstream: which part a client rejected cannot be known.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

use super::namespace::Namespace;
use super::polled::{PollChannel, Polled};
use super::view::SessionView;
use super::{
    Feed, Inspect, PassThrough, PassedThrough, Source, SourceError, Status, SESSION_ERRORS_SHOWN,
};
use crate::cache::{Coverage, Names, ParsedRequest, ResourceErrors, TypeState};
use crate::shares::Tenant;
use crate::xds::ResourceType;

/// Merged states kept, so that polls of an unchanged merge share one state
/// (and its memoised bodies).
const MERGES_KEPT: u64 = 4096;

/// One upstream that owns names, and the source serving them.
#[derive(Debug)]
pub struct UpstreamSlot {
    pub name: String,
    pub source: Arc<dyn Feed>,
}

/// Sources of several upstreams as one.
pub struct Federation {
    /// The default slot first.
    slots: Vec<UpstreamSlot>,
    namespace: Namespace,
    merges: moka::sync::Cache<(ResourceType, Vec<u64>), Arc<TypeState>>,
}

impl std::fmt::Debug for Federation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Federation")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Federation {
    /// `slots` (the default first) routed by `namespace`.
    pub fn new(slots: Vec<UpstreamSlot>, namespace: Namespace) -> Federation {
        Federation {
            slots,
            namespace,
            merges: moka::sync::Cache::new(MERGES_KEPT),
        }
    }

    fn slot_of(&self, name: &str) -> usize {
        let owner = self.namespace.owner_of(name);
        self.slots.iter().position(|s| s.name == owner).unwrap_or(0)
    }

    /// The request's names grouped by the slot owning them (wildcard: the
    /// default's).
    fn route(&self, names: &Names) -> BTreeMap<usize, BTreeSet<String>> {
        let mut groups: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        match names {
            Names::Wildcard => {
                groups.insert(0, BTreeSet::new());
            }
            Names::Named(set) => {
                for name in set {
                    groups
                        .entry(self.slot_of(name))
                        .or_default()
                        .insert(name.clone());
                }
            }
        }
        groups
    }

    async fn poll_federated(
        &self,
        kind: ResourceType,
        request: &ParsedRequest,
        tenant: Option<&Tenant>,
    ) -> Result<Polled, SourceError> {
        let groups = self.route(request.names());
        if groups.len() <= 1 {
            let slot = groups.keys().next().copied().unwrap_or(0);
            return self.slots[slot].source.poll(kind, request, tenant).await;
        }
        let parts: Vec<(usize, ParsedRequest)> = groups
            .into_iter()
            .map(|(slot, names)| (slot, request.narrowed(Names::Named(names))))
            .collect();
        let polled = join_all(
            parts
                .iter()
                .map(|(slot, part)| self.slots[*slot].source.poll(kind, part, tenant)),
        )
        .await;
        let parts = polled.into_iter().collect::<Result<Vec<Polled>, _>>()?;
        let merged = Merged {
            kind,
            parts,
            merges: self.merges.clone(),
        };
        let state = merged.state();
        Ok(Polled::new(state, Box::new(merged)))
    }
}

impl Source for Federation {
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>> {
        self.poll_federated(kind, request, tenant).boxed()
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.slots[0].source.pass_through(call)
    }
}

impl Inspect for Federation {
    fn status(&self) -> Status {
        let mut status = Status {
            ready: true,
            ..Status::default()
        };
        let mut descriptions = Vec::new();
        for slot in &self.slots {
            let part = slot.source.status();
            status.ready &= part.ready;
            descriptions.push(format!("{}: {}", slot.name, part.description));
            status.problems.extend(
                part.problems
                    .into_iter()
                    .map(|p| format!("{}: {p}", slot.name)),
            );
            status.sessions += part.sessions;
            status.stale_sessions += part.stale_sessions;
            status.waiting_sessions += part.waiting_sessions;
            status.failed_over_sessions += part.failed_over_sessions;
            status.refusing_sessions += part.refusing_sessions;
            for failover in part.failovers {
                if status.failovers.len() < SESSION_ERRORS_SHOWN {
                    status.failovers.push(format!("{}: {failover}", slot.name));
                }
            }
            for error in part.session_errors {
                if status.session_errors.len() < SESSION_ERRORS_SHOWN {
                    status
                        .session_errors
                        .push(format!("{}: {error}", slot.name));
                }
            }
        }
        status.description = descriptions.join("; ");
        status
    }

    fn states_of(&self, node_id: &str) -> Vec<Arc<TypeState>> {
        let mut by_kind: BTreeMap<ResourceType, Vec<Arc<TypeState>>> = BTreeMap::new();
        for slot in &self.slots {
            for state in slot.source.states_of(node_id) {
                by_kind.entry(state.kind).or_default().push(state);
            }
        }
        by_kind
            .into_iter()
            .map(|(kind, states)| match states.as_slice() {
                [one] => one.clone(),
                _ => Arc::new(merge(kind, &states)),
            })
            .collect()
    }

    fn placements_of(&self, node_id: &str) -> Vec<super::StreamPlacement> {
        self.slots
            .iter()
            .flat_map(|slot| slot.source.placements_of(node_id))
            .collect()
    }

    fn sessions(&self) -> Vec<SessionView> {
        self.slots
            .iter()
            .flat_map(|slot| {
                slot.source.sessions().into_iter().map(|mut view| {
                    view.serves = Some(slot.name.clone());
                    view
                })
            })
            .collect()
    }
}

impl Feed for Federation {
    fn close(&self) {
        for slot in &self.slots {
            slot.source.close();
        }
    }
}

/// The parts' states as one: every resource of each (their names are
/// disjoint: each has one owner), one version naming each part's.
fn merge(kind: ResourceType, states: &[Arc<TypeState>]) -> TypeState {
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
            let changed = {
                let waits = self
                    .parts
                    .iter_mut()
                    .map(|part| part.next_change(wait).boxed());
                let (changed, _, _) = futures::future::select_all(waits).await;
                changed
            };
            changed.then(|| self.state())
        }
        .boxed()
    }

    fn stale_since(&self) -> Option<SystemTime> {
        self.parts.iter().filter_map(Polled::stale_since).min()
    }
}
