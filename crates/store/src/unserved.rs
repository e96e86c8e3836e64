//! The types a session's upstream does not serve, set aside so that they
//! cost the session's other types nothing.
//!
//! A control plane may not serve every type: java-control-plane has no
//! runtime service (UNIMPLEMENTED on a per-type stream), and ends a whole
//! ADS stream when asked for a type it does not know; re-sent on every
//! reconnect, one such subscription kept every type's stream failing and
//! stale. So a type the upstream refused is not subscribed again until a
//! backoff of its own has passed ([`FIRST_RETRY`], doubling to
//! [`LAST_RETRY`]) and a client asks again; its polls meanwhile get a
//! prompt error naming what the upstream said. The type's first answer
//! forgets it. The upstream does not say which type ended an ADS stream, so
//! a type is set aside only on evidence: a stream that carried it alone
//! (its own service's, or an aggregated one probing it) refused before
//! answering it.
//!
//! Names likewise: when a stream that answered a type ends with the
//! upstream's refusal while names of it still waited for their first
//! answer, those are held apart (not subscribed) and checked on streams of
//! their own (`upstream/name_check.rs`); a name refused alone is set aside,
//! with the same doubling backoff, and only polls naming it get the error.
//! No I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::SourceError;
use crate::cache::Names;
use crate::sync::lock;
use crate::xds::ResourceType;

/// How long a type is set aside the first time.
pub(super) const FIRST_RETRY: Duration = Duration::from_secs(30);
/// The longest it is set aside.
const LAST_RETRY: Duration = Duration::from_secs(600);

/// What the upstream did with a type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The type's own stream (or method) is UNIMPLEMENTED.
    #[error("the upstream does not implement it ({0})")]
    Unimplemented(String),
    /// An aggregated stream asking for it alone ended with this error
    /// before anything of it was answered.
    #[error("the upstream ended the aggregated stream that asked for it alone, before answering it ({0})")]
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

impl SetAside {
    /// Refused again after `last`: set aside twice as long as last time.
    fn again(last: Option<&SetAside>, refused: Refused, now: Instant) -> SetAside {
        let times = last.map_or(0, |s| s.times) + 1;
        SetAside {
            refused,
            since: SystemTime::now(),
            until: now + backoff(times),
            times,
        }
    }

    /// What a poll is told at `now`, while it is set aside.
    fn told(&self, now: Instant) -> Option<SetAsideNow> {
        (now < self.until).then(|| SetAsideNow {
            refused: self.refused.clone(),
            retry_in: self.until - now,
        })
    }
}

/// What a poll of a type set aside is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAsideNow {
    pub refused: Refused,
    /// In how long the upstream is asked again (if a client still asks).
    pub retry_in: Duration,
}

/// A name of a type held apart from the session's subscription.
#[derive(Debug, Clone, Default)]
struct NameApart {
    /// Being checked on a stream of its own.
    checking: bool,
    /// The last time the upstream refused it alone (kept past its time,
    /// so that the next refusal waits twice as long).
    aside: Option<SetAside>,
}

impl NameApart {
    /// Whether it is kept out of the subscription at `now`.
    fn apart(&self, now: Instant) -> bool {
        self.checking || self.aside.as_ref().is_some_and(|s| now < s.until)
    }
}

/// The most names of one type held apart; past it, names whose time is up
/// are forgotten first, then new ones are not held (they stay subscribed).
const MAX_NAMES_APART: usize = 1024;

/// The types and names one session set aside.
#[derive(Debug, Default)]
pub struct Unserved {
    types: Mutex<BTreeMap<ResourceType, SetAside>>,
    names: Mutex<BTreeMap<ResourceType, BTreeMap<String, NameApart>>>,
    /// Whether any name was ever held apart: until then (almost always)
    /// a poll's check of its names takes no lock.
    any_names: AtomicBool,
    /// Wakes the polls waiting for a first answer when a type is set aside.
    set: tokio::sync::Notify,
}

impl Unserved {
    /// Sets `kind` aside: refused again, for twice as long as last time.
    pub fn set_aside(&self, kind: ResourceType, refused: Refused, now: Instant) {
        let mut types = lock(&self.types);
        let aside = SetAside::again(types.get(&kind), refused, now);
        types.insert(kind, aside);
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
        lock(&self.types).get(&kind)?.told(now)
    }

