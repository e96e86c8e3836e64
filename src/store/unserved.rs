//! The types a session's upstream does not serve, set aside so that they
//! cost the session's other types nothing.
//!
//! A control plane may not serve every type: java-control-plane has no
//! runtime service (UNIMPLEMENTED on a per-type stream), and ends a whole
//! ADS stream when asked for a type it does not know. Re-sent on every
//! reconnect, one such subscription kept every type's stream failing and
//! stale. So a type the upstream refused is set aside: it is not
//! subscribed again until a backoff of its own has passed
//! ([`FIRST_RETRY`], doubling to [`LAST_RETRY`]) and a client asks again,
//! and its polls meanwhile get a prompt error naming what the upstream
//! said. The first answer of the type forgets it.
//!
//! Which type ended an ADS stream is not said by the upstream, so a type
//! is set aside only on evidence: a stream that carried it alone (its own
//! service's, or an aggregated one probing it) refused before answering
//! it. No I/O.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::sync::lock;
use crate::xds::ResourceType;

/// How long a type is set aside the first time.
pub(super) const FIRST_RETRY: Duration = Duration::from_secs(30);
/// The longest it is set aside.
const LAST_RETRY: Duration = Duration::from_secs(600);

/// What the upstream did with a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The type's own stream (or method) is UNIMPLEMENTED.
    Unimplemented(String),
    /// An aggregated stream asking for it alone ended with this error
    /// before anything of it was answered.
    EndedTheStream(String),
}

/// One type set aside.
#[derive(Debug, Clone)]
struct SetAside {
    refused: Refused,
    since: SystemTime,
    /// Until when it is not subscribed.
    until: Instant,
    /// How many times in a row the upstream refused it.
    times: u32,
}

/// What a poll of a type set aside is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetAsideNow {
    pub(crate) refused: Refused,
    /// In how long the upstream is asked again (if a client still asks).
    pub(crate) retry_in: Duration,
}

/// The types one session set aside.
#[derive(Debug, Default)]
pub(crate) struct Unserved {
    types: Mutex<BTreeMap<ResourceType, SetAside>>,
    /// Wakes the polls waiting for a first answer when a type is set aside.
    set: tokio::sync::Notify,
}

impl Unserved {
    /// Sets `kind` aside: refused again, for twice as long as last time.
    pub(crate) fn set_aside(&self, kind: ResourceType, refused: Refused, now: Instant) {
        let mut types = lock(&self.types);
        let times = types.get(&kind).map_or(0, |s| s.times) + 1;
        let wait = FIRST_RETRY
            .saturating_mul(1 << (times - 1).min(8))
            .min(LAST_RETRY);
        types.insert(
            kind,
            SetAside {
                refused,
                since: SystemTime::now(),
                until: now + wait,
                times,
            },
        );
        drop(types);
        self.set.notify_waiters();
    }

    /// Resolves the next time a type is set aside (create it before
    /// checking [`check`](Self::check), so that none is missed).
    pub(super) fn next_set_aside(&self) -> tokio::sync::futures::Notified<'_> {
        self.set.notified()
    }

    /// Whether `kind` is set aside at `now` (not to be subscribed), and
    /// what its polls are told.
    pub(super) fn check(&self, kind: ResourceType, now: Instant) -> Option<SetAsideNow> {
        let types = lock(&self.types);
        let aside = types.get(&kind).filter(|s| now < s.until)?;
        Some(SetAsideNow {
            refused: aside.refused.clone(),
            retry_in: aside.until - now,
        })
    }

    /// Whether `kind` was set aside and its time is up: the upstream may
    /// be asked again.
    pub(super) fn due(&self, kind: ResourceType, now: Instant) -> bool {
        lock(&self.types).get(&kind).is_some_and(|s| now >= s.until)
    }

    /// The upstream answered `kind`: it is served.
    pub(crate) fn served(&self, kind: ResourceType) {
        let mut types = lock(&self.types);
        if !types.is_empty() {
            types.remove(&kind);
        }
    }

    /// Every type set aside now, with why and since when (RFC 3339).
    pub(super) fn listed(&self, now: Instant) -> Vec<(ResourceType, Refused, SystemTime)> {
        let types = lock(&self.types);
        let aside = types.iter().filter(|(_, s)| now < s.until);
        aside
            .map(|(kind, s)| (*kind, s.refused.clone(), s.since))
            .collect()
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Unimplemented(status) => {
                write!(f, "the upstream does not implement it ({status})")
            }
            Refused::EndedTheStream(status) => write!(
                f,
                "the upstream ended the aggregated stream that asked for it alone, before answering it ({status})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTDS: ResourceType = ResourceType::Runtime;

    #[test]
    fn a_type_is_set_aside_for_a_doubling_while() {
        let unserved = Unserved::default();
        let t0 = Instant::now();
        assert!(unserved.check(RTDS, t0).is_none());
        unserved.set_aside(RTDS, Refused::Unimplemented("x".into()), t0);
        let now = unserved.check(RTDS, t0).expect("set aside");
        assert_eq!(now.retry_in, FIRST_RETRY);
        assert!(!unserved.due(RTDS, t0));
        let later = t0 + FIRST_RETRY;
        assert!(
            unserved.check(RTDS, later).is_none(),
            "asked again after 30 s"
        );
        assert!(unserved.due(RTDS, later));
        unserved.set_aside(RTDS, Refused::Unimplemented("x".into()), later);
        assert_eq!(
            unserved.check(RTDS, later).map(|s| s.retry_in),
            Some(FIRST_RETRY * 2)
        );
        for _ in 0..20 {
            unserved.set_aside(RTDS, Refused::Unimplemented("x".into()), later);
        }
        assert_eq!(
            unserved.check(RTDS, later).map(|s| s.retry_in),
            Some(LAST_RETRY)
        );
        unserved.served(RTDS);
        assert!(unserved.check(RTDS, later).is_none() && !unserved.due(RTDS, later));
    }
}
