//! The resources one state holds, as a set shared by every state holding
//! the same ones, and the memo that finds the set an upstream answer was
//! decoded to before.
//!
//! A SotW push repeats the same answer to every session subscribed alike
//! (1,000 node identities under one snapshot get 1,000 copies of the same
//! bytes). The first session to take it decodes it into a [`ResourceSet`];
//! every other finds that set in [`SharedAnswers`] (by a hash of the bytes,
//! confirmed byte for byte, in any order: go-control-plane sends a snapshot
//! in Go's map order, [`PayloadIndex`]) and holds a reference to it.
//!
//! A set is immutable and has an id, which keys what is worked out from it
//! once for every state holding it ([`ResourceSet::selection`], the config
//! history's accounting).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use moka::sync::Cache;

use xxhash_rust::xxh3::xxh3_64;

use super::payload_index::{Hashed, PayloadIndex};
use super::resource::{name_of, Resource};
use crate::xds::rewrite::RestTarget;
use crate::xds::ResourceType;

pub type ResourceMap = BTreeMap<String, Arc<Resource>>;

/// Unique per set: what memos keyed by a set use.
static NEXT_SET_ID: AtomicU64 = AtomicU64::new(1);

/// Selection digests kept per set: the (names, target) pairs its states
/// are asked for (one for the wildcard CDS of every identity).
const SELECTIONS_KEPT: usize = 8;

/// A selection walking fewer resources than this is not remembered (an EDS
/// poll for one name costs less to hash again than to look up).
const SELECTION_MEMO_MIN: usize = 32;

/// How many answers [`SharedAnswers`] remembers (each entry is a hash and a
/// weak reference: the sets are held by the states, not by the memo).
const SHARED_ANSWERS: u64 = 16 * 1024;

/// What a request's selection digest is remembered under.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SelectionKey {
    kind: ResourceType,
    names: [u8; 32],
    target: Option<RestTarget>,
}

/// The resources of a state, shared by every state holding the same ones.
#[derive(Debug)]
pub struct ResourceSet {
    id: u64,
    map: ResourceMap,
    selections: Mutex<Vec<(SelectionKey, [u8; 32])>>,
    /// The payloads sorted by hash, made when an answer is first compared.
    payloads: OnceLock<PayloadIndex>,
    /// Whether any resource holds an `Any` served opaque (`xds::opaque`).
    opaque: bool,
    /// Whether any resource holds key material as sent (`xds::keys`).
    keys: bool,
}

impl Deref for ResourceSet {
    type Target = ResourceMap;

    fn deref(&self) -> &ResourceMap {
        &self.map
    }
}

impl ResourceSet {
    pub fn new(map: ResourceMap) -> ResourceSet {
        ResourceSet {
            id: NEXT_SET_ID.fetch_add(1, Ordering::Relaxed),
            opaque: map.values().any(|r| !r.opaque.is_empty()),
            keys: map.values().any(|r| r.holds_keys),
            map,
            selections: Mutex::new(Vec::new()),
            payloads: OnceLock::new(),
        }
    }

    /// Whether any resource holds an `Any` served opaque.
    pub fn has_opaque(&self) -> bool {
        self.opaque
    }

