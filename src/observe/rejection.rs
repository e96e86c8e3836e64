//! Spotting REST clients that rejected an update.
//!
//! REST has no NACK: an Envoy that rejects an update keeps polling with the
//! version it had, which is the empty version when it rejected its very
//! first one. To the gateway that looks like a client that has not caught up,
//! so one such poll proves nothing. Per subscription (one client, as
//! `client_key.rs` tells clients apart, and its names:
//! `ParsedRequest::subscription`), the tracker remembers the versions
//! served to it; a client that keeps presenting a
//! version older than one it was already served (or, for an Envoy, an empty
//! version after a body was served to it) `threshold` polls in a row is a
//! suspected rejection, reported once per (old, new) pair. A subscription
//! never served the current version is catching up. Polls through a trusted
//! proxy that names no client never reach the tracker (`source::polled`).
//!
//! Versions are compared by their selection digest (see `state`), so a
//! client is in step exactly when it would get a 304.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::cache::same_selection;
use crate::cache::SubscriptionKey;

/// How many served versions are remembered per subscription.
const HISTORY: usize = 4;

/// A client kept presenting `presented` although `current` was served to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suspicion {
    pub(crate) presented: String,
    pub(crate) current: String,
    pub(crate) polls: u32,
}

/// Where one client stands for one type, as of its latest poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Standing {
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
}

/// One poll as the tracker sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observation<'a> {
    /// Who asks, for which names (see `ParsedRequest::subscription`).
    pub(crate) subscription: SubscriptionKey,
    pub(crate) presented: &'a str,
    /// The version this poll is served at.
    pub(crate) current: &'a str,
    /// Whether the client is an Envoy: only an Envoy's empty version says
    /// "I rejected what you sent" (curl and scripts always present none).
    pub(crate) envoy: bool,
}

#[derive(Debug)]
struct Log {
    served: VecDeque<String>,
    /// (presented, polls) of the current run of polls presenting an older version.
    behind: Option<(String, u32)>,
    /// (presented, current) last reported.
    reported: Option<(String, String)>,
    seen: Instant,
}

/// The rejection bookkeeping of one (session, type).
#[derive(Debug, Default)]
pub(crate) struct RejectionTracker {
    logs: HashMap<SubscriptionKey, Log>,
}

impl RejectionTracker {
    /// Records that `version` was served to `subscription`.
    pub(crate) fn served(&mut self, subscription: SubscriptionKey, version: &str) {
        let log = self.logs.entry(subscription).or_insert_with(|| Log {
            served: VecDeque::new(),
            behind: None,
            reported: None,
            seen: Instant::now(),
        });
        log.seen = Instant::now();
        if log.served.back().is_some_and(|v| v == version) {
            return;
        }
        log.served.retain(|v| v != version);
        log.served.push_back(version.to_owned());
        if log.served.len() > HISTORY {
            log.served.pop_front();
        }
    }

    /// Records `poll`; a suspicion the first time its client has presented
    /// the same older version `threshold` times after being served the
    /// current one. Costs nothing for a subscription that was never behind.
    pub(crate) fn observe(&mut self, poll: Observation<'_>, threshold: u32) -> Option<Suspicion> {
        let log = self.logs.get_mut(&poll.subscription)?;
        log.seen = Instant::now();
        if same_selection(poll.presented, poll.current) {
            log.behind = None;
            return None;
        }
        let served = |v: &str| log.served.iter().position(|s| same_selection(s, v));
        let Some(current) = served(poll.current) else {
            // Not yet served the current version: catching up.
            log.behind = None;
            return None;
        };
        let older = if poll.presented.is_empty() {
            poll.envoy
        } else {
            served(poll.presented).is_some_and(|old| old < current)
        };
        if !older {
            log.behind = None;
            return None;
        }
        let polls = match &mut log.behind {
            Some((presented, polls)) if presented == poll.presented => {
                *polls += 1;
                *polls
            }
            _ => {
                log.behind = Some((poll.presented.to_owned(), 1));
                1
            }
        };
        if polls < threshold {
            return None;
        }
        let pair = (poll.presented.to_owned(), poll.current.to_owned());
        if log.reported.as_ref() == Some(&pair) {
            return None;
        }
        log.reported = Some(pair);
        Some(Suspicion {
            presented: poll.presented.to_owned(),
            current: poll.current.to_owned(),
            polls,
        })
    }

    /// Where `poll`'s client stands after [`RejectionTracker::observe`]
    /// recorded it.
    pub(crate) fn sync(&self, poll: Observation<'_>, threshold: u32) -> Standing {
        if same_selection(poll.presented, poll.current) {
            return Standing::InStep;
        }
        let behind = self
            .logs
            .get(&poll.subscription)
            .and_then(|log| log.behind.as_ref());
        match behind {
            Some((presented, polls)) if presented == poll.presented => {
                if *polls >= threshold {
                    Standing::Suspected { polls: *polls }
                } else {
                    Standing::Behind { polls: *polls }
                }
            }
            _ => Standing::CatchingUp,
        }
    }

