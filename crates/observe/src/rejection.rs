//! Spotting REST clients that rejected an update: the [`RejectionLog`] of
//! one subscription, which the client book (`clients.rs`) keeps in each of
//! its subscriptions (one client, as `client_key.rs` tells clients apart,
//! one type and its names: `ParsedRequest::subscription`).
//!
//! REST has no NACK: an Envoy that rejects an update keeps polling with the
//! version it had (the empty version when it rejected its very first one),
//! which looks like a client that has not caught up, so one such poll
//! proves nothing. The log remembers the versions served to its
//! subscription; a client that keeps presenting a version older than one it
//! was already served (or, for an Envoy, an empty version after a body was
//! served to it) `threshold` polls in a row is a suspected rejection,
//! reported once per (old, new) pair. A subscription never served the
//! current version is catching up. Polls the client book is told not to
//! judge (through a trusted proxy that names no client, or answered with a
//! type served opaque) go through no log. A client that says so itself (a
//! poll with `error_detail`, which REST clients other than Envoy may send)
//! has rejected the version it was served: reported on that poll, with no
//! threshold, once per (old, new) pair.
//!
//! Versions are compared by their selection digest (see `state`), so a
//! client is in step exactly when it would get a 304.

use std::collections::VecDeque;

use crate::cache::same_selection;

/// How many served versions are remembered per subscription.
pub(crate) const SERVED_VERSIONS: usize = 4;

/// A client kept presenting `presented` although `current` was served to
/// it, or said it rejected `current` (`nack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspicion {
    pub presented: String,
    pub current: String,
    pub polls: u32,
    /// The client's own reason, when it NACKed: no guess.
    pub nack: Option<String>,
}

/// Where one client stands for one type, as of its latest poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Standing {
    /// It presents the version it would be served: a 304.
    #[default]
    InStep,
    /// It was not served the current version yet (a body goes out now).
    CatchingUp,
    /// It was served the current version but presents an older one,
    /// `polls` polls in a row.
    Behind { polls: u32 },
    /// Behind for the threshold or longer: a suspected rejection.
    Suspected { polls: u32 },
    /// It said it rejected the current version (a poll with `error_detail`).
    Rejected,
}

/// One poll of the subscription, as the log sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observation<'a> {
    pub presented: &'a str,
    /// The version this poll is served at.
    pub current: &'a str,
    /// Whether the client is an Envoy: only an Envoy's empty version says
    /// "I rejected what you sent" (curl and scripts always present none).
    pub envoy: bool,
    /// The client's NACK's message, if the poll is one.
    pub nack: Option<&'a str>,
}

/// What one subscription was served and how it polled since.
#[derive(Debug, Default)]
pub(crate) struct RejectionLog {
    /// The last [`SERVED_VERSIONS`] versions served, oldest first.
    served: VecDeque<String>,
    /// (presented, polls) of the current run of polls presenting an older version.
    behind: Option<(String, u32)>,
    /// (presented, current) last reported.
    reported: Option<(String, String)>,
}

impl RejectionLog {
    /// Records that a body at `version` was served.
    pub(crate) fn served(&mut self, version: &str) {
        if self.served.back().is_some_and(|v| v == version) {
            return;
        }
        self.served.retain(|v| v != version);
        self.served.push_back(version.to_owned());
        if self.served.len() > SERVED_VERSIONS {
            self.served.pop_front();
        }
    }

    /// Whether a body at exactly `version` was served, among the last
    /// [`SERVED_VERSIONS`].
    pub(crate) fn has_served(&self, version: &str) -> bool {
        self.served.iter().any(|v| v == version)
    }

    /// The bytes its versions hold (what the client book weighs it by).
    pub(crate) fn bytes(&self) -> usize {
        self.served.iter().map(String::len).sum::<usize>()
            + self.behind.as_ref().map_or(0, |(v, _)| v.len())
            + self.reported.as_ref().map_or(0, |(a, b)| a.len() + b.len())
    }

    /// Records `poll`; a suspicion the first time its client has presented
    /// the same older version `threshold` times after being served the
    /// current one. Costs nothing for a subscription that was never behind.
    pub(crate) fn observe(&mut self, poll: Observation<'_>, threshold: u32) -> Option<Suspicion> {
        if same_selection(poll.presented, poll.current) {
            self.behind = None;
            return None;
        }
        if poll.nack.is_some() {
            self.behind = None;
            return self.report(poll, 1);
        }
        let served = |v: &str| self.served.iter().position(|s| same_selection(s, v));
        // Not yet served the current version: catching up.
        let older = served(poll.current).is_some_and(|current| match poll.presented {
            "" => poll.envoy,
            presented => served(presented).is_some_and(|old| old < current),
        });
        if !older {
            self.behind = None;
            return None;
        }
        let polls = match &mut self.behind {
            Some((presented, polls)) if presented == poll.presented => {
                *polls += 1;
                *polls
            }
            _ => {
                self.behind = Some((poll.presented.to_owned(), 1));
                1
            }
        };
        if polls < threshold {
            return None;
        }
        self.report(poll, polls)
    }

    /// A suspicion of `poll`'s pair (presented, current), with its NACK's
    /// message if it is one, unless that pair was the last reported.
    fn report(&mut self, poll: Observation<'_>, polls: u32) -> Option<Suspicion> {
        let pair = (poll.presented.to_owned(), poll.current.to_owned());
        if self.reported.as_ref() == Some(&pair) {
            return None;
        }
        self.reported = Some(pair);
        Some(Suspicion {
            presented: poll.presented.to_owned(),
            current: poll.current.to_owned(),
            polls,
            nack: poll.nack.map(str::to_owned),
        })
    }