    /// Whether any resource holds key material as sent (`--allow-secrets`).
    pub fn holds_keys(&self) -> bool {
        self.keys
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn map(&self) -> &ResourceMap {
        &self.map
    }

    /// The resource held under the name `payload` carries, if its bytes are
    /// `payload`: what an answer repeating it takes with no digest, lookup or
    /// render. A variant (which came with its constraints) is never it.
    pub fn holding(&self, kind: ResourceType, payload: &[u8]) -> Option<&Arc<Resource>> {
        let held = self.map.get(name_of(kind, payload)?.as_ref())?;
        (held.variant.is_none() && held.payload.as_ref() == payload).then_some(held)
    }

    /// Whether `answer` (payloads with their hashes, in any order) is
    /// exactly the payloads of this set's resources, byte for byte.
    fn repeats(&self, answer: &mut [Hashed<'_>]) -> bool {
        let index = self.payloads.get_or_init(|| {
            let payloads = self
                .map
                .values()
                .map(|r| (xxh3_64(&r.payload), r.payload.clone()));
            PayloadIndex::new(payloads.collect())
        });
        index.repeats(answer)
    }

    /// The selection digest of (`kind`, `names`, `target`) on this set:
    /// remembered, or `compute`d and remembered when it walked many.
    pub fn selection(
        &self,
        kind: ResourceType,
        names: &[u8; 32],
        target: Option<&RestTarget>,
        compute: impl FnOnce() -> ([u8; 32], usize),
    ) -> [u8; 32] {
        let is_key =
            |k: &SelectionKey| k.kind == kind && k.names == *names && k.target.as_ref() == target;
        if let Some((_, digest)) = crate::sync::lock(&self.selections)
            .iter()
            .find(|(k, _)| is_key(k))
        {
            return *digest;
        }
        let (digest, walked) = compute();
        if walked >= SELECTION_MEMO_MIN {
            let mut kept = crate::sync::lock(&self.selections);
            if kept.len() >= SELECTIONS_KEPT {
                kept.remove(0);
            }
            let target = target.cloned();
            kept.push((
                SelectionKey {
                    kind,
                    names: *names,
                    target,
                },
                digest,
            ));
        }
        digest
    }
}

/// What a state can be made of: a map of its own, or a shared set.
pub trait IntoResourceSet {
    fn into_set(self) -> Arc<ResourceSet>;
}

impl IntoResourceSet for ResourceMap {
    fn into_set(self) -> Arc<ResourceSet> {
        Arc::new(ResourceSet::new(self))
    }
}

impl IntoResourceSet for Arc<ResourceSet> {
    fn into_set(self) -> Arc<ResourceSet> {
        self
    }
}

/// How a session got the set of an answer.
#[derive(Debug)]
pub enum Taken {
    /// It decoded the answer (it was the first to take these bytes).
    Decoded(Arc<ResourceSet>),
    /// Another session had: the set is shared.
    Shared(Arc<ResourceSet>),
}

/// The sets that upstream answers were decoded to, by the answers' bytes.
/// Entries are weak: a set lives as long as a state holds it.
#[derive(Clone)]
pub struct SharedAnswers {
    sets: Cache<SetKey, Weak<ResourceSet>>,
}

/// What a SotW answer's set is found again by: the type, how many
/// resources, and [`answer_hash`].
type SetKey = (ResourceType, usize, u64);

impl std::fmt::Debug for SharedAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAnswers")
            .field("entries", &self.sets.entry_count())
            .finish()
    }
}

impl Default for SharedAnswers {
    fn default() -> SharedAnswers {
        SharedAnswers {
            sets: super::idle_memo(SHARED_ANSWERS, std::time::Duration::from_secs(600)),
        }
    }
}

/// Each payload with its hash, and a hash of them all whatever their
/// order: the sum of each one's, and how many there are.
fn answer_hash<'a>(payloads: &[&'a [u8]]) -> (Vec<Hashed<'a>>, (usize, u64)) {
    let hashed: Vec<Hashed<'a>> = payloads.iter().map(|p| (xxh3_64(p), *p)).collect();
    let sum = hashed.iter().fold(0u64, |sum, (h, _)| sum.wrapping_add(*h));
    (hashed, (payloads.len(), sum))
}