    /// Forgets subscriptions not polled within `ttl`.
    pub(crate) fn prune(&mut self, now: Instant, ttl: Duration) {
        self.logs
            .retain(|_, log| now.saturating_duration_since(log.seen) < ttl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::IdentityKey;
    use crate::cache::{ClientKey, ClientNode};
    use crate::config::SessionKey;

    const V1: &str = "1~aaaaaaaaaaaa";
    const V2: &str = "2~bbbbbbbbbbbb";

    /// Subscription `n` of one client.
    fn key(n: u64) -> SubscriptionKey {
        let identity = IdentityKey::of(None, SessionKey::Node);
        let node = ClientNode::of(&identity, "n", "c", "envoy", false);
        ClientKey::new(node, None).subscribing(n)
    }

    fn poll<'a>(sub: SubscriptionKey, presented: &'a str, current: &'a str) -> Observation<'a> {
        Observation {
            subscription: sub,
            presented,
            current,
            envoy: true,
        }
    }

    #[test]
    fn reports_once_after_threshold() {
        let mut t = RejectionTracker::default();
        t.served(key(1), V1);
        t.served(key(1), V2);
        assert_eq!(t.observe(poll(key(1), V1, V2), 3), None);
        assert_eq!(t.observe(poll(key(1), V1, V2), 3), None);
        let s = t.observe(poll(key(1), V1, V2), 3).unwrap();
        assert_eq!(
            (s.presented.as_str(), s.current.as_str(), s.polls),
            (V1, V2, 3)
        );
        assert_eq!(t.observe(poll(key(1), V1, V2), 3), None);
    }

    #[test]
    fn sync_says_where_a_client_stands() {
        let mut t = RejectionTracker::default();
        let look = |t: &mut RejectionTracker, p| {
            t.observe(p, 2);
            t.sync(p, 2)
        };
        assert_eq!(look(&mut t, poll(key(1), "", V1)), Standing::CatchingUp);
        t.served(key(1), V1);
        assert_eq!(look(&mut t, poll(key(1), V1, V1)), Standing::InStep);
        assert_eq!(look(&mut t, poll(key(1), V1, V2)), Standing::CatchingUp);
        t.served(key(1), V2);
        assert_eq!(
            look(&mut t, poll(key(1), V1, V2)),
            Standing::Behind { polls: 1 }
        );
        assert_eq!(
            look(&mut t, poll(key(1), V1, V2)),
            Standing::Suspected { polls: 2 }
        );
        assert_eq!(
            look(&mut t, poll(key(1), V1, V2)),
            Standing::Suspected { polls: 3 }
        );
        assert_eq!(look(&mut t, poll(key(1), V2, V2)), Standing::InStep);
    }

    #[test]
    fn a_rejected_first_version_is_seen_for_envoys_only() {
        let mut t = RejectionTracker::default();
        t.served(key(1), V1);
        assert_eq!(t.observe(poll(key(1), "", V1), 2), None);
        assert!(t.observe(poll(key(1), "", V1), 2).is_some());
        // curl and scripts present no version by design.
        let mut t = RejectionTracker::default();
        t.served(key(1), V1);
        for _ in 0..5 {
            let curl = Observation {
                envoy: false,
                ..poll(key(1), "", V1)
            };
            assert_eq!(t.observe(curl, 1), None);
        }
    }

    #[test]
    fn catching_up_or_unknown_versions_are_not_rejections() {
        let mut t = RejectionTracker::default();
        t.served(key(1), V1);
        for _ in 0..5 {
            // never served V2: catching up
            assert_eq!(t.observe(poll(key(1), V1, V2), 1), None);
            // a version this process never served (another replica's)
            assert_eq!(t.observe(poll(key(1), "9~cccccccccccc", V1), 1), None);
            // never seen at all
            assert_eq!(t.observe(poll(key(99), V1, V2), 1), None);
        }
        // the same selection under another upstream version is in step
        t.served(key(1), V2);
        assert_eq!(t.observe(poll(key(1), "7~bbbbbbbbbbbb", V2), 1), None);
    }

    #[test]
    fn subscriptions_are_counted_apart_and_pruned() {
        let mut t = RejectionTracker::default();
        for sub in [11, 12] {
            t.served(key(sub), V1);
            t.served(key(sub), V2);
        }
        // a sibling in step does not hide c1's rejection
        assert_eq!(t.observe(poll(key(12), V2, V2), 2), None);
        assert_eq!(t.observe(poll(key(11), V1, V2), 2), None);
        assert!(t.observe(poll(key(11), V1, V2), 2).is_some());
        t.prune(
            Instant::now() + Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(t.observe(poll(key(11), V1, V2), 1), None, "forgotten");
    }
}
