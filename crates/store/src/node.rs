//! The node a session sends upstream, held as protobuf bytes, with its
//! `extensions` (most of an Envoy node: 516 of them, ~77 KB of JSON, in
//! Envoy 1.40) interned: every node identity of a fleet runs the same Envoy
//! build, so the sessions of 1,000 identities hold one copy of the list,
//! not 1,000 decoded ones. The rest of the node (id, cluster, metadata,
//! locality, build version) is the session's own.
//!
//! Prost writes a message's fields in tag order, and protobuf lets a message
//! be encoded in parts: the node's fields before `extensions` (tag 9), the
//! extensions, then its fields after them (tags 10-12) are the node's
//! encoding. The session holds its own fields as those two parts
//! ([`NodeBytes`]), and every request upstream that carries the node (by
//! default each one, as Envoy sends it) writes the three parts into its
//! frame as they are (`crate::upstream::outbound`): nothing decoded or
//! re-encoded per request. The interner holds its lists weakly: a list lives
//! while a session holds it, and dead entries are swept as the map grows.
//!
//! What is sent is bounded: the session key's fields (id, cluster, metadata,
//! locality, dynamic parameters, within `--max-node-bytes`) and the user
//! agent go as they came, the rest (client features, listening addresses,
//! extensions, in that order) only while it fits in [`REMAINDER_BYTES`]: a
//! field that does not fit is left out whole, and the view says which.
//! Envoy's own node (~77 KB of extensions) fits; a megabyte of client
//! features, which every request upstream would carry again, does not.
//!
//! The gateway, the upstream's real client, takes `Resource` wrappers in
//! SotW and TTLs whatever its REST clients do, so the node's
//! `client_features` declare [`GATEWAY_FEATURES`], drop every other
//! `xds.config.*` (transport) feature, and pass the REST client's others
//! (about the config it is sent: Envoy's
//! `envoy.lb.does_not_support_overprovisioning`, say) as they came.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use sha2::{Digest as _, Sha256};

use super::view::SentNodeView;
use super::SourceError;
use crate::cache::Intake;
use crate::xds::dynamic_parameters::Parameters;

/// The transport features the gateway handles itself, declared upstream
/// whatever the REST client sent.
pub const GATEWAY_FEATURES: [&str; 2] = [
    "xds.config.supports-resource-in-sotw",
    "xds.config.supports-resource-ttl",
];

/// The most bytes of the node beyond the session key and the user agent
/// sent upstream (see the module docs).
pub const REMAINDER_BYTES: usize = 128 * 1024;

/// The prefix of the client features about the transport.
const TRANSPORT_FEATURES: &str = "xds.config.";

/// The client features sent upstream for a REST client's `features`: its
/// own about the config, and the gateway's about the transport.
pub fn upstream_features(features: Vec<String>) -> Vec<String> {
    let mut features: Vec<String> = features
        .into_iter()
        .filter(|f| !f.starts_with(TRANSPORT_FEATURES))
        .chain(GATEWAY_FEATURES.map(str::to_owned))
        .collect();
    features.sort();
    features.dedup();
    features
}

/// A session's node: its own fields, encoded, and its shared extension list.
#[derive(Debug, Clone)]
pub struct SessionNode {
    pub id: String,
    pub cluster: String,
    /// The node as encoded, in parts.
    bytes: NodeBytes,
    /// How many extensions that list holds.
    extension_count: usize,
    /// The fields left out to keep within [`REMAINDER_BYTES`].
    left_out: Vec<&'static str>,
    /// The dynamic parameters every subscription of the session carries
    /// upstream (its clients' `resource_locators`, xDS TP2), which choose
    /// the variants it keeps; part of the session key, like the node's
    /// fields. Empty for clients that subscribe by names.
    parameters: Arc<Parameters>,
}

/// A node's encoding in parts: the node's own fields before `extensions`,
/// its `extensions` field, its own fields after it. In that order they are
/// what prost writes for the node; cloned with two reference counts.
#[derive(Debug, Clone)]
pub struct NodeBytes {
    /// The node without its extensions, encoded: its fields before
    /// `extensions`, then (from `split`) those after.
    own: Bytes,
    /// Where the fields after `extensions` begin in `own`.
    split: usize,
    /// Its `extensions` field alone, encoded; shared by every node sending
    /// the same list.
    extensions: Arc<Bytes>,
}

