//! The node a session sends upstream, held as protobuf bytes, with its
//! `extensions` (most of an Envoy node: 516 of them, ~77 KB of JSON, in
//! Envoy 1.40) interned: every node identity of a fleet runs the same Envoy
//! build, so the sessions of 1,000 identities hold one copy of the list,
//! not 1,000 decoded ones. The rest of the node (id, cluster, metadata,
//! locality, build version) is the session's own.
//!
//! Protobuf lets a message be encoded in parts: the encoding of the node
//! without its extensions followed by the encoding of the extensions alone
//! decodes to the node (a repeated field's elements append in order), so
//! the node is rebuilt on demand, once per upstream stream, from the two.
//!
//! The interner holds its lists weakly: a list lives while a session holds
//! it, and dead entries are swept as the map grows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use sha2::{Digest as _, Sha256};

use super::view::SentNodeView;

/// A session's node: its own fields, encoded, and its shared extension list.
#[derive(Debug, Clone)]
pub(crate) struct SessionNode {
    pub(crate) id: String,
    pub(crate) cluster: String,
    /// The node without its extensions, encoded.
    own: Bytes,
    /// Its `extensions` field alone, encoded; shared by every node sending
    /// the same list.
    extensions: Arc<Bytes>,
    /// How many extensions that list holds.
    extension_count: usize,
}

impl SessionNode {
    /// The node as sent upstream. Decodes what was encoded from a valid
    /// node, so it cannot fail; an empty node if it ever did.
    pub(crate) fn node(&self) -> Node {
        let mut bytes = Vec::with_capacity(self.own.len() + self.extensions.len());
        bytes.extend_from_slice(&self.own);
        bytes.extend_from_slice(&self.extensions);
        Node::decode(bytes.as_slice()).unwrap_or_default()
    }

    /// What the upstream is told of the client beyond the session key:
    /// the fields of the node that opened the session (issue 38, finding
    /// 12). Decodes the node's own bytes, not its extension list.
    pub(crate) fn sent_view(&self) -> SentNodeView {
        let node = Node::decode(self.own.as_ref()).unwrap_or_default();
        SentNodeView {
            user_agent_name: node.user_agent_name,
            user_agent_version: node
                .user_agent_version_type
                .map(|version| match version {
                    UserAgentVersionType::UserAgentVersion(version) => version,
                    UserAgentVersionType::UserAgentBuildVersion(build) => {
                        let v = build.version.unwrap_or_default();
                        format!("{}.{}.{}", v.major_number, v.minor_number, v.patch)
                    }
                })
                .unwrap_or_default(),
            client_features: node.client_features,
            extensions: self.extension_count,
        }
    }

    /// Bytes it holds of its own (the shared list not counted).
    #[cfg(test)]
    pub(crate) fn own_bytes(&self) -> usize {
        self.own.len()
    }

    /// Whether two nodes share one extension list.
    #[cfg(test)]
    pub(crate) fn shares_extensions_with(&self, other: &SessionNode) -> bool {
        Arc::ptr_eq(&self.extensions, &other.extensions)
    }
}

impl From<Node> for SessionNode {
    /// A node holding its extension list alone (shared with no other).
    fn from(node: Node) -> SessionNode {
        NodeInterner::default().intern(node)
    }
}

impl Default for SessionNode {
    fn default() -> SessionNode {
        SessionNode::from(Node::default())
    }
}

/// The extension lists sessions hold, by SHA-256 of their encoding.
#[derive(Debug, Default)]
pub(crate) struct NodeInterner {
    lists: Mutex<Lists>,
}

#[derive(Debug, Default)]
struct Lists {
    by_digest: HashMap<[u8; 32], Weak<Bytes>>,
    /// Size of the map after the last sweep of dead entries.
    swept_at: usize,
}

impl NodeInterner {
    /// `node` as a session holds it: its extension list taken from a
    /// session that holds the same one, if any.
    pub(crate) fn intern(&self, mut node: Node) -> SessionNode {
        let extension_count = node.extensions.len();
        let extensions = Node {
            extensions: std::mem::take(&mut node.extensions),
            ..Node::default()
        }
        .encode_to_vec();
        let digest: [u8; 32] = Sha256::digest(&extensions).into();
        let extensions = {
            let mut lists = crate::sync::lock(&self.lists);
            match lists.by_digest.get(&digest).and_then(Weak::upgrade) {
                Some(held) => held,
                None => {
                    let list = Arc::new(Bytes::from(extensions));
                    lists.by_digest.insert(digest, Arc::downgrade(&list));
                    lists.sweep();
                    list
                }
            }
        };
        SessionNode {
            own: Bytes::from(node.encode_to_vec()),
            id: node.id,
            cluster: node.cluster,
            extensions,
            extension_count,
        }
    }

    /// Lists held now (dead entries swept first).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let mut lists = crate::sync::lock(&self.lists);
        lists.by_digest.retain(|_, list| list.strong_count() > 0);
        lists.by_digest.len()
    }
}

impl Lists {
    /// Drops dead entries once the map has doubled since the last sweep,
    /// so it stays within twice the lists alive (amortised O(1)).
    fn sweep(&mut self) {
        if self.by_digest.len() >= 2 * self.swept_at.max(8) {
            self.by_digest.retain(|_, list| list.strong_count() > 0);
            self.swept_at = self.by_digest.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Extension;

    fn node(id: &str, extensions: usize) -> Node {
        Node {
            id: id.into(),
            cluster: "c".into(),
            user_agent_name: "envoy".into(),
            extensions: (0..extensions)
                .map(|i| Extension {
                    name: format!("envoy.ext.{i}"),
                    category: "envoy.filters".into(),
                    type_urls: vec![format!("type.googleapis.com/ext.{i}")],
                    ..Extension::default()
                })
                .collect(),
            ..Node::default()
        }
    }

    #[test]
    fn identities_share_one_extension_list_and_get_their_node_back() {
        let interner = NodeInterner::default();
        let a = interner.intern(node("a", 500));
        let b = interner.intern(node("b", 500));
        assert!(a.shares_extensions_with(&b));
        assert_eq!(a.node(), node("a", 500));
        assert_eq!(b.node(), node("b", 500));
        assert_eq!((a.id.as_str(), a.cluster.as_str()), ("a", "c"));
        assert!(a.own_bytes() < 64, "{}", a.own_bytes());
        // Another list is another entry.
        let c = interner.intern(node("c", 3));
        assert!(!c.shares_extensions_with(&a));
        assert_eq!(c.node(), node("c", 3));
        assert_eq!(interner.held(), 2);
        // A list no session holds is dropped.
        drop(c);
        assert_eq!(interner.held(), 1);
    }

    #[test]
    fn the_map_is_swept_of_lists_no_session_holds() {
        let interner = NodeInterner::default();
        let kept = interner.intern(node("kept", 1));
        for i in 0..1000 {
            drop(interner.intern(node("n", i % 300 + 2)));
        }
        let lists = interner.lists.lock().unwrap();
        assert!(lists.by_digest.len() <= 16, "{}", lists.by_digest.len());
        drop(lists);
        assert_eq!(kept.node(), node("kept", 1));
    }
}
