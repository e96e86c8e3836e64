//! Open connections per source address: one address
//! may hold at most `max_per_source` of a listener's connections, so a
//! client without any credential cannot hold every slot while a client
//! with one is refused. Trusted proxies are exempt (their clients share
//! their address). A [`FromSource`] counts one connection until dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::ServeLimits;

/// The open connections of each source address.
#[derive(Debug, Default, Clone)]
pub(super) struct Sources {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a source (counted until dropped).
#[derive(Debug)]
pub(super) struct FromSource {
    sources: Sources,
    ip: Option<IpAddr>,
}

impl Sources {
    /// Counts a connection from `ip`, or `None` if its address already
    /// holds its share.
    pub(super) fn admit(&self, ip: IpAddr, limits: &ServeLimits) -> Option<FromSource> {
        let ip = ip.to_canonical();
        let exempt = limits
            .exempt_sources
            .as_ref()
            .is_some_and(|t| t.contains(ip));
        let max = limits.max_per_source.filter(|_| !exempt);
        if let Some(max) = max {
            let mut open = crate::sync::lock(&self.open);
            let count = open.entry(ip).or_default();
            if *count >= max {
                return None;
            }
            *count += 1;
        }
        Some(FromSource {
            sources: self.clone(),
            // Counted only under a cap.
            ip: max.map(|_| ip),
        })
    }
}

impl Drop for FromSource {
    fn drop(&mut self) {
        let Some(ip) = self.ip else {
            return;
        };
        let mut open = crate::sync::lock(&self.sources.open);
        if let Some(count) = open.get_mut(&ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn open_from(sources: &Sources, ip: IpAddr) -> usize {
        crate::sync::lock(&sources.open)
            .get(&ip)
            .copied()
            .unwrap_or(0)
    }

    fn limits(max: Option<usize>, exempt: &[&str]) -> ServeLimits {
        let raw: Vec<String> = exempt.iter().map(|s| s.to_string()).collect();
        ServeLimits {
            max_connections: 100,
            header_read_timeout: Duration::from_secs(1),
            keep_alive_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(1),
            max_streams_per_connection: 1,
            write_stall_timeout: Duration::from_secs(1),
            max_per_source: max,
            exempt_sources: (!raw.is_empty())
                .then(|| crate::config::TrustedProxies::parse(&raw).unwrap()),
        }
    }

    #[test]
    fn one_address_holds_at_most_its_share_until_it_closes() {
        let sources = Sources::default();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let l = limits(Some(2), &["10.0.0.0/8"]);
        let first = sources.admit(a, &l).unwrap();
        let _second = sources.admit(a, &l).unwrap();
        assert!(sources.admit(a, &l).is_none());
        assert!(
            sources.admit(b, &l).is_some(),
            "another address has its own"
        );
        drop(first);
        assert_eq!(open_from(&sources, a), 1);
        assert!(sources.admit(a, &l).is_some());
        // A trusted proxy is exempt; no cap admits all.
        let proxy: IpAddr = "10.0.0.5".parse().unwrap();
        let held: Vec<_> = (0..10).map(|_| sources.admit(proxy, &l).unwrap()).collect();
        assert_eq!(open_from(&sources, proxy), 0);
        drop(held);
        assert!((0..10).all(|_| sources.admit(a, &limits(None, &[])).is_some()));
    }
}