impl NodeBytes {
    /// The node's encoding, as the three slices to write in order.
    pub fn parts(&self) -> [&[u8]; 3] {
        let (before, after) = self.own.split_at(self.split);
        [before, self.extensions.as_ref(), after]
    }

    pub fn len(&self) -> usize {
        self.own.len() + self.extensions.len()
    }

    /// Whether the node's encoding is empty (a node with no field set).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SessionNode {
    /// This node, its session's subscriptions carrying `parameters`.
    pub fn with_parameters(self, parameters: Arc<Parameters>) -> SessionNode {
        SessionNode { parameters, ..self }
    }

    /// The dynamic parameters the session's subscriptions carry (empty:
    /// subscriptions by name).
    pub fn parameters(&self) -> &Arc<Parameters> {
        &self.parameters
    }

    /// The node's encoding, for a request upstream to carry.
    pub fn bytes(&self) -> NodeBytes {
        self.bytes.clone()
    }

    /// The node as sent upstream. Decodes what was encoded from a valid
    /// node, so it cannot fail; an empty node if it ever did.
    #[cfg(any(test, feature = "test-support"))]
    pub fn node(&self) -> Node {
        let mut bytes = Vec::with_capacity(self.bytes.len());
        for part in self.bytes.parts() {
            bytes.extend_from_slice(part);
        }
        Node::decode(bytes.as_slice()).unwrap_or_default()
    }

    /// What the upstream is told of the client beyond the session key: the
    /// fields of the node that opened the session. Decodes the node's own
    /// bytes, not its extension list.
    pub fn sent_view(&self) -> SentNodeView {
        let node = Node::decode(self.bytes.own.as_ref()).unwrap_or_default();
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
            left_out: self.left_out.iter().map(|f| (*f).to_owned()).collect(),
        }
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
pub struct NodeInterner {
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
    pub fn intern(&self, mut node: Node) -> SessionNode {
        let mut left_out = Vec::new();
        let mut room = REMAINDER_BYTES;
        // Whether a field of `len` encoded bytes still fits (then counted).
        let mut fits = |len: usize, field: &'static str| {
            let fits = len <= room;
            if fits {
                room -= len;
            } else {
                left_out.push(field);
            }
            fits
        };
        let mut features = Node {
            client_features: upstream_features(std::mem::take(&mut node.client_features)),
            ..Node::default()
        };
        if !fits(features.encoded_len(), "client_features") {
            features.client_features = upstream_features(Vec::new());
        }
        // Part of the session key: sent as it came, like the key's other
        // fields (within --max-node-bytes).
        let dynamic_parameters = std::mem::take(&mut node.dynamic_parameters);
        #[allow(deprecated)]
        let mut listening = Node {
            listening_addresses: std::mem::take(&mut node.listening_addresses),
            ..Node::default()
        };
        #[allow(deprecated)]
        if !fits(listening.encoded_len(), "listening_addresses") {
            listening.listening_addresses.clear();
        }
        let mut extensions = Node {
            extensions: std::mem::take(&mut node.extensions),
            ..Node::default()
        };
        if !fits(extensions.encoded_len(), "extensions") {
            extensions.extensions.clear();
        }
        let extension_count = extensions.extensions.len();
        let extensions = extensions.encode_to_vec();
        let digest: [u8; 32] = Sha256::digest(&extensions).into();
        let extensions = {
            let mut lists = crate::sync::lock(&self.lists);
            match lists.by_digest.get(&digest).and_then(Weak::upgrade) {
                Some(held) => held,
                None => {
                    let list = Arc::new(Bytes::from(extensions));
                    lists.by_digest.insert(digest, Arc::downgrade(&list));
                    // Dead entries go once the map has doubled since the
                    // last sweep: it stays within twice the lists alive
                    // (amortised O(1)).
                    if lists.by_digest.len() >= 2 * lists.swept_at.max(8) {
                        lists.by_digest.retain(|_, list| list.strong_count() > 0);
                        lists.swept_at = lists.by_digest.len();
                    }
                    list
                }
            }
        };
        // The fields prost writes after `extensions` (tags 10, 11, 12);
        // `listening_addresses` is deprecated, and still sent when set.
        #[allow(deprecated)]
        let after = Node {
            client_features: features.client_features,
            listening_addresses: listening.listening_addresses,
            dynamic_parameters,
            ..Node::default()
        };
        let mut own = node.encode_to_vec();
        let split = own.len();
        own.extend_from_slice(&after.encode_to_vec());
        SessionNode {
            bytes: NodeBytes {
                own: Bytes::from(own),
                split,
                extensions,
            },
            id: node.id,
            cluster: node.cluster,
            extension_count,
            left_out,
            parameters: Arc::default(),
        }
    }
}

