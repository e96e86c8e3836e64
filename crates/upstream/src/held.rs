//! What a delta session holds of one type, shared by every session holding
//! the same ([`HeldSet`]): the resources with their per-resource versions
//! ([`HeldResource`]) and the version published for them ([`digest`]); and
//! the memo of one upstream that finds those sets ([`HeldSets`], which the
//! upstream's context carries). Delta mode (`upstream/delta`) edits them;
//! this module names nothing else of `upstream`.
//!
//! 1,000 node identities of one upstream receive the same change at the same
//! moment. The first session to apply it builds the set it leads to; every
//! other finds that set by (the set it held, a hash of the edit) and confirms
//! the edit is its own, in work proportional to what changed. So a push costs
//! each session O(changed), and the map of names, per-resource versions and
//! resources exists once per distinct content, not once per session.
//!
//! A set built some other way (a session's first answer, a narrowed
//! subscription after a reconnect) is found by its content instead: by its
//! version digest, confirmed name by name, version by version and resource
//! by resource (pointer equality: the intake's memo gives every session
//! the same `Arc` for the same bytes).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::Duration;

use moka::sync::Cache;
use sha2::{Digest as _, Sha256};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::cache::{idle_memo, IntoResourceSet, Resource, ResourceMap, ResourceSet};
use crate::metrics::Metrics;
use crate::xds::ResourceType;

/// Hex digits of SHA-256 in a published version.
pub(super) const VERSION_HEX_DIGITS: usize = 16;

/// One resource held: the upstream's per-resource version and the resource.
#[derive(Debug, Clone)]
pub(super) struct HeldResource {
    pub(super) version: String,
    pub(super) resource: Arc<Resource>,
}

/// The published version of `held`: SHA-256 over the sorted (name,
/// version) pairs, first [`VERSION_HEX_DIGITS`] hex digits. A resource with
/// an empty upstream version is digested by its content instead.
pub(super) fn digest<'a>(held: impl IntoIterator<Item = (&'a String, &'a HeldResource)>) -> String {
    let mut pairs: Vec<(&str, &HeldResource)> = held
        .into_iter()
        .map(|(name, h)| (name.as_str(), h))
        .collect();
    // The names of held resources are unique: their order is the pairs'.
    if !pairs.is_sorted_by(|a, b| a.0 <= b.0) {
        pairs.sort_by(|a, b| a.0.cmp(b.0));
    }
    let mut hasher = Sha256::new();
    let mut content = [0u8; 64];
    for (name, h) in &pairs {
        // Length-prefixed, so no (name, version) split is ambiguous; the
        // version is `v:<upstream version>`, or `sha256:<content digest>`.
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
        if h.version.is_empty() {
            // 32 bytes always fit in 64 hex digits.
            let _ = hex::encode_to_slice(h.resource.digest, &mut content);
            hasher.update(((7 + content.len()) as u64).to_be_bytes());
            hasher.update(b"sha256:");
            hasher.update(content);
        } else {
            hasher.update(((2 + h.version.len()) as u64).to_be_bytes());
            hasher.update(b"v:");
            hasher.update(h.version.as_bytes());
        }
    }
    let mut hex = hex::encode(hasher.finalize());
    hex.truncate(VERSION_HEX_DIGITS);
    hex
}

/// Entries each memo of [`HeldSets`] keeps. Each is a few words and weak
/// references: the sets live as long as a session holds them.
const KEPT: u64 = 16 * 1024;

/// How long an unused entry is kept.
const IDLE: Duration = Duration::from_secs(600);

/// The resources a delta session holds of one type, with their published
/// version and set. Immutable: an edit makes another.
#[derive(Debug)]
pub(super) struct HeldSet {
    map: BTreeMap<String, HeldResource>,
    /// The published version: [`digest`] of `map`.
    pub(super) version: String,
    /// The resources as published (one set for every state holding them).
    pub(super) resources: Arc<ResourceSet>,
}

impl Deref for HeldSet {
    type Target = BTreeMap<String, HeldResource>;

    fn deref(&self) -> &BTreeMap<String, HeldResource> {
        &self.map
    }
}

impl Default for HeldSet {
    fn default() -> HeldSet {
        HeldSet::new(BTreeMap::new(), digest([]))
    }
}

