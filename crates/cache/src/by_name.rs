//! The one walk of two name-sorted sequences side by side: each name with
//! what the old side and the new side hold under it ([`by_name`]). Every
//! "what changed between two sets of named resources" in the gateway is
//! this walk: the `?changes` answer (`changes.rs`), the config history's
//! added, modified and removed (`config_history.rs`) and the admin diff of
//! two nodes (`admin/diff.rs`). It is linear in the names: both sides are
//! read once, in order.

use std::cmp::Ordering;
use std::iter::Peekable;

/// What the two sides hold under one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paired<A, B> {
    /// Only the old side has it (removed).
    Old(A),
    /// Only the new side has it (added).
    New(B),
    /// Both have it (unchanged or modified: the caller compares).
    Both(A, B),
}

/// The names of `old` and `new`, each given in ascending name order
/// without repeats (a `BTreeMap`'s order, or `TypeState::select`'s), merged
/// in that order, each with what the two sides hold under it.
pub fn by_name<K, A, B, I, J>(old: I, new: J) -> ByName<I::IntoIter, J::IntoIter>
where
    K: Ord,
    I: IntoIterator<Item = (K, A)>,
    J: IntoIterator<Item = (K, B)>,
{
    ByName {
        old: old.into_iter().peekable(),
        new: new.into_iter().peekable(),
    }
}

pub struct ByName<I: Iterator, J: Iterator> {
    old: Peekable<I>,
    new: Peekable<J>,
}

impl<K, A, B, I, J> Iterator for ByName<I, J>
where
    K: Ord,
    I: Iterator<Item = (K, A)>,
    J: Iterator<Item = (K, B)>,
{
    type Item = (K, Paired<A, B>);

    fn next(&mut self) -> Option<Self::Item> {
        let order = match (self.old.peek(), self.new.peek()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((a, _)), Some((b, _))) => a.cmp(b),
        };
        match order {
            Ordering::Less => self.old.next().map(|(k, a)| (k, Paired::Old(a))),
            Ordering::Greater => self.new.next().map(|(k, b)| (k, Paired::New(b))),
            Ordering::Equal => {
                let (k, a) = self.old.next()?;
                let (_, b) = self.new.next()?;
                Some((k, Paired::Both(a, b)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_merged_in_order_with_what_each_side_holds() {
        let old = [("a", 1), ("b", 2), ("d", 4)];
        let new = [("b", 20), ("c", 30), ("d", 4), ("e", 50)];
        let walked: Vec<_> = by_name(old, new).collect();
        assert_eq!(
            walked,
            [
                ("a", Paired::Old(1)),
                ("b", Paired::Both(2, 20)),
                ("c", Paired::New(30)),
                ("d", Paired::Both(4, 4)),
                ("e", Paired::New(50)),
            ]
        );
        let none: [(&str, i32); 0] = [];
        assert_eq!(by_name(old, none).count(), 3);
        assert_eq!(by_name(none, none).count(), 0);
    }
}
