//! The types one upstream serves: the four an Envoy cannot run without
//! (listeners, routes, clusters, endpoints: [`PRESUMED`]), which every ADS
//! server serves, and every other type once it answered it on any
//! session's stream. A type it answered for one node is one its aggregated
//! method knows, so a session may put it on the stream its other types
//! share; a type not seen yet is first asked on a stream of its own
//! (`lanes.rs`), since a control plane may end a whole ADS stream asked for
//! a type it lacks or will not give the gateway. Never forgotten. No I/O.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::xds::{ResourceType, MAX_TYPES};

/// The types taken as served before any answer: an ADS server that did
/// not serve them would serve no Envoy.
const PRESUMED: [ResourceType; 4] = [
    ResourceType::Listeners,
    ResourceType::Routes,
    ResourceType::Clusters,
    ResourceType::Endpoints,
];

/// Per type (by [`ResourceType::index`]), whether the upstream answered it.
#[derive(Debug)]
pub(crate) struct ServedTypes {
    seen: Box<[AtomicBool]>,
}

impl Default for ServedTypes {
    fn default() -> ServedTypes {
        ServedTypes {
            seen: (0..MAX_TYPES).map(|_| AtomicBool::new(false)).collect(),
        }
    }
}

impl ServedTypes {
    /// The upstream answered `kind`.
    pub(crate) fn saw(&self, kind: ResourceType) {
        if let Some(seen) = self.seen.get(kind.index()) {
            seen.store(true, Ordering::Release);
        }
    }

    /// Whether the upstream serves `kind`: one of the [`PRESUMED`], or
    /// answered.
    pub(crate) fn serves(&self, kind: ResourceType) -> bool {
        PRESUMED.contains(&kind)
            || self
                .seen
                .get(kind.index())
                .is_some_and(|seen| seen.load(Ordering::Acquire))
    }

    /// Whether it has answered any type: its aggregated method works for
    /// the gateway.
    pub(crate) fn any(&self) -> bool {
        self.seen.iter().any(|seen| seen.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_is_served_once_answered_and_stays_so() {
        let served = ServedTypes::default();
        assert!(!served.any() && !served.serves(ResourceType::Runtime));
        assert!(served.serves(ResourceType::Endpoints), "presumed");
        served.saw(ResourceType::Clusters);
        assert!(served.any() && served.serves(ResourceType::Clusters));
        assert!(!served.serves(ResourceType::Runtime));
        served.saw(ResourceType::Runtime);
        assert!(served.serves(ResourceType::Runtime));
    }
}