impl HeldSet {
    /// The set of `map`, whose [`digest`] is `version`.
    fn new(map: BTreeMap<String, HeldResource>, version: String) -> HeldSet {
        let resources: ResourceMap = map
            .iter()
            .map(|(name, h)| (name.clone(), h.resource.clone()))
            .collect();
        HeldSet {
            map,
            version,
            resources: resources.into_set(),
        }
    }

    /// Whether `self` holds exactly `map` (the same resources, not only
    /// equal ones).
    fn holds(&self, map: &BTreeMap<String, HeldResource>) -> bool {
        self.map.len() == map.len()
            && self
                .map
                .iter()
                .zip(map)
                .all(|((n1, h1), (n2, h2))| n1 == n2 && same(h1, h2))
    }
}

/// The same version of the same resource.
fn same(a: &HeldResource, b: &HeldResource) -> bool {
    a.version == b.version && Arc::ptr_eq(&a.resource, &b.resource)
}

/// A change to what is held, made only of real changes: per name, the
/// resource now held (new, or another version) or `None` (held, now gone).
#[derive(Debug, Default)]
pub(super) struct Edit {
    changes: BTreeMap<String, Option<HeldResource>>,
}

impl Edit {
    /// An edit of `from` that holds `held` under `name`, unless it already does.
    pub(super) fn put(&mut self, from: &HeldSet, name: String, held: HeldResource) {
        if !from.get(&name).is_some_and(|h| same(h, &held)) {
            self.changes.insert(name, Some(held));
        }
    }

    /// An edit of `from` that forgets `name`, if it is held.
    pub(super) fn forget(&mut self, from: &HeldSet, name: &str) {
        if from.contains_key(name) {
            self.changes.insert(name.to_owned(), None);
        }
    }

    /// A hash of the names, versions and resources (by address) changed.
    fn hash(&self) -> u64 {
        let mut hasher = Xxh3::new();
        for (name, held) in &self.changes {
            hasher.update(&(name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
            match held {
                Some(h) => {
                    hasher.update(&(h.version.len() as u64).to_le_bytes());
                    hasher.update(h.version.as_bytes());
                    hasher.update(&(Arc::as_ptr(&h.resource) as usize).to_le_bytes());
                }
                None => hasher.update(&u64::MAX.to_le_bytes()),
            }
        }
        hasher.digest()
    }

    /// Whether `to` is what this edit makes of the set a step started from,
    /// given that `to` was made from it by an edit of `changed` real
    /// changes. Every name here changes that set, so if `to` shows each of
    /// them changed as here, and the edits are the same size, they are the
    /// same edit.
    fn made(&self, changed: usize, to: &HeldSet) -> bool {
        changed == self.changes.len()
            && self
                .changes
                .iter()
                .all(|(name, held)| match (held, to.get(name)) {
                    (Some(h), Some(now)) => same(h, now),
                    (None, None) => true,
                    _ => false,
                })
    }
}

/// An edit applied once: which set it started from, how many changes it
/// made, and the set it led to.
#[derive(Debug)]
struct Step {
    /// Weak, so the memo keeps no set alive; it also keeps the address in
    /// the key from being reused while the entry exists.
    from: Weak<HeldSet>,
    changed: usize,
    to: Weak<HeldSet>,
}

impl Step {
    /// `edit` of `from` led to `to`.
    fn new(from: &Arc<HeldSet>, edit: &Edit, to: &Arc<HeldSet>) -> Arc<Step> {
        Arc::new(Step {
            from: Arc::downgrade(from),
            changed: edit.changes.len(),
            to: Arc::downgrade(to),
        })
    }
}

/// What a step is found by: the type, the set it started from (its
/// address; 0 for any empty set) and [`Edit::hash`]; and what a set is
/// found by from its content: the type, how many resources, a hash of the
/// version digest.
type Key = (ResourceType, usize, u64);

/// The held sets of one upstream's sessions (see the module docs).
pub(crate) struct HeldSets {
    steps: Cache<Key, Arc<Step>>,
    contents: Cache<Key, Weak<HeldSet>>,
    /// Counts sets built and found (`upstream_delta_sets_{built,shared}`).
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for HeldSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldSets")
            .field("steps", &self.steps.entry_count())
            .field("contents", &self.contents.entry_count())
            .finish()
    }
}

/// The key part of a step's starting set.
fn address(set: &Arc<HeldSet>) -> usize {
    if set.is_empty() {
        0
    } else {
        Arc::as_ptr(set) as usize
    }
}

impl HeldSets {
    pub(crate) fn new(metrics: Arc<Metrics>) -> HeldSets {
        HeldSets {
            steps: idle_memo(KEPT, IDLE),
            contents: idle_memo(KEPT, IDLE),
            metrics,
        }
    }

