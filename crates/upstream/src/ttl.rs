//! Per-resource TTLs from the upstream (`envoy.service.discovery.v3.Resource.ttl`,
//! in SotW wrappers and delta resources alike): when each held resource runs
//! out unless refreshed, and which ran out by a given time.
//!
//! The rules are Envoy's gRPC client's (`TtlManager`): a resource sent with a
//! TTL expires that long after it (or a heartbeat for it) arrived; sent
//! without one, it never expires; an expired resource is dropped as if the
//! upstream had removed it. REST-polling Envoys have no TTL handling of their
//! own (`HttpSubscriptionImpl` ignores `ttl`), so the gateway drops expired
//! resources from what it serves. Only bookkeeping here: dropping and
//! republishing is the protocol's.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::xds::ResourceType;

/// The longest TTL taken as given (a century); longer ones are clamped, so
/// no deadline overflows.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When each resource with a TTL expires, per type.
#[derive(Debug, Default)]
pub(super) struct Expiries {
    due: BTreeMap<ResourceType, BTreeMap<String, Instant>>,
}

impl Expiries {
    /// `name` of `kind` arrived (or was refreshed) at `now` with `ttl`:
    /// it expires then, or never without one.
    pub(super) fn arrived(
        &mut self,
        kind: ResourceType,
        name: &str,
        ttl: Option<Duration>,
        now: Instant,
    ) {
        match ttl {
            Some(ttl) => {
                let due = self.due.entry(kind).or_default();
                due.insert(name.to_owned(), now + ttl.min(MAX_TTL));
            }
            None => self.forget(kind, name),
        }
    }

    /// `name` of `kind` is gone (removed upstream, or nobody wants it).
    pub(super) fn forget(&mut self, kind: ResourceType, name: &str) {
        if let Some(names) = self.due.get_mut(&kind) {
            names.remove(name);
        }
    }

    /// Whether any resource of `kind` has a deadline (if not, and an answer
    /// brings no TTL, there is nothing to do for it).
    pub(super) fn tracks(&self, kind: ResourceType) -> bool {
        self.due.get(&kind).is_some_and(|names| !names.is_empty())
    }

    /// Forgets every resource of `kind` that `keep` does not hold.
    pub(super) fn retain(&mut self, kind: ResourceType, keep: impl Fn(&str) -> bool) {
        if let Some(names) = self.due.get_mut(&kind) {
            names.retain(|name, _| keep(name));
        }
    }

    /// The next deadline, if any resource has a TTL.
    pub(super) fn next(&self) -> Option<Instant> {
        self.due
            .values()
            .flat_map(|names| names.values())
            .min()
            .copied()
    }

    /// Takes every resource whose deadline is `now` or earlier, by type.
    pub(super) fn expire(&mut self, now: Instant) -> BTreeMap<ResourceType, Vec<String>> {
        let mut expired = BTreeMap::new();
        for (kind, names) in &mut self.due {
            let mut gone = Vec::new();
            names.retain(|name, deadline| {
                let due = *deadline <= now;
                if due {
                    gone.push(name.clone());
                }
                !due
            });
            if !gone.is_empty() {
                expired.insert(*kind, gone);
            }
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDS: ResourceType = ResourceType::Clusters;

    #[test]
    fn expires_unless_refreshed_and_never_without_a_ttl() {
        let t0 = Instant::now();
        let mut e = Expiries::default();
        e.arrived(CDS, "a", Some(Duration::from_secs(2)), t0);
        e.arrived(CDS, "b", Some(Duration::from_secs(5)), t0);
        e.arrived(CDS, "c", None, t0);
        assert_eq!(e.next(), Some(t0 + Duration::from_secs(2)));
        // A heartbeat for `a` at 1s moves its deadline to 3s.
        e.arrived(
            CDS,
            "a",
            Some(Duration::from_secs(2)),
            t0 + Duration::from_secs(1),
        );
        assert!(e.expire(t0 + Duration::from_secs(2)).is_empty());
        let at3 = e.expire(t0 + Duration::from_secs(3));
        assert_eq!(at3[&CDS], ["a"]);
        // Sent again without a TTL: `b` no longer expires.
        e.arrived(CDS, "b", None, t0 + Duration::from_secs(4));
        assert_eq!(e.next(), None);
        assert!(e.expire(t0 + Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn forgotten_resources_do_not_expire_and_huge_ttls_do_not_overflow() {
        let t0 = Instant::now();
        let mut e = Expiries::default();
        e.arrived(CDS, "a", Some(Duration::from_secs(1)), t0);
        e.arrived(CDS, "b", Some(Duration::from_secs(1)), t0);
        e.arrived(CDS, "huge", Some(Duration::MAX), t0);
        e.retain(CDS, |name| name != "a");
        e.forget(CDS, "b");
        assert!(e.expire(t0 + Duration::from_secs(10)).is_empty());
        assert!(e.next().is_some());
    }
}
