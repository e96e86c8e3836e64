//! Who a REST client is, once: the one key every ledger of what was served
//! to whom keeps its clients under (the client book, `observe/clients.rs`,
//! and what `?changes` asks). The session a client shares with others is
//! another thing, its [`IdentityKey`](super::IdentityKey).
//!
//! A client is its node as it presents it (session identity, node id,
//! cluster, user agent name, and whether a GET's query made the request: a
//! script reading an Envoy's node is not that Envoy) and the address it polls
//! from (pods of one Deployment share a node id). The node's part is a
//! SHA-256 of length-prefixed fields: no client can choose a node whose key
//! collides with another's, so none can reset another's run of rejecting
//! polls or recall the versions it was served.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use sha2::{Digest, Sha256};

use super::identity::IdentityKey;
use super::state::Names;

/// A node as a client presents it: a digest of what tells clients apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientNode([u8; 32]);

/// Hashed as 8 of its 32 bytes (the client book looks a client up twice a
/// poll). A SHA-256 digest's bytes are evenly spread and no client can choose
/// them, and the maps that hold it key their hashers (std's SipHash, moka's),
/// so 8 bytes spread keys as well as 32. `Eq` still compares all 32.
impl Hash for ClientNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        state.write_u64(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
    }
}

impl ClientNode {
    /// The digest of these fields, each length-prefixed (injective before
    /// hashing: a field's bytes cannot pose as the next field).
    pub fn of(
        identity: &IdentityKey,
        node_id: &str,
        cluster: &str,
        user_agent: &str,
        via_get: bool,
    ) -> ClientNode {
        let mut hasher = Sha256::new();
        for field in [identity.as_str(), node_id, cluster, user_agent] {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field.as_bytes());
        }
        hasher.update([u8::from(via_get)]);
        ClientNode(hasher.finalize().into())
    }
}

/// One REST client: its node and the address it polls from (if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey {
    node: ClientNode,
    remote: Option<IpAddr>,
}

impl ClientKey {
    pub fn new(node: ClientNode, remote: Option<IpAddr>) -> ClientKey {
        ClientKey { node, remote }
    }

    /// This client's subscription to the names hashed (`names_hash`) as `names`.
    pub fn subscribing(self, names: u64) -> SubscriptionKey {
        SubscriptionKey {
            client: self,
            names,
        }
    }
}

/// One client's subscription to a set of names: what rejection bookkeeping
/// and the client book count under. Names are hashed (64 bits): only a
/// client's own subscriptions could collide, which gains it nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionKey {
    client: ClientKey,
    names: u64,
}

/// The hash a [`SubscriptionKey`] holds of its names (made once per parse).
pub(crate) fn names_hash(names: &Names) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::default();
    names.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionKey;

    fn node(id: &str, cluster: &str, user_agent: &str, via_get: bool) -> ClientNode {
        let identity = IdentityKey::of(None, SessionKey::Node);
        ClientNode::of(&identity, id, cluster, user_agent, via_get)
    }

    #[test]
    fn every_field_tells_clients_apart() {
        let base = node("n", "c", "envoy", false);
        assert_eq!(base, node("n", "c", "envoy", false));
        for other in [
            node("m", "c", "envoy", false),
            node("n", "d", "envoy", false),
            node("n", "c", "curl", false),
            node("n", "c", "envoy", true),
            // A field's bytes cannot pose as the next field.
            node("nc", "", "envoy", false),
        ] {
            assert_ne!(base, other);
        }
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        let at = |remote| ClientKey::new(base, remote);
        assert_ne!(at(ip("127.0.0.1")), at(ip("127.0.0.2")));
        assert_ne!(at(ip("127.0.0.1")), at(None));
        let names = Names::from_request(vec!["a".into()]);
        let again = Names::from_request(vec!["a".into()]);
        let subscribing = |names| at(None).subscribing(names_hash(names));
        assert_eq!(subscribing(&names), subscribing(&again));
        assert_ne!(subscribing(&names), subscribing(&Names::Wildcard));
    }
}
