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
    stale_polls: HashMap<String, u32>,
    reported: HashSet<(String, String)>,
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

    /// Records a poll presenting `presented` while `current` is the state;
    /// returns a suspicion the first time the threshold is reached.
    pub fn observe(&mut self, presented: &str, current: &str, threshold: u32) -> Option<Suspicion> {
        if presented == current {
            self.stale_polls.clear();
            return None;
        }
        let position = |v: &str| self.served.iter().position(|s| s == v);
        match (position(presented), position(current)) {
            (Some(old), Some(new)) if old < new => {}
            _ => return None,
        }
        let polls = self.stale_polls.entry(presented.to_owned()).or_insert(0);
        *polls += 1;
        let polls = *polls;
        if polls >= threshold
            && self
                .reported
                .insert((presented.to_owned(), current.to_owned()))
        {
            return Some(Suspicion {
                presented: presented.to_owned(),
                current: current.to_owned(),
                polls,
            });
        }
        None
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
        assert_eq!(t.observe("1", "2", 3), None);
        assert_eq!(t.observe("1", "2", 3), None);
        let s = t.observe("1", "2", 3).unwrap();
        assert_eq!(
            (s.presented.as_str(), s.current.as_str(), s.polls),
            ("1", "2", 3)
        );
        assert_eq!(t.observe("1", "2", 3), None);
    }

    #[test]
    fn catching_up_or_unknown_versions_are_not_rejections() {
        let mut t = RejectionTracker::default();
        t.served("1");
        t.served("2");
        for _ in 0..5 {
            assert_eq!(t.observe("", "2", 1), None);
            assert_eq!(t.observe("0", "2", 1), None);
        }
        assert_eq!(t.observe("2", "2", 1), None);
        // never served "3": a newer client presenting it is not a rejection
        assert_eq!(t.observe("3", "2", 1), None);
    }
}
