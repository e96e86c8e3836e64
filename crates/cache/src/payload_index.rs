//! A set's payloads in (hash, bytes) order, for telling whether an
//! upstream answer holds exactly them, byte for byte, in whatever order it
//! sent them (go-control-plane sends a snapshot in Go's map order, another
//! for every response): the answer's payloads are sorted the same way and
//! compared in turn. No name parsed, no map of names walked.

use bytes::Bytes;

/// A payload with its xxh3.
pub(crate) type Hashed<'a> = (u64, &'a [u8]);

/// The payloads of one set.
#[derive(Debug)]
pub(crate) struct PayloadIndex {
    /// The payloads, in (hash, bytes) order.
    sorted: Vec<(u64, Bytes)>,
}

impl PayloadIndex {
    /// The index of `payloads`, each with its xxh3.
    pub(crate) fn new(mut payloads: Vec<(u64, Bytes)>) -> PayloadIndex {
        payloads.sort_unstable_by(|a, b| (a.0, a.1.as_ref()).cmp(&(b.0, b.1.as_ref())));
        PayloadIndex { sorted: payloads }
    }

    /// Whether `answer` holds exactly these payloads: as many, each equal
    /// byte for byte to a distinct one of them. (So no payload twice: the
    /// payloads of a set are distinct, each carrying its own name.) Sorts
    /// `answer`.
    pub(crate) fn repeats(&self, answer: &mut [Hashed<'_>]) -> bool {
        if answer.len() != self.sorted.len() {
            return false;
        }
        answer.sort_unstable();
        self.sorted
            .iter()
            .zip(answer.iter())
            .all(|((h, held), (s, bytes))| h == s && held.as_ref() == *bytes)
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

    /// Two payloads of one set with the same hash (forged here): told
    /// apart by their bytes.
    #[test]
    fn payloads_sharing_a_hash_are_told_apart_by_their_bytes() {
        let held = index(&[(7, b"a"), (7, b"b"), (3, b"c")]);
        assert!(repeats(&held, &[(7, b"b"), (3, b"c"), (7, b"a")]));
        assert!(!repeats(&held, &[(7, b"a"), (3, b"c"), (7, b"a")]));
        assert!(!repeats(&held, &[(7, b"b"), (3, b"c"), (7, b"x")]));
    }
}