/// The set `found` points to, if it is still held and holds exactly the
/// payloads of `hashed`.
fn confirmed(found: &Weak<ResourceSet>, hashed: &mut [Hashed<'_>]) -> Option<Arc<ResourceSet>> {
    let set = found.upgrade()?;
    set.repeats(hashed).then_some(set)
}

impl SharedAnswers {
    /// The set another session took the answer of `kind` with `payloads`
    /// to, if one is held, as [`take`](Self::take) finds it but never
    /// decoding or waiting: what a stream task tries before handing a decode
    /// to a blocking thread.
    pub fn find(&self, kind: ResourceType, payloads: &[&[u8]]) -> Option<Arc<ResourceSet>> {
        let (mut hashed, (count, sum)) = answer_hash(payloads);
        confirmed(&self.sets.get(&(kind, count, sum))?, &mut hashed)
    }

    /// The set of the answer of `kind` with `payloads` (plain resources of
    /// `kind`): the one decoded before from the same bytes, or `decode`'s.
    /// Sessions taking the same bytes at once wait for the first one's
    /// decode; its error is theirs too (the bytes decide it).
    pub fn take<E>(
        &self,
        kind: ResourceType,
        payloads: &[&[u8]],
        decode: impl FnOnce() -> Result<ResourceMap, E>,
    ) -> Result<Taken, Arc<E>>
    where
        E: Send + Sync + 'static,
    {
        let (mut hashed, (count, sum)) = answer_hash(payloads);
        let key = (kind, count, sum);
        let mut decode = Some(decode);
        let mut made = None;
        let found = self.sets.try_get_with(key, || {
            let decode = decode.take().expect("the initialiser runs once");
            let set = Arc::new(ResourceSet::new(decode()?));
            let weak = Arc::downgrade(&set);
            made = Some(set);
            Ok::<_, E>(weak)
        })?;
        if let Some(set) = made {
            return Ok(Taken::Decoded(set));
        }
        if let Some(set) = confirmed(&found, &mut hashed) {
            return Ok(Taken::Shared(set));
        }
        // The set is gone (no state holds it any more) or another answer
        // has the same hash: decode these bytes, and remember them if the
        // entry was dead.
        let decode = decode.take().expect("the initialiser did not run");
        let set = Arc::new(ResourceSet::new(decode().map_err(Arc::new)?));
        if found.strong_count() == 0 {
            self.sets.insert(key, Arc::downgrade(&set));
        }
        Ok(Taken::Decoded(set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_states::cluster_payload;
    use crate::xds::Codec;
    use crate::Intake;

    const CDS: ResourceType = ResourceType::Clusters;

    fn answer(r: &Intake, names: &[&str], timeout: u32) -> Vec<Vec<u8>> {
        names
            .iter()
            .map(|n| cluster_payload(r.codec(), n, &format!("{timeout}s")).to_vec())
            .collect()
    }

    fn decode(r: &Intake, payloads: &[Vec<u8>]) -> Result<ResourceMap, crate::ResourceError> {
        let mut map = ResourceMap::new();
        for p in payloads {
            let resource = r.resource(CDS, bytes::Bytes::copy_from_slice(p))?;
            map.insert(resource.name.clone(), resource);
        }
        Ok(map)
    }

    fn slices(payloads: &[Vec<u8>]) -> Vec<&[u8]> {
        payloads.iter().map(Vec::as_slice).collect()
    }

    fn take(
        shared: &SharedAnswers,
        r: &Intake,
        payloads: &[Vec<u8>],
        decodes: &AtomicU64,
    ) -> Taken {
        shared
            .take(CDS, &slices(payloads), || {
                decodes.fetch_add(1, Ordering::Relaxed);
                decode(r, payloads)
            })
            .expect("decodes")
    }

    #[test]
    fn the_same_bytes_are_decoded_once_and_their_set_shared() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let decodes = AtomicU64::new(0);
        let a = answer(&r, &["a", "b", "c"], 1);
        let Taken::Decoded(first) = take(&shared, &r, &a, &decodes) else {
            panic!("the first is decoded")
        };
        let Taken::Shared(second) = take(&shared, &r, &a.clone(), &decodes) else {
            panic!("the second is shared")
        };
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(decodes.load(Ordering::Relaxed), 1);
        assert_eq!(second.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        // The same resources in another order (go-control-plane's map
        // order): the same set.
        let Taken::Shared(third) = take(&shared, &r, &answer(&r, &["c", "a", "b"], 1), &decodes)
        else {
            panic!("another order is shared")
        };
        assert!(Arc::ptr_eq(&first, &third));
        // Another content, one resource fewer: each its own.
        for other in [answer(&r, &["a", "b", "c"], 2), answer(&r, &["a", "b"], 1)] {
            assert!(matches!(
                take(&shared, &r, &other, &decodes),
                Taken::Decoded(_)
            ));
        }
        assert_eq!(decodes.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_set_is_repeated_only_by_exactly_its_resources() {
        let r = Intake::new(Codec::embedded());
        let ab = answer(&r, &["a", "b"], 1);
        let set = ResourceSet::new(decode(&r, &ab).unwrap());
        let repeats = |payloads: &[Vec<u8>]| {
            let (mut hashed, _) = answer_hash(&slices(payloads));
            set.repeats(&mut hashed)
        };
        assert!(repeats(&ab));
        assert!(repeats(&answer(&r, &["b", "a"], 1)));
        for not in [
            answer(&r, &["a", "a"], 1),
            answer(&r, &["a"], 1),
            answer(&r, &["a", "b", "c"], 1),
            answer(&r, &["a", "c"], 1),
            answer(&r, &["a", "b"], 2),
            vec![ab[0].clone(), vec![0xff]],
        ] {
            assert!(!repeats(&not));
        }
    }

    #[test]
    fn find_takes_only_a_held_set_of_the_same_bytes() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let decodes = AtomicU64::new(0);
        let a = answer(&r, &["a", "b"], 1);
        assert!(shared.find(CDS, &slices(&a)).is_none(), "nothing taken yet");
        let Taken::Decoded(held) = take(&shared, &r, &a, &decodes) else {
            panic!("decoded")
        };
        let found = shared.find(CDS, &slices(&answer(&r, &["b", "a"], 1)));
        assert!(found.is_some_and(|set| Arc::ptr_eq(&set, &held)));
        assert!(shared
            .find(CDS, &slices(&answer(&r, &["a", "b"], 2)))
            .is_none());
        drop(held);
        assert!(shared.find(CDS, &slices(&a)).is_none(), "no state holds it");
        assert_eq!(decodes.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_set_no_state_holds_is_decoded_again() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let decodes = AtomicU64::new(0);
        let a = answer(&r, &["a"], 1);
        drop(take(&shared, &r, &a, &decodes));
        let again = take(&shared, &r, &a, &decodes);
        assert!(matches!(again, Taken::Decoded(_)));
        assert!(matches!(take(&shared, &r, &a, &decodes), Taken::Shared(_)));
        assert_eq!(decodes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_hash_collision_is_confirmed_away() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let decodes = AtomicU64::new(0);
        let a = answer(&r, &["a"], 1);
        let b = answer(&r, &["b"], 1);
        let Taken::Decoded(held) = take(&shared, &r, &a, &decodes) else {
            panic!("decoded")
        };
        // Put a's set under b's hash, as a collision would.
        let (_, (count, sum)) = answer_hash(&slices(&b));
        let key = (CDS, count, sum);
        shared.sets.insert(key, Arc::downgrade(&held));
        let Taken::Decoded(set) = take(&shared, &r, &b, &decodes) else {
            panic!("a collision is decoded")
        };
        assert_eq!(set.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn sessions_taking_one_answer_at_once_decode_it_once() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let decodes = AtomicU64::new(0);
        let names: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let a = answer(&r, &names, 1);
        let barrier = std::sync::Barrier::new(8);
        let sets: Vec<Arc<ResourceSet>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        match take(&shared, &r, &a, &decodes) {
                            Taken::Decoded(set) | Taken::Shared(set) => set,
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(decodes.load(Ordering::Relaxed), 1);
        assert!(sets.iter().all(|s| Arc::ptr_eq(s, &sets[0])));
    }

    #[test]
    fn an_error_is_everyones_and_not_remembered() {
        let r = Intake::new(Codec::embedded());
        let shared = SharedAnswers::default();
        let bad = vec![vec![0xff_u8, 0xff]];
        for _ in 0..2 {
            let result = shared.take(CDS, &slices(&bad), || decode(&r, &bad));
            assert!(result.is_err());
        }
        let good = answer(&r, &["a"], 1);
        let decodes = AtomicU64::new(0);
        assert!(matches!(
            take(&shared, &r, &good, &decodes),
            Taken::Decoded(_)
        ));
    }

    #[test]
    fn selections_are_remembered_only_when_they_walked_many() {
        let set = ResourceSet::new(ResourceMap::new());
        let calls = AtomicU64::new(0);
        let compute = |walked| {
            calls.fetch_add(1, Ordering::Relaxed);
            ([7; 32], walked)
        };
        for _ in 0..2 {
            set.selection(CDS, &[1; 32], None, || compute(SELECTION_MEMO_MIN));
            set.selection(CDS, &[2; 32], None, || compute(1));
        }
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        // Another type or names: not the same selection.
        set.selection(ResourceType::Endpoints, &[1; 32], None, || compute(100));
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        for i in 0..SELECTIONS_KEPT as u8 + 1 {
            set.selection(CDS, &[100 + i; 32], None, || compute(100));
        }
        assert!(set.selections.lock().unwrap().len() <= SELECTIONS_KEPT);
    }
}
