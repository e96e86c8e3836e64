//! Spotting REST clients that rejected an update.
//!
//! REST has no NACK: an Envoy that rejects version N+1 keeps polling with
//! version N. To the gateway that looks like a client that has not caught up,
//! so one such poll proves nothing; `threshold` polls presenting a version
//! older than one already served (for the same node identity and type) make a
//! suspected rejection, reported once per (old, new) pair.

use std::collections::{HashMap, HashSet, VecDeque};

/// How many served versions are remembered per (identity, type).
const HISTORY: usize = 16;

/// A client kept presenting `presented` although `current` was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspicion {
    pub presented: String,
    pub current: String,
    pub polls: u32,
}

#[derive(Debug, Default)]
pub struct RejectionTracker {
    served: VecDeque<String>,
    /// (subscription, presented version) → polls counted.
    stale_polls: HashMap<(String, String), u32>,
    reported: HashSet<(String, String, String)>,
}

impl RejectionTracker {
    /// Records that a body of `version` was served.
    pub fn served(&mut self, version: &str) {
        if self.served.back().map(String::as_str) != Some(version) {
            self.served.retain(|v| v != version);
            self.served.push_back(version.to_owned());
            if self.served.len() > HISTORY {
                self.served.pop_front();
            }
        }
    }

    /// Records that a subscription presented the current version: its stale
    /// polls are forgotten. The key is only built when there are any (the
    /// usual poll of an up-to-date client costs nothing here).
    pub fn caught_up(&mut self, subscription: impl FnOnce() -> String) {
        if !self.stale_polls.is_empty() {
            let subscription = subscription();
            self.stale_polls.retain(|(sub, _), _| *sub != subscription);
        }
    }

    /// Records a poll of `subscription` presenting `presented` while `current`
    /// is the state; `served_current` says whether this subscription was
    /// already served `current`. Returns a suspicion the first time the
    /// threshold is reached.
    pub fn observe(
        &mut self,
        subscription: &str,
        presented: &str,
        current: &str,
        served_current: bool,
        threshold: u32,
    ) -> Option<Suspicion> {
        if presented == current {
            self.caught_up(|| subscription.to_owned());
            return None;
        }
        if !served_current {
            return None;
        }
        let position = |v: &str| self.served.iter().position(|s| s == v);
        match (position(presented), position(current)) {
            (Some(old), Some(new)) if old < new => {}
            _ => return None,
        }
        let polls = self
            .stale_polls
            .entry((subscription.to_owned(), presented.to_owned()))
            .or_insert(0);
        *polls += 1;
        let polls = *polls;
        if polls < threshold {
            return None;
        }
        let key = (
            subscription.to_owned(),
            presented.to_owned(),
            current.to_owned(),
        );
        if !self.reported.insert(key) {
            return None;
        }
        Some(Suspicion {
            presented: presented.to_owned(),
            current: current.to_owned(),
            polls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_once_after_threshold() {
        let mut t = RejectionTracker::default();
        t.served("1");
        t.served("2");
        assert_eq!(t.observe("a", "1", "2", true, 3), None);
        assert_eq!(t.observe("a", "1", "2", true, 3), None);
        let s = t.observe("a", "1", "2", true, 3).unwrap();
        assert_eq!(
            (s.presented.as_str(), s.current.as_str(), s.polls),
            ("1", "2", 3)
        );
        assert_eq!(t.observe("a", "1", "2", true, 3), None);
    }

    #[test]
    fn catching_up_or_unknown_versions_are_not_rejections() {
        let mut t = RejectionTracker::default();
        t.served("1");
        t.served("2");
        for _ in 0..5 {
            assert_eq!(t.observe("a", "", "2", true, 1), None);
            assert_eq!(t.observe("a", "0", "2", true, 1), None);
            // not yet served the current state: catching up
            assert_eq!(t.observe("a", "1", "2", false, 1), None);
        }
        assert_eq!(t.observe("a", "2", "2", true, 1), None);
        assert_eq!(t.observe("a", "3", "2", true, 1), None);
    }

    #[test]
    fn subscriptions_are_counted_apart() {
        let mut t = RejectionTracker::default();
        t.served("1");
        t.served("2");
        // many EDS clusters each catching up once: no suspicion
        for sub in ["c1", "c2", "c3", "c4", "c5"] {
            assert_eq!(t.observe(sub, "1", "2", true, 2), None);
        }
        // a sibling at the current version does not hide c1's rejection
        assert_eq!(t.observe("c2", "2", "2", true, 2), None);
        assert!(t.observe("c1", "1", "2", true, 2).is_some());
    }
}