    /// The error a poll of `names` of `kind` gets at `now` while the type,
    /// or one of the names, is set aside.
    pub(super) fn refuse(
        &self,
        kind: ResourceType,
        names: &Names,
        now: Instant,
    ) -> Result<(), SourceError> {
        if let Some(SetAsideNow { refused, retry_in }) = self.check(kind, now) {
            return Err(SourceError::Unserved {
                kind,
                refused,
                retry_in,
            });
        }
        let Some((name, SetAsideNow { refused, retry_in })) = self.check_asked(kind, names, now)
        else {
            return Ok(());
        };
        Err(SourceError::NameUnserved {
            kind,
            name,
            refused,
            retry_in,
        })
    }

    /// Whether `kind` was set aside and its time is up: the upstream may
    /// be asked again.
    pub(super) fn due(&self, kind: ResourceType, now: Instant) -> bool {
        lock(&self.types).get(&kind).is_some_and(|s| now >= s.until)
    }

    /// The upstream answered `kind`: it is served.
    pub fn served(&self, kind: ResourceType) {
        lock(&self.types).remove(&kind);
    }

    /// Holds `names` of `kind` apart while they are checked; returns those
    /// it holds (not one being checked already, nor past
    /// [`MAX_NAMES_APART`]).
    pub fn check_names(&self, kind: ResourceType, names: BTreeSet<String>) -> BTreeSet<String> {
        let mut all = lock(&self.names);
        let apart = all.entry(kind).or_default();
        if apart.len() + names.len() > MAX_NAMES_APART {
            let now = Instant::now();
            apart.retain(|_, a| a.apart(now));
        }
        let mut held = BTreeSet::new();
        for name in names {
            let entry = apart.get(&name);
            if entry.is_some_and(|a| a.checking)
                || (entry.is_none() && apart.len() >= MAX_NAMES_APART)
            {
                continue;
            }
            apart.entry(name.clone()).or_default().checking = true;
            self.any_names.store(true, Ordering::Relaxed);
            held.insert(name);
        }
        held
    }

    /// Whether one of `names` (of `kind`) is being checked alone now: what
    /// the upstream makes of it is not known yet.
    pub fn checking_any(&self, kind: ResourceType, names: &Names) -> bool {
        self.any_asked(kind, names, |a| a.checking)
    }