    /// The set `edit` makes of `from` (an edit of `from`: see [`Edit`]):
    /// `from` itself if nothing changes, else the set another session made
    /// by the same edit of the same set, else built now. Sessions applying
    /// the same edit at the same time wait for the first one's build.
    pub(super) fn after(
        &self,
        kind: ResourceType,
        from: &Arc<HeldSet>,
        edit: Edit,
    ) -> Arc<HeldSet> {
        if edit.changes.is_empty() {
            return from.clone();
        }
        let key = (kind, address(from), edit.hash());
        let mut built = None;
        let step = self.steps.get_with(key, || {
            let to = self.build(kind, from, &edit);
            let step = Step::new(from, &edit, &to);
            built = Some(to);
            step
        });
        if let Some(to) = built {
            return to;
        }
        let from_same = key.1 == 0 || step.from.as_ptr() == Arc::as_ptr(from);
        if let Some(to) = step.to.upgrade() {
            if from_same && edit.made(step.changed, &to) {
                self.metrics.delta_set(kind, false);
                return to;
            }
        }
        // The set it led to is gone (or a hash collided): build it again.
        let to = self.build(kind, from, &edit);
        self.steps.insert(key, Step::new(from, &edit, &to));
        to
    }

    /// `from` with `edit` applied: the set of that content some session
    /// holds, or a new one.
    fn build(&self, kind: ResourceType, from: &HeldSet, edit: &Edit) -> Arc<HeldSet> {
        self.metrics.delta_set(kind, true);
        let mut map = from.map.clone();
        for (name, held) in &edit.changes {
            match held {
                Some(h) => map.insert(name.clone(), h.clone()),
                None => map.remove(name),
            };
        }
        self.interned(kind, map)
    }

    /// The set holding exactly `map`: one a session holds, or a new one.
    fn interned(&self, kind: ResourceType, map: BTreeMap<String, HeldResource>) -> Arc<HeldSet> {
        let version = digest(&map);
        let key = (kind, map.len(), xxh3_64(version.as_bytes()));
        let found = self.contents.get(&key).and_then(|w| w.upgrade());
        if let Some(set) = found.filter(|set| set.holds(&map)) {
            return set;
        }
        let set = Arc::new(HeldSet::new(map, version));
        self.contents.insert(key, Arc::downgrade(&set));
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::test_states::cluster_payload;
    use crate::cache::Intake;

    const CDS: ResourceType = ResourceType::Clusters;

    fn resource(r: &Intake, name: &str, timeout: u32) -> Arc<Resource> {
        let payload = cluster_payload(r.codec(), name, &format!("{timeout}s"));
        r.resource(CDS, payload).unwrap()
    }

    fn held(r: &Intake, name: &str, version: &str) -> HeldResource {
        let timeout = version.len() as u32;
        HeldResource {
            version: version.to_owned(),
            resource: resource(r, name, timeout),
        }
    }

    /// `from` with `puts` held and `forgets` gone, through `sets`.
    fn edited(
        sets: &HeldSets,
        from: &Arc<HeldSet>,
        puts: &[(&str, HeldResource)],
        forgets: &[&str],
    ) -> Arc<HeldSet> {
        let mut edit = Edit::default();
        for (name, h) in puts {
            edit.put(from, (*name).to_owned(), h.clone());
        }
        for name in forgets {
            edit.forget(from, name);
        }
        sets.after(CDS, from, edit)
    }

    fn names(set: &HeldSet) -> Vec<&str> {
        set.keys().map(String::as_str).collect()
    }

    #[test]
    fn sessions_making_the_same_edit_of_the_same_set_share_the_result() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let puts = [("a", held(&r, "a", "1")), ("b", held(&r, "b", "1"))];
        // Two sessions, each starting from an empty set of its own.
        let one = edited(&sets, &Arc::default(), &puts, &[]);
        let two = edited(&sets, &Arc::default(), &puts, &[]);
        assert!(Arc::ptr_eq(&one, &two));
        assert_eq!(names(&one), ["a", "b"]);
        assert_eq!(one.version, digest(&one.map));
        assert_eq!(one.resources.len(), 2);

        let change = [("a", held(&r, "a", "22"))];
        let one_next = edited(&sets, &one, &change, &[]);
        let two_next = edited(&sets, &two, &change, &[]);
        assert!(Arc::ptr_eq(&one_next, &two_next));
        assert_ne!(one_next.version, one.version);
        assert_eq!(one_next["a"].version, "22");
        assert!(Arc::ptr_eq(&one_next["b"].resource, &one["b"].resource));
    }

