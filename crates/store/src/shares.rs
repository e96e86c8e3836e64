//! Per-principal shares of the global limits (`--principal-share`): of
//! `--max-sessions`, `--max-watches`, `--max-long-polls` and (weighed in
//! bytes) `--max-session-bytes`, one principal of the
//! auth policy may hold at most its share, so one tenant cannot fill a
//! limit and starve every other.
//!
//! Only principals are counted: without a policy there are none, and a
//! policy of a single principal has nobody to starve, so neither is limited
//! beyond the global limits ([`Tenant::of`]). A place is counted against the
//! principal whose request took it, until it is given back (the [`SharePlace`]
//! guard drops): a session, shared by every client of its node identity
//! (fan-in), counts against the principal whose request opened it until it
//! closes. Counting only: refusing with a status is `http`'s business.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Whose share a place counts against: a principal of a policy with more
/// than one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The tenant of a request by `principal` under a policy of `principals`
    /// principals; `None` when no share applies to it.
    pub fn of(principal: Option<&str>, principals: usize) -> Option<Tenant> {
        principal
            .filter(|_| principals > 1)
            .map(|name| Tenant(name.into()))
    }

    pub fn name(&self) -> &str {
        &self.0
    }
}

/// One principal over its share of one limit.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "principal {principal:?} already holds {cap} of the {max} {what} this gateway allows \
     (--{limit}); one principal may hold at most {percent}% of them (--principal-share), \
     so that others are still served; try again when one of its own ends"
)]
pub struct OverShare {
    pub principal: String,
    /// The flag of the limit, e.g. `max-sessions`.
    pub limit: &'static str,
    /// What the limit counts, e.g. `sessions`.
    pub what: &'static str,
    pub cap: usize,
    pub max: usize,
    pub percent: u8,
}

/// What each principal holds of one limit, and its cap.
#[derive(Debug)]
pub struct Share {
    limit: &'static str,
    what: &'static str,
    max: usize,
    percent: u8,
    /// `max * percent / 100`, at least 1.
    cap: usize,
    held: Arc<Mutex<HashMap<Arc<str>, usize>>>,
}

/// A place held by a principal: given back when dropped.
#[derive(Debug)]
pub struct SharePlace {
    held: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    principal: Arc<str>,
    /// What it weighs: 1 place, or its bytes.
    amount: usize,
}

impl Drop for SharePlace {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if let Some(count) = held.get_mut(&self.principal) {
            *count = count.saturating_sub(self.amount);
            if *count == 0 {
                held.remove(&self.principal);
            }
        }
    }
}

impl Share {
    /// A share of `percent`% of the limit `--{limit}` of `max` `what`.
    pub fn new(limit: &'static str, what: &'static str, max: usize, percent: u8) -> Share {
        let cap = (max.saturating_mul(usize::from(percent)) / 100).max(1);
        Share {
            limit,
            what,
            max,
            percent,
            cap,
            held: Arc::default(),
        }
    }

    /// Whether `tenant` may take one more place now (without taking it).
    pub fn check(&self, tenant: Option<&Tenant>) -> Result<(), OverShare> {
        self.check_weighing(tenant, 1)
    }

    /// Takes one place for `tenant` (nothing to take without a tenant), or
    /// says it holds its share already.
    pub fn take(&self, tenant: Option<&Tenant>) -> Result<Option<SharePlace>, OverShare> {
        self.take_weighing(tenant, 1)
    }

    /// Whether `tenant` may take `amount` more (bytes) now.
    pub fn check_weighing(&self, tenant: Option<&Tenant>, amount: usize) -> Result<(), OverShare> {
        match tenant {
            Some(tenant) if self.held_by(tenant.name()).saturating_add(amount) > self.cap => {
                Err(self.over(tenant))
            }
            _ => Ok(()),
        }
    }

    /// Takes `amount` (1 place, or bytes) for `tenant`, or says it would
    /// hold more than its share.
    pub fn take_weighing(
        &self,
        tenant: Option<&Tenant>,
        amount: usize,
    ) -> Result<Option<SharePlace>, OverShare> {
        let Some(tenant) = tenant else {
            return Ok(None);
        };
        let mut held = lock(&self.held);
        let count = held.entry(tenant.0.clone()).or_default();
        if count.saturating_add(amount) > self.cap {
            return Err(self.over(tenant));
        }
        *count += amount;
        Ok(Some(SharePlace {
            held: self.held.clone(),
            principal: tenant.0.clone(),
            amount,
        }))
    }

    /// Places `principal` holds now.
    pub fn held_by(&self, principal: &str) -> usize {
        lock(&self.held).get(principal).copied().unwrap_or(0)
    }

    fn over(&self, tenant: &Tenant) -> OverShare {
        OverShare {
            principal: tenant.name().to_owned(),
            limit: self.limit,
            what: self.what,
            cap: self.cap,
            max: self.max,
            percent: self.percent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_its_share_and_gets_places_back() {
        let share = Share::new("max-sessions", "sessions", 10, 50);
        let a = Tenant::of(Some("a"), 2);
        let b = Tenant::of(Some("b"), 2);
        let taken: Vec<_> = (0..5).map(|_| share.take(a.as_ref()).unwrap()).collect();
        let over = share.take(a.as_ref()).unwrap_err();
        assert_eq!((over.principal.as_str(), over.cap), ("a", 5));
        assert!(over.to_string().contains("--max-sessions"), "{over}");
        assert!(share.check(a.as_ref()).is_err());
        assert!(
            share.take(b.as_ref()).unwrap().is_some(),
            "b has its own share"
        );
        drop(taken);
        assert_eq!(share.held_by("a"), 0);
        assert!(share.take(a.as_ref()).unwrap().is_some());
    }

    /// A share weighed in bytes.
    #[test]
    fn a_share_in_bytes_holds_what_fits() {
        let share = Share::new("max-session-bytes", "bytes of nodes", 1000, 50);
        let a = Tenant::of(Some("a"), 2);
        let first = share.take_weighing(a.as_ref(), 300).unwrap();
        let _second = share.take_weighing(a.as_ref(), 200).unwrap();
        assert!(share.check_weighing(a.as_ref(), 1).is_err());
        assert!(share.take_weighing(a.as_ref(), 1).is_err());
        drop(first);
        assert_eq!(share.held_by("a"), 200);
        assert!(share.take_weighing(a.as_ref(), 300).unwrap().is_some());
    }

    #[test]
    fn no_share_without_principals_to_starve() {
        assert_eq!(Tenant::of(Some("only"), 1), None);
        assert_eq!(Tenant::of(None, 3), None);
        let share = Share::new("max-watches", "watches", 1, 50);
        for _ in 0..3 {
            assert!(share.take(None).unwrap().is_none());
        }
        // A share never rounds down to nothing.
        let tenant = Tenant::of(Some("a"), 2);
        let _one = share.take(tenant.as_ref()).unwrap();
        assert!(share.take(tenant.as_ref()).is_err());
    }
}