    /// `f` of the names of `kind` held apart, if any; no lock until a name
    /// was ever held apart.
    fn with_names<R>(
        &self,
        kind: ResourceType,
        f: impl FnOnce(&BTreeMap<String, NameApart>) -> R,
    ) -> Option<R> {
        if !self.any_names.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.names).get(&kind).map(f)
    }

    /// Whether one of `names` (of `kind`) is held apart as `holds` says.
    fn any_asked(
        &self,
        kind: ResourceType,
        names: &Names,
        holds: impl Fn(&NameApart) -> bool,
    ) -> bool {
        let Names::Named(asked) = names else {
            return false;
        };
        let any = |apart: &BTreeMap<_, _>| asked.iter().any(|n| apart.get(n).is_some_and(&holds));
        self.with_names(kind, any).unwrap_or(false)
    }

    /// The names of `kind` kept out of its subscription at `now`: being
    /// checked, or set aside.
    pub fn names_apart(&self, kind: ResourceType, now: Instant) -> BTreeSet<String> {
        let kept = |apart: &BTreeMap<String, NameApart>| {
            let kept = apart.iter().filter(|(_, a)| a.apart(now));
            kept.map(|(name, _)| name.clone()).collect()
        };
        self.with_names(kind, kept).unwrap_or_default()
    }

    /// The upstream answered `names` of `kind` (or did not refuse them):
    /// subscribed again, their record forgotten.
    pub fn names_served(&self, kind: ResourceType, names: &BTreeSet<String>) {
        let mut all = lock(&self.names);
        if let Some(apart) = all.get_mut(&kind) {
            apart.retain(|name, _| !names.contains(name));
        }
    }

    /// Sets `name` of `kind` aside: refused alone, for twice as long as
    /// last time.
    pub fn set_name_aside(&self, kind: ResourceType, name: &str, refused: Refused, now: Instant) {
        let mut all = lock(&self.names);
        self.any_names.store(true, Ordering::Relaxed);
        let entry = all
            .entry(kind)
            .or_default()
            .entry(name.to_owned())
            .or_default();
        entry.checking = false;
        entry.aside = Some(SetAside::again(entry.aside.as_ref(), refused, now));
        drop(all);
        self.set.notify_waiters();
    }

    /// The first of `names` (of `kind`) set aside at `now`, and what its
    /// polls are told.
    pub fn check_asked(
        &self,
        kind: ResourceType,
        names: &Names,
        now: Instant,
    ) -> Option<(String, SetAsideNow)> {
        let Names::Named(asked) = names else {
            return None;
        };
        self.with_names(kind, |apart| {
            asked.iter().find_map(|name| {
                let told = apart.get(name)?.aside.as_ref()?.told(now)?;
                Some((name.clone(), told))
            })
        })?
    }

    /// Whether one of `names` (of `kind`) was set aside and its time is
    /// up: the subscription holds it again, and the upstream may be asked.
    pub fn names_due(&self, kind: ResourceType, names: &Names, now: Instant) -> bool {
        self.any_asked(kind, names, |a| {
            !a.checking && a.aside.as_ref().is_some_and(|s| now >= s.until)
        })
    }

    /// Every type and name set aside now: what (a type URL, or a name of
    /// one), why and since when.
    pub(super) fn listed(&self, now: Instant) -> Vec<(String, Refused, SystemTime)> {
        let mut listed: Vec<_> = lock(&self.types)
            .iter()
            .filter(|(_, s)| now < s.until)
            .map(|(kind, s)| (kind.type_url().to_owned(), s.refused.clone(), s.since))
            .collect();
        if !self.any_names.load(Ordering::Relaxed) {
            return listed;
        }
        for (kind, apart) in lock(&self.names).iter() {
            for (name, a) in apart {
                if let Some(s) = a.aside.as_ref().filter(|s| now < s.until && !a.checking) {
                    let what = format!("{name:?} of {}", kind.type_url());
                    listed.push((what, s.refused.clone(), s.since));
                }
            }
        }
        listed
    }
}

/// How long something refused `times` times in a row is set aside.
fn backoff(times: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1 << times.saturating_sub(1).min(8))
        .min(LAST_RETRY)
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

    /// A name held apart is left out while checked; refused alone, it is
    /// set aside for a doubling while and told to polls naming it; cleared,
    /// it is forgotten.
    #[test]
    fn a_name_is_checked_then_set_aside_or_cleared() {
        const EDS: ResourceType = ResourceType::Endpoints;
        let unserved = Unserved::default();
        let t0 = Instant::now();
        let names =
            |list: &[&str]| -> BTreeSet<String> { list.iter().map(|n| (*n).to_owned()).collect() };
        let held = unserved.check_names(EDS, names(&["bad", "b"]));
        assert_eq!(held, names(&["b", "bad"]));
        assert_eq!(unserved.names_apart(EDS, t0), names(&["b", "bad"]));
        assert!(
            unserved.check_names(EDS, names(&["b"])).is_empty(),
            "checked already"
        );
        unserved.names_served(EDS, &names(&["b"]));
        let refused = Refused::EndedTheStream("PermissionDenied".into());
        unserved.set_name_aside(EDS, "bad", refused.clone(), t0);
        assert_eq!(unserved.names_apart(EDS, t0), names(&["bad"]));
        let asked = Names::Named(names(&["a", "bad"]));
        let (name, told) = unserved.check_asked(EDS, &asked, t0).expect("set aside");
        assert_eq!((name.as_str(), told.retry_in), ("bad", FIRST_RETRY));
        assert!(unserved.check_asked(EDS, &Names::Wildcard, t0).is_none());
        let later = t0 + FIRST_RETRY;
        assert!(unserved.names_apart(EDS, later).is_empty());
        assert!(unserved.names_due(EDS, &asked, later));
        // Refused again: twice as long.
        assert_eq!(unserved.check_names(EDS, names(&["bad"])), names(&["bad"]));
        unserved.set_name_aside(EDS, "bad", refused, later);
        let (_, told) = unserved.check_asked(EDS, &asked, later).expect("set aside");
        assert_eq!(told.retry_in, FIRST_RETRY * 2);
    }
}