    #[test]
    fn an_edit_changing_nothing_keeps_the_set() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let a = held(&r, "a", "1");
        let set = edited(&sets, &Arc::default(), &[("a", a.clone())], &[]);
        let again = edited(&sets, &set, &[("a", a)], &["not-held"]);
        assert!(Arc::ptr_eq(&set, &again));
        // Another version of the same resource is a change.
        let other = HeldResource {
            version: "2".into(),
            resource: set["a"].resource.clone(),
        };
        let changed = edited(&sets, &set, &[("a", other)], &[]);
        assert!(!Arc::ptr_eq(&set, &changed));
        assert_ne!(changed.version, set.version);
    }

    #[test]
    fn a_different_edit_or_start_is_not_shared() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let a = held(&r, "a", "1");
        let b = held(&r, "b", "1");
        let start = edited(&sets, &Arc::default(), &[("a", a), ("b", b)], &[]);
        let dropped_a = edited(&sets, &start, &[], &["a"]);
        let dropped_b = edited(&sets, &start, &[], &["b"]);
        assert_eq!(names(&dropped_a), ["b"]);
        assert_eq!(names(&dropped_b), ["a"]);
        // The same edit of another set leads elsewhere.
        let c = held(&r, "c", "1");
        let from_a = edited(&sets, &dropped_b, &[("c", c.clone())], &[]);
        let from_b = edited(&sets, &dropped_a, &[("c", c)], &[]);
        assert_eq!(names(&from_a), ["a", "c"]);
        assert_eq!(names(&from_b), ["b", "c"]);
    }

    #[test]
    fn a_step_colliding_with_another_edit_is_confirmed_away() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let start = edited(&sets, &Arc::default(), &[("a", held(&r, "a", "1"))], &[]);
        let b = held(&r, "b", "1");
        let with_b = edited(&sets, &start, &[("b", b.clone())], &[]);
        // Forge a collision: the step of another edit under this one's key.
        let mut edit = Edit::default();
        edit.put(&start, "c".into(), held(&r, "c", "1"));
        let key = (CDS, address(&start), edit.hash());
        sets.steps.insert(key, Step::new(&start, &edit, &with_b));
        let with_c = sets.after(CDS, &start, edit);
        assert_eq!(names(&with_c), ["a", "c"]);
    }

    #[test]
    fn a_set_nobody_holds_is_built_again() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let puts = [("a", held(&r, "a", "1"))];
        let first = edited(&sets, &Arc::default(), &puts, &[]);
        let version = first.version.to_owned();
        drop(first);
        let again = edited(&sets, &Arc::default(), &puts, &[]);
        assert_eq!(again.version, version);
        assert_eq!(names(&again), ["a"]);
    }

    #[test]
    fn sets_of_the_same_content_built_apart_are_one() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let a = held(&r, "a", "1");
        let b = held(&r, "b", "1");
        // One session got a then b, another both at once.
        let one = edited(&sets, &Arc::default(), &[("a", a.clone())], &[]);
        let one = edited(&sets, &one, &[("b", b.clone())], &[]);
        let two = edited(&sets, &Arc::default(), &[("a", a), ("b", b)], &[]);
        assert!(Arc::ptr_eq(&one, &two));
        // The same names and versions over other resources are not the same.
        let other = HeldResource {
            version: "1".into(),
            resource: resource(&r, "b", 9),
        };
        let three = edited(&sets, &one, &[("b", other)], &[]);
        assert_eq!(three.version, one.version);
        assert!(!Arc::ptr_eq(&one, &three));
    }

    #[test]
    fn sessions_editing_at_once_build_once() {
        let r = Intake::new(crate::xds::Codec::embedded());
        let sets = HeldSets::new(Arc::default());
        let start = edited(&sets, &Arc::default(), &[("a", held(&r, "a", "1"))], &[]);
        let change = held(&r, "a", "22");
        let barrier = std::sync::Barrier::new(8);
        let made: Vec<Arc<HeldSet>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        edited(&sets, &start, &[("a", change.clone())], &[])
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(made.iter().all(|m| Arc::ptr_eq(m, &made[0])));
    }
}
