//! A set's payloads indexed by their xxh3, for telling whether an upstream
//! answer holds exactly them, byte for byte, in whatever order it sent
//! them (go-control-plane sends a snapshot in Go's map order, another for
//! every response). One hash lookup and one byte comparison per payload of
//! the answer: no name parsed, no map of names walked, nothing sorted.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bytes::Bytes;

/// A payload with its xxh3.
pub(crate) type Hashed<'a> = (u64, &'a [u8]);

/// The payloads of one set.
#[derive(Debug)]
pub(crate) struct PayloadIndex {
    /// The payloads, in (hash, bytes) order.
    sorted: Vec<(u64, Bytes)>,
    /// Each payload's place in `sorted` by its hash; `None` when two of
    /// them share a hash (then an answer is compared by sorting it).
    by_hash: Option<HashMap<u64, usize, BuildHasherDefault<Prehashed>>>,
}

impl PayloadIndex {
    /// The index of `payloads`, each with its xxh3.
    pub(crate) fn new(mut payloads: Vec<(u64, Bytes)>) -> PayloadIndex {
        payloads.sort_unstable_by(|a, b| (a.0, a.1.as_ref()).cmp(&(b.0, b.1.as_ref())));
        let mut by_hash = HashMap::with_capacity_and_hasher(payloads.len(), Default::default());
        let unique = payloads
            .iter()
            .enumerate()
            .all(|(i, (hash, _))| by_hash.insert(*hash, i).is_none());
        PayloadIndex {
            sorted: payloads,
            by_hash: unique.then_some(by_hash),
        }
    }

    /// Whether `answer` holds exactly these payloads: as many, each equal
    /// byte for byte to a distinct one of them. (So no payload twice: the
    /// payloads of a set are distinct, each carrying its own name.)
    pub(crate) fn repeats(&self, answer: &mut [Hashed<'_>]) -> bool {
        if answer.len() != self.sorted.len() {
            return false;
        }
        let Some(by_hash) = &self.by_hash else {
            answer.sort_unstable();
            return self
                .sorted
                .iter()
                .zip(answer.iter())
                .all(|((h, held), (s, bytes))| h == s && held.as_ref() == *bytes);
        };
        let mut matched = vec![false; self.sorted.len()];
        answer.iter().all(|(hash, bytes)| match by_hash.get(hash) {
            Some(&i) if !std::mem::replace(&mut matched[i], true) => {
                self.sorted[i].1.as_ref() == *bytes
            }
            _ => false,
        })
    }
}

/// The hasher of keys that are hashes already (xxh3): the key itself.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(payloads: &[(u64, &'static [u8])]) -> PayloadIndex {
        PayloadIndex::new(
            payloads
                .iter()
                .map(|(h, p)| (*h, Bytes::from_static(p)))
                .collect(),
        )
    }

    fn repeats(index: &PayloadIndex, answer: &[(u64, &[u8])]) -> bool {
        index.repeats(&mut answer.to_vec())
    }

    #[test]
    fn an_answer_repeats_exactly_the_same_payloads_in_any_order() {
        let held = index(&[(1, b"a"), (2, b"b"), (3, b"c")]);
        assert!(held.by_hash.is_some());
        assert!(repeats(&held, &[(3, b"c"), (1, b"a"), (2, b"b")]));
        for not in [
            &[(1, &b"a"[..]), (2, b"b")][..],
            &[(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")],
            &[(1, b"a"), (1, b"a"), (2, b"b")],
            &[(1, b"a"), (2, b"b"), (3, b"x")],
            &[(1, b"a"), (2, b"b"), (9, b"c")],
        ] {
            assert!(!repeats(&held, not), "{not:?}");
        }
    }

    /// Two payloads of one set with the same hash (forged here): compared
    /// by sorting, with the same answers.
    #[test]
    fn a_hash_shared_inside_a_set_is_compared_by_sorting() {
        let held = index(&[(7, b"a"), (7, b"b"), (3, b"c")]);
        assert!(held.by_hash.is_none());
        assert!(repeats(&held, &[(7, b"b"), (3, b"c"), (7, b"a")]));
        assert!(!repeats(&held, &[(7, b"a"), (3, b"c"), (7, b"a")]));
        assert!(!repeats(&held, &[(7, b"b"), (3, b"c"), (7, b"x")]));
    }
}