/// A request's `node` JSON as a protobuf `Node` (empty if absent).
pub fn decode_node(intake: &Intake, node: Option<&[u8]>) -> Result<Node, SourceError> {
    let Some(raw) = node else {
        return Ok(Node::default());
    };
    intake
        .codec()
        .parse_prost("envoy.config.core.v3.Node", raw, true)
        .map_err(|e| SourceError::InvalidNode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SessionNode {
        /// Bytes it holds of its own (the shared list not counted).
        fn own_bytes(&self) -> usize {
            self.bytes.own.len()
        }

        /// Whether two nodes share one extension list.
        fn shares_extensions_with(&self, other: &SessionNode) -> bool {
            Arc::ptr_eq(&self.bytes.extensions, &other.bytes.extensions)
        }
    }

    impl NodeInterner {
        /// Lists held now (dead entries swept first).
        fn held(&self) -> usize {
            let mut lists = crate::sync::lock(&self.lists);
            lists.by_digest.retain(|_, list| list.strong_count() > 0);
            lists.by_digest.len()
        }
    }

    #[test]
    fn the_gateway_declares_its_transport_features_and_passes_the_clients_others() {
        let node = Node {
            id: "n".into(),
            client_features: vec![
                "envoy.lb.does_not_support_overprovisioning".into(),
                "xds.config.a-future-transport-feature".into(),
                "xds.config.supports-resource-ttl".into(),
            ],
            ..Node::default()
        };
        let sent = NodeInterner::default().intern(node);
        let decoded = Node::decode(sent.bytes().parts().concat().as_slice()).unwrap();
        assert_eq!(
            decoded.client_features,
            [
                "envoy.lb.does_not_support_overprovisioning",
                "xds.config.supports-resource-in-sotw",
                "xds.config.supports-resource-ttl",
            ]
        );
    }
    use envoy_types::pb::envoy::config::core::v3::Extension;

    /// A megabyte of client features (outside the
    /// session key) is not what every request upstream carries; the key's
    /// fields, the gateway's own features and an Envoy's extensions are.
    #[test]
    fn what_lies_beyond_the_session_key_is_bounded() {
        let mut big = node("n", 500);
        big.client_features = (0..20_000)
            .map(|i| format!("feature.padding.{i:040}"))
            .collect();
        big.metadata = Some(envoy_types::pb::google::protobuf::Struct::default());
        let sent = NodeInterner::default().intern(big);
        let decoded = sent.node();
        assert_eq!(decoded.client_features, GATEWAY_FEATURES);
        assert_eq!(decoded.extensions.len(), 500, "Envoy's own list fits");
        assert_eq!(decoded.id, "n");
        assert!(decoded.metadata.is_some());
        assert!(
            sent.bytes().len() < REMAINDER_BYTES,
            "{}",
            sent.bytes().len()
        );
        assert_eq!(sent.sent_view().left_out, ["client_features"]);
        // An ordinary node loses nothing.
        let plain = NodeInterner::default().intern(node("n", 500));
        assert!(plain.sent_view().left_out.is_empty());
        assert_eq!(plain.node(), node("n", 500));
    }

    fn node(id: &str, extensions: usize) -> Node {
        Node {
            id: id.into(),
            cluster: "c".into(),
            user_agent_name: "envoy".into(),
            // As sent upstream: the gateway's transport features.
            client_features: GATEWAY_FEATURES.map(str::to_owned).to_vec(),
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
        assert!(a.own_bytes() < 128, "{}", a.own_bytes());
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