    /// Where `poll`'s client stands after [`RejectionLog::observe`]
    /// recorded it.
    pub(crate) fn sync(&self, poll: Observation<'_>, threshold: u32) -> Standing {
        if same_selection(poll.presented, poll.current) {
            return Standing::InStep;
        }
        if poll.nack.is_some() {
            return Standing::Rejected;
        }
        match &self.behind {
            Some((presented, polls)) if presented == poll.presented => match *polls >= threshold {
                true => Standing::Suspected { polls: *polls },
                false => Standing::Behind { polls: *polls },
            },
            _ => Standing::CatchingUp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "1~aaaaaaaaaaaa";
    const V2: &str = "2~bbbbbbbbbbbb";

    fn poll<'a>(presented: &'a str, current: &'a str) -> Observation<'a> {
        Observation {
            presented,
            current,
            envoy: true,
            nack: None,
        }
    }

    #[test]
    fn reports_once_after_threshold() {
        let mut t = RejectionLog::default();
        t.served(V1);
        t.served(V2);
        assert_eq!(t.observe(poll(V1, V2), 3), None);
        assert_eq!(t.observe(poll(V1, V2), 3), None);
        let s = t.observe(poll(V1, V2), 3).unwrap();
        assert_eq!(
            (s.presented.as_str(), s.current.as_str(), s.polls),
            (V1, V2, 3)
        );
        assert_eq!(t.observe(poll(V1, V2), 3), None);
    }

    #[test]
    fn sync_says_where_a_client_stands() {
        let mut t = RejectionLog::default();
        assert_eq!(t.sync(poll("", V1), 2), Standing::CatchingUp);
        assert_eq!(t.sync(poll(V1, V1), 2), Standing::InStep);
        let look = |t: &mut RejectionLog, p| {
            t.observe(p, 2);
            t.sync(p, 2)
        };
        assert_eq!(look(&mut t, poll("", V1)), Standing::CatchingUp);
        t.served(V1);
        assert_eq!(look(&mut t, poll(V1, V1)), Standing::InStep);
        assert_eq!(look(&mut t, poll(V1, V2)), Standing::CatchingUp);
        t.served(V2);
        assert_eq!(look(&mut t, poll(V1, V2)), Standing::Behind { polls: 1 });
        assert_eq!(look(&mut t, poll(V1, V2)), Standing::Suspected { polls: 2 });
        assert_eq!(look(&mut t, poll(V1, V2)), Standing::Suspected { polls: 3 });
        assert_eq!(look(&mut t, poll(V2, V2)), Standing::InStep);
    }

    #[test]
    fn a_rejected_first_version_is_seen_for_envoys_only() {
        let mut t = RejectionLog::default();
        t.served(V1);
        assert_eq!(t.observe(poll("", V1), 2), None);
        assert!(t.observe(poll("", V1), 2).is_some());
        // curl and scripts present no version by design.
        let mut t = RejectionLog::default();
        t.served(V1);
        for _ in 0..5 {
            let curl = Observation {
                nack: None,
                envoy: false,
                ..poll("", V1)
            };
            assert_eq!(t.observe(curl, 1), None);
        }
    }

    #[test]
    fn a_nack_is_a_rejection_at_once_reported_once_per_pair() {
        let mut t = RejectionLog::default();
        t.served(V1);
        t.served(V2);
        let nack = Observation {
            nack: Some("bad cluster"),
            ..poll(V1, V2)
        };
        let s = t.observe(nack, 3).expect("no threshold for a NACK");
        assert_eq!(s.nack.as_deref(), Some("bad cluster"));
        assert_eq!((s.presented.as_str(), s.polls), (V1, 1));
        assert_eq!(t.sync(nack, 3), Standing::Rejected);
        assert_eq!(t.observe(nack, 3), None, "once per pair");
        // Even a version it was never served here (another replica's).
        let mut fresh = RejectionLog::default();
        assert!(fresh.observe(nack, 3).is_some());
        // A NACK that presents the current version is in step.
        let in_step = Observation {
            nack: Some("x"),
            ..poll(V2, V2)
        };
        assert_eq!(t.observe(in_step, 3), None);
        assert_eq!(t.sync(in_step, 3), Standing::InStep);
    }

    #[test]
    fn catching_up_or_unknown_versions_are_not_rejections() {
        let mut t = RejectionLog::default();
        t.served(V1);
        for _ in 0..5 {
            // never served V2: catching up
            assert_eq!(t.observe(poll(V1, V2), 1), None);
            // a version this process never served (another replica's)
            assert_eq!(t.observe(poll("9~cccccccccccc", V1), 1), None);
        }
        // the same selection under another upstream version is in step
        t.served(V2);
        assert_eq!(t.observe(poll("7~bbbbbbbbbbbb", V2), 1), None);
    }

    #[test]
    fn the_last_versions_served_are_kept_once_each() {
        let mut t = RejectionLog::default();
        let versions: Vec<String> = (0..=SERVED_VERSIONS).map(|i| format!("{i}~x")).collect();
        for version in &versions {
            t.served(version);
            t.served(version);
        }
        assert!(!t.has_served(&versions[0]), "the oldest is gone");
        assert!(versions[1..].iter().all(|v| t.has_served(v)));
        assert!(!t.has_served("1~"), "exact versions only");
    }
}
